#include "train/args/moe_arguments.h"

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "core/strict_number.h"
#include "train/args/flag_enums.h"
#include "train/args/flag_table.h"
#include "train/args/moe_layer_pattern.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::num_experts)

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// The MoE rows whose flags need --num-experts (every row of the group but --num-experts).
constexpr ArgumentField kNeedExperts[] = {
    &A::moe_ffn_hidden_size, &A::moe_layer_freq, &A::moe_shared_expert_intermediate_size,
    &A::moe_shared_expert_overlap, &A::moe_router_topk, &A::moe_router_score_function, &A::moe_router_pre_softmax,
    &A::moe_router_topk_scaling_factor, &A::moe_router_dtype, &A::moe_router_num_groups, &A::moe_router_group_topk,
    &A::moe_router_enable_expert_bias, &A::moe_router_bias_update_rate, &A::moe_router_load_balancing_type,
    &A::moe_aux_loss_coeff, &A::moe_z_loss_coeff, &A::moe_expert_capacity_factor, &A::moe_token_drop_policy,
    &A::moe_pad_expert_input_to_capacity, &A::moe_grouped_gemm, &A::moe_permute_fusion, &A::moe_router_fusion,
    &A::moe_token_dispatcher_type, &A::moe_per_layer_logging};

absl::Status validate_router(const Arguments& a) {
  const int64_t experts = a.num_experts, k = a.moe_router_topk;
  if (k > experts) {
    return invalid(absl::StrCat(flag_name(&A::moe_router_topk), " (", k, ") must not exceed ", flag_name(&A::num_experts),
                                " (", experts, ")"));
  }
  const RouterScore score = router_score(a);
  const std::vector<LoadBalancing> types = load_balancing_types(a);
  const bool sinkhorn = std::find(types.begin(), types.end(), LoadBalancing::kSinkhorn) != types.end();
  // Megatron's TransformerConfig: a softmax over one selected logit is constant (no router gradient).
  if (k == 1 && score == RouterScore::kSoftmax && !a.moe_router_pre_softmax && !sinkhorn) {
    return invalid(absl::StrCat(flag_name(&A::moe_router_topk), " 1 with softmax scores needs ",
                                flag_name(&A::moe_router_pre_softmax), " (a softmax over one logit is 1: the router "
                                "would get no gradient), as Megatron requires"));
  }
  const bool groups = flag_given(a, &A::moe_router_num_groups), group_topk = flag_given(a, &A::moe_router_group_topk);
  if (groups != group_topk) {
    return invalid(absl::StrCat(flag_name(&A::moe_router_num_groups), " and ", flag_name(&A::moe_router_group_topk),
                                " go together (group-limited routing)"));
  }
  if (groups) {
    const int64_t g = a.moe_router_num_groups, top = a.moe_router_group_topk;
    if (experts % g != 0) {
      return invalid(absl::StrCat(flag_name(&A::moe_router_num_groups), " (", g, ") must divide ",
                                  flag_name(&A::num_experts), " (", experts, ")"));
    }
    if (top > g) {
      return invalid(absl::StrCat(flag_name(&A::moe_router_group_topk), " (", top, ") must not exceed ",
                                  flag_name(&A::moe_router_num_groups), " (", g, ")"));
    }
    if (top > k || top * (experts / g) < k) {
      return invalid(absl::StrCat(flag_name(&A::moe_router_group_topk), " (", top, ") must be at most ",
                                  flag_name(&A::moe_router_topk), " (", k, "), and its groups must hold ", k,
                                  " experts (each group has ", experts / g, ")"));
    }
  }
  if (a.moe_router_enable_expert_bias && score != RouterScore::kSigmoid) {
    return invalid(absl::StrCat(flag_name(&A::moe_router_enable_expert_bias), " needs ",
                                flag_name(&A::moe_router_score_function), " sigmoid, as Megatron requires"));
  }
  if (flag_given(a, &A::moe_router_bias_update_rate) && !a.moe_router_enable_expert_bias) {
    return invalid(absl::StrCat(flag_name(&A::moe_router_bias_update_rate), " applies only with ",
                                flag_name(&A::moe_router_enable_expert_bias)));
  }
  if (router_dtype(a) == RouterDtype::kFp64) {
    return invalid(absl::StrCat(flag_name(&A::moe_router_dtype),
                                " fp64 is not available in this program (its router runs in FP32)"));
  }
  return absl::OkStatus();
}

absl::Status validate_load_balancing(const Arguments& a) {
  for (const std::string& type : a.moe_router_load_balancing_type) {
    if (type == "quantile_balancing") {  // one of Megatron's choices, not built here
      return invalid(absl::StrCat(flag_name(&A::moe_router_load_balancing_type),
                                  " quantile_balancing is not available in this program (aux_loss, seq_aux_loss, global_aux_loss, "
                                  "sinkhorn or none)"));
    }
    if (!parse_flag_enum<LoadBalancing>(type)) {
      return invalid(absl::StrCat(flag_name(&A::moe_router_load_balancing_type), " must be ",
                                  names_for_message(flag_enum_names<LoadBalancing>()), " (got ", type, ")"));
    }
    // Megatron routes by sinkhorn only when it is the one type (a list containing it routes by top-k).
    if (type == "sinkhorn" && a.moe_router_load_balancing_type.size() > 1) {
      return invalid(absl::StrCat(flag_name(&A::moe_router_load_balancing_type),
                                  " sinkhorn stands alone (it is a routing, not a loss to combine)"));
    }
  }
  const absl::StatusOr<std::vector<double>> coefficients = moe_aux_loss_coefficients(a);
  GPT_RETURN_IF_ERROR(coefficients.status());
  if (a.moe_router_load_balancing_type == std::vector<std::string>{"sinkhorn"} && coefficients->front() != 0) {
    return invalid(absl::StrCat(flag_name(&A::moe_router_load_balancing_type), " sinkhorn has no auxiliary loss: ",
                                flag_name(&A::moe_aux_loss_coeff), " must be 0, as Megatron requires"));
  }
  return absl::OkStatus();
}

absl::Status validate_dropping(const Arguments& a) {
  const bool capacity = flag_given(a, &A::moe_expert_capacity_factor);
  if (capacity && !(a.moe_expert_capacity_factor > 0)) {
    return invalid(absl::StrCat(flag_name(&A::moe_expert_capacity_factor), " must be positive (got ",
                                a.moe_expert_capacity_factor, "); leave it out for dropless routing"));
  }
  // From num_experts / topk on, an expert's capacity is every token of the microbatch (nothing is
  // dropped; model/moe_config.cc caps it there), so a larger factor means the same: bounded, so
  // that capacity = ceil(tokens x topk / experts x factor) stays a small integer.
  if (capacity && a.moe_expert_capacity_factor > static_cast<double>(a.num_experts)) {
    return invalid(absl::StrCat(flag_name(&A::moe_expert_capacity_factor), " (", a.moe_expert_capacity_factor,
                                ") must be at most ", flag_name(&A::num_experts), " (", a.num_experts,
                                "): from num_experts / topk on, every token fits"));
  }
  if (capacity && a.moe_router_load_balancing_type == std::vector<std::string>{"sinkhorn"}) {
    return invalid(absl::StrCat(flag_name(&A::moe_expert_capacity_factor), " does not work with ",
                                flag_name(&A::moe_router_load_balancing_type), " sinkhorn, as in Megatron"));
  }
  for (ArgumentField field : {ArgumentField(&A::moe_token_drop_policy), ArgumentField(&A::moe_pad_expert_input_to_capacity)}) {
    if (flag_given(a, field) && !capacity) {
      return invalid(absl::StrCat(flag_name(field), " applies only with ", flag_name(&A::moe_expert_capacity_factor),
                                  " (without it every token is kept)"));
    }
  }
  return absl::OkStatus();
}

// The experts' weights (fc1 [2f, h] with a GLU, fc2 [h, f]: at most 3 f h each), over every layer,
// and their gradients and Adam moments in FP32 (16 bytes an element) must be countable in 64 bits:
// the memory plan then refuses what does not fit; past that its sums wrapped (INT64_MAX sizes aborted).
absl::Status validate_moe_sizes(const Arguments& a) {
  const int64_t h = a.hidden_size, layers = a.num_layers;
  const int64_t ffn = a.moe_ffn_hidden_size > 0 ? a.moe_ffn_hidden_size : a.ffn_hidden_size;
  if (!checked_product(a.num_experts, ffn, h, layers, 3, 16)) {
    return invalid(absl::StrCat(flag_name(&A::num_experts), " ", a.num_experts, " x ",
                                flag_name(&A::moe_ffn_hidden_size), " ", ffn, " x ", flag_name(&A::hidden_size), " ", h,
                                " x ", layers, " layers: the experts' bytes overflow a 64-bit count; the layout is far "
                                "too large"));
  }
  if (!checked_product(a.moe_shared_expert_intermediate_size, h, layers, 3, 16)) {
    return invalid(absl::StrCat(flag_name(&A::moe_shared_expert_intermediate_size), " ",
                                a.moe_shared_expert_intermediate_size, " x ", flag_name(&A::hidden_size), " ", h, " x ",
                                layers, " layers: the shared expert's bytes overflow a 64-bit count; the layout is far "
                                "too large"));
  }
  return absl::OkStatus();
}

// What this program composes MoE layers with, and Megatron's layout rules for them.
absl::Status validate_moe_layout(const Arguments& a) {
  const int64_t tp = a.tensor_model_parallel_size;
  if (tp > 1 && !a.sequence_parallel) {
    return invalid(absl::StrCat("MoE layers with ", flag_name(&A::tensor_model_parallel_size), " ", tp, " need ",
                                flag_name(&A::sequence_parallel), ", as Megatron requires in training"));
  }
  const int64_t etp = flag_given(a, &A::expert_tensor_parallel_size) ? a.expert_tensor_parallel_size : tp;
  if (!a.disable_bias_linear && etp > 1) {
    return invalid(absl::StrCat("MoE layers with linear biases need an expert tensor-parallel size of 1 (got ", etp,
                                flag_given(a, &A::expert_tensor_parallel_size) ? "" : ", from --tensor-model-parallel-size",
                                "), as Megatron requires: give ", flag_name(&A::disable_bias_linear), " or ",
                                flag_name(&A::expert_tensor_parallel_size), " 1"));
  }
  if (!a.disable_bias_linear && a.moe_shared_expert_intermediate_size > 0) {
    return invalid(absl::StrCat(flag_name(&A::moe_shared_expert_intermediate_size),
                                ": the shared expert has no biases (as in Megatron): give ",
                                flag_name(&A::disable_bias_linear)));
  }
  if (a.moe_shared_expert_overlap && token_dispatcher(a) == TokenDispatcher::kAllgather) {
    return invalid(absl::StrCat(flag_name(&A::moe_shared_expert_overlap), " needs ",
                                flag_name(&A::moe_token_dispatcher_type), " alltoall, as Megatron requires"));
  }
  if (token_dispatcher(a) == TokenDispatcher::kFlex) {
    return invalid(absl::StrCat(flag_name(&A::moe_token_dispatcher_type),
                                " flex is not available in this program (DeepEP / HybridEP); use allgather or alltoall"));
  }
  if (a.num_experts % a.expert_model_parallel_size != 0) {
    return invalid(absl::StrCat(flag_name(&A::num_experts), " (", a.num_experts, ") must be a multiple of ",
                                flag_name(&A::expert_model_parallel_size), " (", a.expert_model_parallel_size,
                                "): each expert-parallel rank holds the same number of experts, as Megatron requires"));
  }
  if (!a.fp8_format.empty()) {
    return invalid(absl::StrCat(flag_name(&A::fp8_format),
                                " is not available with MoE layers in this program yet (the experts' grouped GEMMs "
                                "run in the model's dtype)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<double>> moe_aux_loss_coefficients(const Arguments& a) {
  const size_t types = a.moe_router_load_balancing_type.size(), given = a.moe_aux_loss_coeff.size();
  if (given != types && given != 1) {
    return invalid(absl::StrCat(flag_name(&A::moe_aux_loss_coeff), " gives ", given, " values for ", types,
                                " load-balancing types (", flag_name(&A::moe_router_load_balancing_type),
                                "): one per type"));
  }
  std::vector<double> values;
  for (const std::string& text : a.moe_aux_loss_coeff) {
    const absl::StatusOr<double> value = parse_finite_number(text);
    if (!value.ok() || *value < 0) {
      return invalid(absl::StrCat(flag_name(&A::moe_aux_loss_coeff), " must be a non-negative number (got ", text, ")"));
    }
    values.push_back(*value);
  }
  if (given == 1) values.assign(types, values.front());
  return values;
}

absl::Status validate_moe_arguments(const Arguments& a) {
  if (a.expert_model_parallel_size < 1) {
    return invalid(absl::StrCat(flag_name(&A::expert_model_parallel_size), " must be at least 1 (got ",
                                a.expert_model_parallel_size, ")"));
  }
  if (a.expert_model_parallel_size > 1 && a.num_experts <= 0) {
    return invalid(absl::StrCat(flag_name(&A::expert_model_parallel_size), " ", a.expert_model_parallel_size,
                                " applies only with ", flag_name(&A::num_experts), " (a mixture-of-experts model)"));
  }
  if (a.num_experts <= 0) {
    for (ArgumentField field : kNeedExperts) {
      if (flag_given(a, field)) {
        return invalid(absl::StrCat(flag_name(field), " applies only with ", flag_name(&A::num_experts),
                                    " (a mixture-of-experts model)"));
      }
    }
    return absl::OkStatus();
  }
  const absl::StatusOr<std::vector<bool>> pattern = moe_layer_pattern(a.moe_layer_freq, a.num_layers);
  if (!pattern.ok()) return invalid(absl::StrCat(flag_name(&A::moe_layer_freq), " ", pattern.status().message()));
  GPT_RETURN_IF_ERROR(validate_moe_sizes(a));
  GPT_RETURN_IF_ERROR(validate_load_balancing(a));  // first: validate_router reads the balancing types
  GPT_RETURN_IF_ERROR(validate_router(a));
  GPT_RETURN_IF_ERROR(validate_dropping(a));
  return validate_moe_layout(a);
}

}  // namespace gpt
