// The flag table's rows for Megatron's mixture-of-experts argument group (_add_moe_args), in
// --help's order (train/args/flag_table.h says what a row holds; train/args/moe_arguments.h checks
// the combinations; model/moe_config.h is what the model reads).
#include "core/strict_number.h"
#include "train/args/flag_enums.h"
#include "train/args/flag_rows.h"

namespace gpt {
namespace {

using A = Arguments;
using enum FlagStatus;
using enum PyRule;

// Megatron's --moe-aux-loss-coeff: a float, or a list of floats with a list of balancing types.
// The table is shown before validation too (moe_arguments.cc refuses a text that is not a finite
// number): such a text is shown as given instead of throwing.
PyValue aux_loss_coeff_value(const Arguments& a) {
  if (a.moe_aux_loss_coeff.size() != 1) return a.moe_aux_loss_coeff;
  const absl::StatusOr<double> value = parse_finite_number(a.moe_aux_loss_coeff.front());
  return value.ok() ? PyValue(*value) : PyValue(a.moe_aux_loss_coeff.front());
}
PyValue load_balancing_value(const Arguments& a) {
  if (a.moe_router_load_balancing_type.size() == 1) return a.moe_router_load_balancing_type.front();
  return a.moe_router_load_balancing_type;
}
PyValue none_if_not_positive(const Arguments& a, double value) {
  (void)a;
  return value > 0 ? PyValue(value) : PyValue();
}

constexpr FlagRow kRows[] = {
    row("--num-experts", &A::num_experts, "Number of experts in each MoE layer (none: a dense model)")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--moe-ffn-hidden-size", &A::moe_ffn_hidden_size,
        "Each expert's MLP hidden size (default --ffn-hidden-size)")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--moe-layer-freq", &A::moe_layer_freq,
        "Which layers are MoE layers: an int N (every N-th layer, starting with layer 0) or a Python list "
        "expression of 0/1 per layer, e.g. ([0]*1+[1]*3)*2"),
    row("--moe-shared-expert-intermediate-size", &A::moe_shared_expert_intermediate_size,
        "Hidden size of the shared expert every token passes through (none: no shared expert)")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--moe-shared-expert-overlap", &A::moe_shared_expert_overlap,
        "Overlap the shared expert with the token dispatch (a schedule choice: the same numbers)")
        .megatron(kImplementation, "accepted: the shared expert runs beside the routed experts with the same numbers"),
    row("--moe-router-topk", &A::moe_router_topk, "Experts each token is routed to").positive(),
    row("--moe-router-score-function", &A::moe_router_score_function, "softmax or sigmoid routing scores")
        .one_of(flag_enum_names<RouterScore>())
        .megatron(kRefusedAtValues, "softmax and sigmoid; sqrtsoftplus is refused (not built)"),
    row("--moe-router-pre-softmax", &A::moe_router_pre_softmax,
        "Softmax over all experts before the top-k (default: top-k of the logits, then softmax over the k)"),
    row("--moe-router-topk-scaling-factor", &A::moe_router_topk_scaling_factor,
        "Factor the top-k routing weights are multiplied by (none: 1)")
        .positive_if_given()
        .shown([](const Arguments& a) { return none_if_not_positive(a, a.moe_router_topk_scaling_factor); }),
    row("--moe-router-dtype", &A::moe_router_dtype,
        "Data type of the router's logits, scores and routing weights: fp32 or fp64 (none: the model's dtype)")
        .one_of(flag_enum_names<RouterDtype>())
        .shown(kNoneIfEmpty)
        .megatron(kRefusedAtValues,
                  "fp32 as Megatron's; fp64 is refused (the router runs in FP32 here); without the flag the router "
                  "still runs in FP32 here (Megatron's runs in the model's dtype), the more precise of the two"),
    row("--moe-router-num-groups", &A::moe_router_num_groups,
        "Group-limited routing: the experts split into this many groups (devices or nodes)")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--moe-router-group-topk", &A::moe_router_group_topk,
        "Group-limited routing: tokens routed within this many groups")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--moe-router-enable-expert-bias", &A::moe_router_enable_expert_bias,
        "Auxiliary-loss-free balancing: a per-expert bias added to the scores for the selection only, moved once "
        "per global batch toward the mean load"),
    row("--moe-router-bias-update-rate", &A::moe_router_bias_update_rate,
        "Step of the expert bias update (with --moe-router-enable-expert-bias)")
        .non_negative(),
    row("--moe-router-load-balancing-type", &A::moe_router_load_balancing_type,
        "aux_loss, seq_aux_loss, global_aux_loss, sinkhorn or none; several auxiliary losses as a list, each "
        "with its --moe-aux-loss-coeff")
        .takes(Nargs::kOneOrMore)
        .shown(load_balancing_value)
        .megatron(kRefusedAtValues, "aux_loss, seq_aux_loss, global_aux_loss, sinkhorn and none; "
                                    "quantile_balancing is refused (not built)"),
    row("--moe-aux-loss-coeff", &A::moe_aux_loss_coeff,
        "Scale of the auxiliary load-balancing loss (one per --moe-router-load-balancing-type)")
        .takes(Nargs::kOneOrMore)
        .shown(aux_loss_coeff_value),
    row("--moe-z-loss-coeff", &A::moe_z_loss_coeff, "Scale of the router z-loss (none: no z-loss)")
        .non_negative()
        .shown([](const Arguments& a) { return none_if_not_positive(a, a.moe_z_loss_coeff); }),
    row("--moe-expert-capacity-factor", &A::moe_expert_capacity_factor,
        "Each expert's capacity in tokens as a multiple of the even share (none: dropless)")
        .shown(kNoneIfNegative),
    row("--moe-token-drop-policy", &A::moe_token_drop_policy,
        "With a capacity, the tokens an over-full expert keeps: probs (the highest routing weights) or position "
        "(the first in the microbatch)")
        .one_of(flag_enum_names<TokenDropPolicy>()),
    row("--moe-pad-expert-input-to-capacity", &A::moe_pad_expert_input_to_capacity,
        "With a capacity, pad each expert's input to the capacity"),
    row("--moe-grouped-gemm", &A::moe_grouped_gemm, "One grouped GEMM over the experts (the same numbers)")
        .megatron(kImplementation, "accepted: the experts always run as one grouped GEMM over their row ranges here"),
    row("--moe-permute-fusion", &A::moe_permute_fusion, "Fused token permutation (the same numbers)")
        .megatron(kImplementation, "accepted: the permutation is always one fused gather here"),
    row("--moe-router-fusion", &A::moe_router_fusion, "Fused router top-k and scores (the same numbers)")
        .megatron(kImplementation, "accepted: the router's scores and top-k are always one fused op here"),
    row("--moe-token-dispatcher-type", &A::moe_token_dispatcher_type,
        "allgather (every expert rank sees its group's tokens; outputs reduce-scattered) or alltoall (only the "
        "routed tokens exchanged): the same numbers; flex is refused")
        .one_of(flag_enum_names<TokenDispatcher>())
        .megatron(kRefusedAtValues, "allgather and alltoall; flex (DeepEP / HybridEP) is refused"),
    row("--moe-per-layer-logging", &A::moe_per_layer_logging,
        "Log each MoE layer's load-balancing loss and z-loss (TensorBoard and the metrics file)"),
    row("--expert-model-parallel-size", &A::expert_model_parallel_size,
        "Expert-parallel size EP: each of EP ranks holds --num-experts / EP of every MoE layer's experts, tokens "
        "exchanged over the expert tensor x model group (Megatron's expert grid: ETP x EP x expert DP x PP)"),
};
static_assert(rows_are_consistent(kRows));

}  // namespace

std::span<const FlagRow> moe_flag_rows() { return kRows; }

}  // namespace gpt
