#include "train/model_arguments.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "train/flag_enums.h"

namespace gpt {
namespace {
absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status validate_dropout(const char* flag, double probability) {
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
  GPT_RETURN_IF_ERROR(validate_dropout("--hidden-dropout", a.hidden_dropout));
  GPT_RETURN_IF_ERROR(validate_dropout("--attention-dropout", a.attention_dropout));

  // Position embeddings.
  const std::string& type = a.position_embedding_type;
  if (type == "relative" || type == "mrope" || type == "yarn") {
    return invalid(absl::StrCat("--position-embedding-type ", type,
                                " is not available in this program (learned_absolute, rope or none)"));
  }
  if (!parse_flag_enum<PositionEmbedding>(type)) {
    return invalid(absl::StrCat("--position-embedding-type must be ",
                                names_for_message(flag_enum_names<PositionEmbedding>()), " (got ", type, ")"));
  }
  // --no-position-embedding made learned_absolute none in resolve_defaults.
  const bool rope = position_embedding(a) == PositionEmbedding::kRope;
  if (!rope) {
    for (const char* flag : {"--rotary-percent", "--rotary-base"}) {
      if (a.was_given(flag)) {
        return invalid(absl::StrCat(flag, " applies only with --position-embedding-type rope (got ",
                                    a.position_embedding_type, ")"));
      }
    }
  } else {
    if (!(a.rotary_percent > 0.0 && a.rotary_percent <= 1.0)) {
      return invalid(absl::StrCat("--rotary-percent must be in (0, 1] (got ", a.rotary_percent, ")"));
    }
    const int64_t rotary = rotary_dimensions(a);
    if (rotary < 2 || rotary % 2 != 0) {
      return invalid(absl::StrCat("--rotary-percent (", a.rotary_percent, ") x --kv-channels (", a.kv_channels,
                                  ") must give an even number of rotated dimensions, at least 2 (got ", rotary, ")"));
    }
    if (!(a.rotary_base > 1.0) || a.rotary_base > static_cast<double>(std::numeric_limits<float>::max())) {
      return invalid(absl::StrCat("--rotary-base must be greater than 1 and within FP32 (got ", a.rotary_base, ")"));
    }
  }
  if (a.rotary_interleaved && !rope) {
    return invalid("--rotary-interleaved needs --position-embedding-type rope (it says how RoPE pairs dimensions)");
  }

  // --normalization: one of its names (the row's constraint).

  // Squared ReLU (Megatron's core_transformer_config_from_args asserts it is not combined with
  // --swiglu; its TransformerConfig refuses a fused bias-activation with it, which is on by default
  // with linear biases).
  if (a.squared_relu && a.swiglu) return invalid("--squared-relu and --swiglu cannot both be given (one MLP activation)");
  if (a.squared_relu && !a.disable_bias_linear && !a.no_bias_gelu_fusion) {
    return invalid("--squared-relu with linear biases needs --no-bias-gelu-fusion (Megatron's fused bias-activation "
                   "takes only GeLU and SwiGLU) or --disable-bias-linear");
  }

  // Grouped-query attention: heads in groups sharing one key and value head; tensor parallelism
  // splits whole groups.
  if (!a.group_query_attention) {
    if (a.was_given("--num-query-groups")) {
      return invalid("--num-query-groups needs --group-query-attention (without it every head has its own key and "
                     "value)");
    }
  } else {
    if (a.num_query_groups < 1) {
      return invalid(absl::StrCat("--num-query-groups must be a positive integer (got ", a.num_query_groups, ")"));
    }
    if (a.num_attention_heads % a.num_query_groups != 0) {
      return invalid(absl::StrCat("--num-attention-heads (", a.num_attention_heads,
                                  ") must be divisible by --num-query-groups (", a.num_query_groups, ")"));
    }
    if (a.num_query_groups % a.tensor_model_parallel_size != 0) {
      return invalid(absl::StrCat("--num-query-groups (", a.num_query_groups,
                                  ") must be divisible by --tensor-model-parallel-size (",
                                  a.tensor_model_parallel_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gpt
