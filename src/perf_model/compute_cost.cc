#include "perf_model/compute_cost.h"

#include <algorithm>

#include "core/dtype.h"
#include "model/layer_shapes.h"
#include "perf_model/layer_ops.h"

namespace gpt::perf {
namespace {

double element_bytes(const ModelConfig& c) { return static_cast<double>(dtype_size(c.dtype)); }

double memory_time(double bytes, const Cluster& cluster) {
  return bytes / (cluster.memory_bandwidth * cluster.memory_bandwidth_efficiency);
}

double local_rows(const ModelConfig& c, const RankShape& shape) {
  const double rows = static_cast<double>(c.seq_length * shape.micro_batch);
  return shape.sequence_parallel ? rows / static_cast<double>(shape.tensor_parallel) : rows;
}

// Exposed share of a TP collective.
double tp_exposed(const RankShape& shape, const Cluster& cluster) {
  return shape.tp_comm_overlap ? 1.0 - cluster.tp_comm_overlap_fraction : 1.0;
}

// The host's work for `ops` ops of which `collectives` are communication calls.
void charge_calls(PassCost& cost, double ops, double collectives, const Cluster& cluster, double stretch) {
  cost.op_calls = ops;
  cost.collective_calls = collectives;
  cost.overhead = (ops * cluster.kernel_overhead + collectives * cluster.collective_overhead) * stretch;
}

bool is_collective(const Op& op) {
  return op.kind == OpKind::kAllReduce || op.kind == OpKind::kAllGather || op.kind == OpKind::kReduceScatter ||
         op.kind == OpKind::kAllToAll;
}

double collective_ops(const std::vector<Op>& ops) {
  return static_cast<double>(std::count_if(ops.begin(), ops.end(), is_collective));
}

// An expert-grid collective's time (moe_ops.h): over the exchange group, its EP ranks or its ETP ranks.
double expert_collective_time(const Op& op, const RankShape& shape, const Cluster& cluster) {
  const ExpertParallel& x = shape.expert;
  const int etp = static_cast<int>(x.expert_tensor), ep = static_cast<int>(x.expert_model);
  const int ranks = op.group == CommGroup::kExpertExchange ? etp * ep : op.group == CommGroup::kExpertModel ? ep : etp;
  const Link& link = op.group == CommGroup::kExpertExchange ? shape.expert_exchange_link : shape.expert_tensor_link;
  switch (op.kind) {
    case OpKind::kAllToAll: return expert_all_to_all_time(cluster, shape.expert_model_stride, ranks, op.bytes);
    case OpKind::kAllGather: return all_gather_time(ranks, op.bytes, link);
    case OpKind::kReduceScatter: return reduce_scatter_time(ranks, op.bytes, link);
    default: return all_reduce_time(ranks, op.bytes, link);
  }
}

}  // namespace

double gemm_time(double m, double n, double k, const Cluster& cluster) {
  const double flops = 2 * m * n * k;
  if (flops <= 0) return 0;
  return flops / (cluster.peak_flops * cluster.gemm_efficiency_at(flops));
}

PassCost price_ops(const std::vector<Op>& ops, const RankShape& shape, const Cluster& cluster) {
  const int tp_ranks = static_cast<int>(shape.tensor_parallel);
  const double stretch = shape.compute_stretch, exposed = tp_exposed(shape, cluster);
  PassCost cost;
  for (const Op& op : ops) {
    if (is_collective(op) && op.group != CommGroup::kTensor) {
      cost.ep_comm += expert_collective_time(op, shape, cluster);
      continue;
    }
    switch (op.kind) {
      case OpKind::kGemm: {
        // A GEMM whose traffic is given (the unfused attention core's batched ones, K = d): the
        // roofline, the larger of its compute and its memory time. A grouped GEMM: `count` of them,
        // each at the efficiency of its own size (the rows per expert).
        const double time =
            op.count * std::max(gemm_time(op.m, op.n, op.k, cluster), memory_time(op.bytes, cluster)) * stretch;
        (op.attention_core ? cost.attention : cost.gemm) += time;
        break;
      }
      case OpKind::kAttention:
        cost.attention += op.flops / (cluster.peak_flops * cluster.attention_forward_efficiency) * stretch;
        break;
      case OpKind::kAttentionBackward:
        cost.attention += op.flops / (cluster.peak_flops * cluster.attention_backward_efficiency) * stretch;
        break;
      case OpKind::kMemory: (op.attention_core ? cost.attention : cost.elementwise) += memory_time(op.bytes, cluster) * stretch; break;
      case OpKind::kAllReduce: cost.tp_comm += exposed * all_reduce_time(tp_ranks, op.bytes, shape.tensor_link); break;
      case OpKind::kAllGather: cost.tp_comm += exposed * all_gather_time(tp_ranks, op.bytes, shape.tensor_link); break;
      case OpKind::kReduceScatter:
        cost.tp_comm += exposed * reduce_scatter_time(tp_ranks, op.bytes, shape.tensor_link);
        break;
      case OpKind::kAllToAll: cost.tp_comm += exposed * all_to_all_time(tp_ranks, op.bytes, shape.tensor_link); break;
    }
  }
  return cost;
}

LayerOps layer_ops(const ModelConfig& c, const RankShape& shape, bool moe_layer) {
  // `c.seq_length` is this context-parallel rank's S / CP rows already.
  const bool split_sequence = shape.sequence_parallel && shape.tensor_parallel > 1;
  LayerShapes shapes = LayerShapes::make(c, shape.tensor_parallel, /*tensor_parallel_rank=*/0, split_sequence,
                                         shape.micro_batch);
  if (moe_layer) {
    const std::vector<bool>& pattern = c.moe.moe_layers;
    const auto first_moe = std::find(pattern.begin(), pattern.end(), true);
    if (first_moe != pattern.end()) shapes = shapes.for_layer(c, first_moe - pattern.begin());
  }
  return transformer_layer_ops(c, shapes,
                               {.sequence_parallel = split_sequence,
                                .tensor_parallel = shape.tensor_parallel,
                                .regather_sequence_parallel_input = shape.regather_sequence_parallel_input,
                                .context_parallel = shape.context_parallel,
                                .unfused_attention = shape.unfused_attention,
                                .expert = shape.expert});
}

namespace {

PassCost weighted(const PassCost& a, double wa, const PassCost& b, double wb) {
  PassCost p;
  p.gemm = wa * a.gemm + wb * b.gemm;
  p.attention = wa * a.attention + wb * b.attention;
  p.elementwise = wa * a.elementwise + wb * b.elementwise;
  p.tp_comm = wa * a.tp_comm + wb * b.tp_comm;
  p.overhead = wa * a.overhead + wb * b.overhead;
  p.cp_comm = wa * a.cp_comm + wb * b.cp_comm;
  p.dp_comm = wa * a.dp_comm + wb * b.dp_comm;
  p.ep_comm = wa * a.ep_comm + wb * b.ep_comm;
  p.op_calls = wa * a.op_calls + wb * b.op_calls;
  p.collective_calls = wa * a.collective_calls + wb * b.collective_calls;
  return p;
}

}  // namespace

LayerCost layer_cost(const ModelConfig& c, const RankShape& shape, const Cluster& cluster) {
  const double layers = static_cast<double>(c.num_layers);
  const double moe = c.moe.enabled() && layers > 0 ? static_cast<double>(c.moe.moe_layer_count()) / layers : 0.0;
  if (moe == 0.0) return kind_layer_cost(c, shape, cluster, false);
  if (moe == 1.0) return kind_layer_cost(c, shape, cluster, true);
  const LayerCost dense = kind_layer_cost(c, shape, cluster, false), sparse = kind_layer_cost(c, shape, cluster, true);
  LayerCost mean;
  mean.forward = weighted(dense.forward, 1 - moe, sparse.forward, moe);
  mean.backward = weighted(dense.backward, 1 - moe, sparse.backward, moe);
  mean.recompute_full = (1 - moe) * dense.recompute_full + moe * sparse.recompute_full;
  mean.recompute_selective = (1 - moe) * dense.recompute_selective + moe * sparse.recompute_selective;
  mean.weight_gradient_gemm = (1 - moe) * dense.weight_gradient_gemm + moe * sparse.weight_gradient_gemm;
  return mean;
}

LayerCost kind_layer_cost(const ModelConfig& c, const RankShape& shape, const Cluster& cluster, bool moe_layer) {
  const LayerOps ops = layer_ops(c, shape, moe_layer);
  LayerCost cost;
  PassCost& f = cost.forward;
  f = price_ops(ops.forward, shape, cluster);
  double forward_calls = collective_ops(ops.forward), backward_calls = collective_ops(ops.backward);
  PassCost& g = cost.backward;
  g = price_ops(ops.backward, shape, cluster);
  for (const Op& op : ops.backward) {
    if (op.weight_gradient) {
      cost.weight_gradient_gemm += op.count * gemm_time(op.m, op.n, op.k, cluster) * shape.compute_stretch;
    }
  }
  const double t = element_bytes(c);
  const double tp = static_cast<double>(shape.tensor_parallel);
  const double rows = static_cast<double>(c.seq_length * shape.micro_batch);
  const double qkv = static_cast<double>(c.qkv_size()) / tp;
  const double projection = static_cast<double>(c.attention_projection_size()) / tp;
  const double cp = static_cast<double>(shape.context_parallel);

  if (shape.context_parallel > 1) {
    const int cp_ranks = static_cast<int>(shape.context_parallel);
    const Link& cp_link = shape.context_link;
    if (shape.context_all_to_all) {
      // qkv to heads and the output back; backward: qkv, output and its gradient again, dqkv back.
      const double qkv_bytes = rows * qkv * t, out_bytes = rows * projection * t;
      f.cp_comm = all_to_all_time(cp_ranks, qkv_bytes, cp_link) + all_to_all_time(cp_ranks, out_bytes, cp_link);
      g.cp_comm = 2 * all_to_all_time(cp_ranks, qkv_bytes, cp_link) + 2 * all_to_all_time(cp_ranks, out_bytes, cp_link);
      forward_calls += 2, backward_calls += 4;
    } else {
      // CP - 1 hops of the K/V block [s, b, 2 groups_l d], each hidden behind one block's attention
      // (1 / CP of the rank's); backward sends dK/dV after each block (CP hops, not overlapped).
      const double kv_bytes = rows * 2.0 * static_cast<double>(c.query_groups()) / tp * c.kv_channels * t;
      const double hop = p2p_time(kv_bytes, cp_link);
      f.cp_comm = (cp - 1) * std::max(0.0, hop - f.attention / cp);
      g.cp_comm = (cp - 1) * std::max(0.0, hop - g.attention / cp) + cp * hop;
      forward_calls += cp - 1, backward_calls += 2 * cp - 1;
    }
  }
  charge_calls(f, static_cast<double>(ops.forward.size()), forward_calls, cluster, shape.compute_stretch);
  charge_calls(g, static_cast<double>(ops.backward.size()), backward_calls, cluster, shape.compute_stretch);
  cost.recompute_full = f.total();
  cost.recompute_selective = f.attention + f.cp_comm;
  return cost;
}

PassCost embedding_forward(const ModelConfig& c, const RankShape& shape, const Cluster& cluster) {
  const double rows = static_cast<double>(c.seq_length * shape.micro_batch);
  const double activation = rows * static_cast<double>(c.hidden_size) * element_bytes(c);
  PassCost cost;
  // Lookup (and learned positions): read rows of the table(s), write the output.
  const double tables = c.position_embedding == PositionEmbedding::kLearnedAbsolute ? 2 : 1;
  cost.elementwise = memory_time((tables + 1) * activation, cluster) * shape.compute_stretch;
  const int tp = static_cast<int>(shape.tensor_parallel);
  cost.tp_comm = tp_exposed(shape, cluster) * (shape.sequence_parallel
                                                   ? reduce_scatter_time(tp, activation, shape.tensor_link)
                                                   : all_reduce_time(tp, activation, shape.tensor_link));
  charge_calls(cost, 1, shape.tensor_parallel > 1 ? 1.0 : 0.0, cluster, shape.compute_stretch);
  return cost;
}

PassCost embedding_backward(const ModelConfig& c, const RankShape& shape, const Cluster& cluster) {
  const double rows = static_cast<double>(c.seq_length * shape.micro_batch);
  const double activation = rows * static_cast<double>(c.hidden_size) * element_bytes(c);
  PassCost cost;
  // Scatter-add of the output gradient into the FP32 table gradient (read, read-modify-write).
  cost.elementwise = memory_time(activation + 2 * rows * c.hidden_size * 4.0, cluster) * shape.compute_stretch;
  if (shape.sequence_parallel) {
    cost.tp_comm = tp_exposed(shape, cluster) *
                   all_gather_time(static_cast<int>(shape.tensor_parallel), activation, shape.tensor_link);
  }
  charge_calls(cost, 1, shape.sequence_parallel ? 1.0 : 0.0, cluster, shape.compute_stretch);
  return cost;
}

namespace {

// The LM head's sizes on a rank: rows s b, hidden h, the vocabulary shard, bytes per element, TP.
struct HeadSizes {
  double rows, h, vocab, t;
  int tp;
};

HeadSizes head_sizes(const ModelConfig& c, const RankShape& shape) {
  return {static_cast<double>(c.seq_length * shape.micro_batch), static_cast<double>(c.hidden_size),
          static_cast<double>(c.padded_vocab_size) / static_cast<double>(shape.tensor_parallel), element_bytes(c),
          static_cast<int>(shape.tensor_parallel)};
}

}  // namespace

PassCost head_forward(const ModelConfig& c, const RankShape& shape, const Cluster& cluster) {
  const auto [rows, h, vocab, t, tp] = head_sizes(c, shape);
  PassCost cost;
  cost.gemm = gemm_time(rows, vocab, h, cluster) * shape.compute_stretch;
  // Final norm; cross-entropy reads the logits, writes FP32 softmax statistics and probabilities.
  cost.elementwise = memory_time(2 * local_rows(c, shape) * h * t + rows * vocab * (t + 2 * 4.0), cluster) *
                     shape.compute_stretch;
  const double activation = rows * h * t;
  // Sequence-parallel input gathered before the head; three all-reduces of per-row statistics.
  cost.tp_comm = tp_exposed(shape, cluster) *
                 ((shape.sequence_parallel ? all_gather_time(tp, activation, shape.tensor_link) : 0.0) +
                  3 * all_reduce_time(tp, rows * 4.0, shape.tensor_link));
  charge_calls(cost, 3, tp > 1 ? (shape.sequence_parallel ? 4.0 : 3.0) : 0.0, cluster, shape.compute_stretch);
  return cost;
}

PassCost head_backward(const ModelConfig& c, const RankShape& shape, const Cluster& cluster) {
  const auto [rows, h, vocab, t, tp] = head_sizes(c, shape);
  PassCost cost;
  cost.gemm = 2 * gemm_time(rows, vocab, h, cluster) * shape.compute_stretch;
  cost.elementwise = memory_time(4 * local_rows(c, shape) * h * t + rows * vocab * (4.0 + t), cluster) *
                     shape.compute_stretch;
  const double activation = rows * h * t;
  cost.tp_comm = tp_exposed(shape, cluster) * (shape.sequence_parallel
                                                   ? reduce_scatter_time(tp, activation, shape.tensor_link)
                                                   : all_reduce_time(tp, activation, shape.tensor_link));
  charge_calls(cost, 4, tp > 1 ? 1.0 : 0.0, cluster, shape.compute_stretch);
  return cost;
}

}  // namespace gpt::perf
