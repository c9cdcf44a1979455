#include "train/args/model_arguments.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "train/args/flag_enums.h"
#include "train/args/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {
absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status validate_dropout(absl::string_view flag, double probability) {
  if (!(probability >= 0.0 && probability < 1.0)) {
    return invalid(absl::StrCat(flag, " must be in [0, 1) (got ", probability, ")"));
  }
  return absl::OkStatus();
}
}  // namespace

int64_t rotary_dimensions(const Arguments& a) {
  if (a.rotary_percent >= 1.0) return a.kv_channels;
  return static_cast<int64_t>(static_cast<double>(a.kv_channels) * a.rotary_percent);
}

absl::Status validate_model_family(const Arguments& a) {
  GPT_RETURN_IF_ERROR(validate_dropout(flag_name(&A::hidden_dropout), a.hidden_dropout));
  GPT_RETURN_IF_ERROR(validate_dropout(flag_name(&A::attention_dropout), a.attention_dropout));

  // Position embeddings.
  const std::string& type = a.position_embedding_type;
  if (type == "relative" || type == "mrope" || type == "yarn") {
    return invalid(absl::StrCat(flag_name(&A::position_embedding_type), " ", type,
                                " is not available in this program (learned_absolute, rope or none)"));
  }
  if (!parse_flag_enum<PositionEmbedding>(type)) {
    return invalid(absl::StrCat(flag_name(&A::position_embedding_type), " must be ",
                                names_for_message(flag_enum_names<PositionEmbedding>()), " (got ", type, ")"));
  }
  // --no-position-embedding made learned_absolute none in resolve_defaults.
  const bool rope = position_embedding(a) == PositionEmbedding::kRope;
  if (!rope) {
    for (absl::string_view flag : {flag_name(&A::rotary_percent), flag_name(&A::rotary_base)}) {
      if (a.was_given(std::string(flag))) {
        return invalid(absl::StrCat(flag, " applies only with ", flag_name(&A::position_embedding_type), " rope (got ",
                                    a.position_embedding_type, ")"));
      }
    }
  } else {
    if (!(a.rotary_percent > 0.0 && a.rotary_percent <= 1.0)) {
      return invalid(absl::StrCat(flag_name(&A::rotary_percent), " must be in (0, 1] (got ", a.rotary_percent, ")"));
    }
    const int64_t rotary = rotary_dimensions(a);
    if (rotary < 2 || rotary % 2 != 0) {
      return invalid(absl::StrCat(flag_name(&A::rotary_percent), " (", a.rotary_percent, ") x ",
                                  flag_name(&A::kv_channels), " (", a.kv_channels,
                                  ") must give an even number of rotated dimensions, at least 2 (got ", rotary, ")"));
    }
    if (!(a.rotary_base > 1.0) || a.rotary_base > static_cast<double>(std::numeric_limits<float>::max())) {
      return invalid(absl::StrCat(flag_name(&A::rotary_base), " must be greater than 1 and within FP32 (got ",
                                  a.rotary_base, ")"));
    }
  }
  if (a.use_rope_scaling && !rope) {
    return invalid(absl::StrCat(flag_name(&A::use_rope_scaling), " needs ", flag_name(&A::position_embedding_type),
                                " rope (it scales RoPE's frequencies)"));
  }
  if (!(a.rope_scaling_factor <= static_cast<double>(std::numeric_limits<float>::max()))) {
    return invalid(absl::StrCat(flag_name(&A::rope_scaling_factor), " must be within FP32 (got ",
                                a.rope_scaling_factor, ")"));
  }
  if (a.rotary_interleaved && !rope) {
    return invalid(absl::StrCat(flag_name(&A::rotary_interleaved), " needs ", flag_name(&A::position_embedding_type),
                                " rope (it says how RoPE pairs dimensions)"));
  }

  // --normalization: one of its names (the row's constraint).

  // Squared ReLU (Megatron's core_transformer_config_from_args asserts it is not combined with
  // --swiglu; its TransformerConfig refuses a fused bias-activation with it, which is on by default
  // with linear biases).
  if (a.squared_relu && a.swiglu)
    return invalid(absl::StrCat(flag_name(&A::squared_relu), " and ", flag_name(&A::swiglu),
                                " cannot both be given (one MLP activation)"));
  if (a.squared_relu && !a.disable_bias_linear && !a.no_bias_gelu_fusion) {
    return invalid(absl::StrCat(flag_name(&A::squared_relu), " with linear biases needs ",
                                flag_name(&A::no_bias_gelu_fusion),
                                " (Megatron's fused bias-activation "
                                "takes only GeLU and SwiGLU) or ",
                                flag_name(&A::disable_bias_linear)));
  }

  // Grouped-query attention: heads in groups sharing one key and value head; tensor parallelism
  // splits whole groups.
  if (!a.group_query_attention) {
    if (flag_given(a, &A::num_query_groups)) {
      return invalid(absl::StrCat(flag_name(&A::num_query_groups), " needs ", flag_name(&A::group_query_attention),
                                  " (without it every head has its own key and "
                                  "value)"));
    }
  } else {
    if (a.num_query_groups < 1) {
      return invalid(
          absl::StrCat(flag_name(&A::num_query_groups), " must be a positive integer (got ", a.num_query_groups, ")"));
    }
    if (a.num_attention_heads % a.num_query_groups != 0) {
      return invalid(absl::StrCat(flag_name(&A::num_attention_heads), " (", a.num_attention_heads,
                                  ") must be divisible by ", flag_name(&A::num_query_groups), " (", a.num_query_groups,
                                  ")"));
    }
    if (a.num_query_groups % a.tensor_model_parallel_size != 0) {
      return invalid(absl::StrCat(flag_name(&A::num_query_groups), " (", a.num_query_groups, ") must be divisible by ",
                                  flag_name(&A::tensor_model_parallel_size), " (", a.tensor_model_parallel_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gpt
