#include "perf_model/moe_ops.h"

#include "core/dtype.h"

namespace gpt::perf {
namespace {

Op gemm(std::string name, double m, double n, double k, double count, bool weight_gradient = false) {
  Op op{.name = std::move(name), .kind = OpKind::kGemm, .m = m, .n = n, .k = k, .count = count};
  op.weight_gradient = weight_gradient;
  return op;
}
Op memory(std::string name, double bytes) { return {.name = std::move(name), .kind = OpKind::kMemory, .bytes = bytes}; }
Op collective(std::string name, OpKind kind, CommGroup group, double bytes) {
  return {.name = std::move(name), .kind = kind, .group = group, .bytes = bytes};
}

// The router's FP32 scores: logits read, softmax / sigmoid written, top-k read (3 passes of 4 bytes).
constexpr double kRouterPasses = 3 * 4.0;

}  // namespace

void routed_expert_ops(const ModelConfig& c, const LayerShapes& s, const LayerOpOptions& o, std::vector<Op>& f,
                       std::vector<Op>& g) {
  const ExpertParallel& x = o.expert;
  const double t = static_cast<double>(dtype_size(c.dtype));
  const double h = static_cast<double>(s.hidden), experts = static_cast<double>(c.moe.num_experts);
  const double k = static_cast<double>(c.moe.topk);
  const double ep = static_cast<double>(x.expert_model), etp = static_cast<double>(x.expert_tensor);
  const double owned = static_cast<double>(s.local_rows());  // R
  const double router_rows = x.route_gathered_rows ? static_cast<double>(s.rows()) : owned;
  const double ffn = static_cast<double>(c.moe.ffn_hidden_size) / etp;
  const double fc1 = (c.swiglu ? 2.0 : 1.0) * ffn;
  const double local_experts = experts / ep;
  const double pairs = etp * owned * k * x.imbalance;  // P: rows through the local experts
  const double rows_per_expert = pairs / local_experts;
  const double exchange_rows = etp * ep * owned;                // G R
  const double routed_bytes = x.imbalance * owned * k * h * t;  // the busiest rank's pairs
  // The allgather dispatcher gathers nothing more when its exchange group is the TP group whose
  // all-gather of the norm output the router already made (EP 1, ETP = TP: today's one-rank code).
  const bool tp_is_exchange = x.expert_model == 1 && x.expert_tensor == o.tensor_parallel;
  const bool gathered = x.route_gathered_rows && o.sequence_parallel && tp_is_exchange;
  const bool exchange = x.expert_model * x.expert_tensor > 1;

  f.push_back(gemm("router", router_rows, experts, h, 1));
  f.push_back(memory("router scores and top-k", kRouterPasses * router_rows * experts));
  if (x.all_to_all) {
    if (x.expert_model > 1)
      f.push_back(collective("dispatch all-to-all", OpKind::kAllToAll, CommGroup::kExpertModel, routed_bytes));
    if (x.expert_tensor > 1) {
      f.push_back(
          collective("dispatch all-gather (ETP)", OpKind::kAllGather, CommGroup::kExpertTensor, etp * routed_bytes));
    }
  } else if (exchange && !gathered) {
    f.push_back(
        collective("dispatch all-gather", OpKind::kAllGather, CommGroup::kExpertExchange, exchange_rows * h * t));
  }
  f.push_back(memory("permute", 2 * t * pairs * h));
  f.push_back(gemm("experts fc1", rows_per_expert, fc1, h, local_experts));
  f.push_back(memory(c.swiglu ? "experts swiglu" : "experts gelu", t * pairs * (fc1 + ffn)));
  f.push_back(gemm("experts fc2", rows_per_expert, h, ffn, local_experts));
  f.push_back(memory("unpermute and combine", 2 * t * pairs * h));
  if (x.all_to_all) {
    if (x.expert_tensor > 1) {
      f.push_back(collective("combine reduce-scatter (ETP)", OpKind::kReduceScatter, CommGroup::kExpertTensor,
                             etp * routed_bytes));
    }
    if (x.expert_model > 1)
      f.push_back(collective("combine all-to-all", OpKind::kAllToAll, CommGroup::kExpertModel, routed_bytes));
  } else if (exchange) {
    f.push_back(collective("combine reduce-scatter", OpKind::kReduceScatter, CommGroup::kExpertExchange,
                           exchange_rows * h * t));
  }

  // Backward, in the order it runs: the combine's transpose first.
  if (x.all_to_all) {
    if (x.expert_model > 1)
      g.push_back(collective("combine backward all-to-all", OpKind::kAllToAll, CommGroup::kExpertModel, routed_bytes));
    if (x.expert_tensor > 1) {
      g.push_back(collective("combine backward all-gather (ETP)", OpKind::kAllGather, CommGroup::kExpertTensor,
                             etp * routed_bytes));
    }
  } else if (exchange) {
    g.push_back(collective("combine backward all-gather", OpKind::kAllGather, CommGroup::kExpertExchange,
                           exchange_rows * h * t));
  }
  g.push_back(memory("unpermute backward", 2 * t * pairs * h));
  g.push_back(gemm("experts fc2 input gradient", rows_per_expert, ffn, h, local_experts));
  g.push_back(gemm("experts fc2 weight gradient", ffn, h, rows_per_expert, local_experts, true));
  // With --add-bias-linear, each bias gradient reads its output gradient (as the dense layer's).
  if (c.add_bias_linear) g.push_back(memory("experts fc2 bias gradient", t * pairs * h));
  g.push_back(memory(c.swiglu ? "experts swiglu backward" : "experts gelu backward", t * pairs * (ffn + 2 * fc1)));
  g.push_back(gemm("experts fc1 input gradient", rows_per_expert, h, fc1, local_experts));
  g.push_back(gemm("experts fc1 weight gradient", h, fc1, rows_per_expert, local_experts, true));
  if (c.add_bias_linear) g.push_back(memory("experts fc1 bias gradient", t * pairs * fc1));
  g.push_back(memory("permute backward", 2 * t * pairs * h));
  if (x.all_to_all) {
    if (x.expert_tensor > 1) {
      g.push_back(collective("dispatch backward reduce-scatter (ETP)", OpKind::kReduceScatter, CommGroup::kExpertTensor,
                             etp * routed_bytes));
    }
    if (x.expert_model > 1)
      g.push_back(collective("dispatch backward all-to-all", OpKind::kAllToAll, CommGroup::kExpertModel, routed_bytes));
  } else if (exchange && !gathered) {
    g.push_back(collective("dispatch backward reduce-scatter", OpKind::kReduceScatter, CommGroup::kExpertExchange,
                           exchange_rows * h * t));
  }
  g.push_back(memory("router scores backward", kRouterPasses * router_rows * experts));
  g.push_back(gemm("router input gradient", router_rows, h, experts, 1));
  g.push_back(gemm("router weight gradient", experts, h, router_rows, 1, true));
}

double expert_parameters_per_rank(const ModelConfig& c, int64_t expert_model, int64_t expert_tensor) {
  if (!c.moe.enabled() || expert_model <= 0 || expert_tensor <= 0) return 0.0;
  const double h = static_cast<double>(c.hidden_size);
  const double ffn = static_cast<double>(c.moe.ffn_hidden_size) / static_cast<double>(expert_tensor);
  const double fc1 = (c.swiglu ? 2.0 : 1.0) * ffn;
  const double biases = c.add_bias_linear ? fc1 + h : 0.0;
  const double local = static_cast<double>(c.moe.num_experts) / static_cast<double>(expert_model);
  return local * (h * (fc1 + ffn) + biases);
}

}  // namespace gpt::perf
