#include "perf_model/layer_ops.h"

#include "core/dtype.h"
#include "perf_model/moe_ops.h"

namespace gpt::perf {
namespace {

// Flash attention's backward: 5 matmuls (S, dP, dV, dQ, dK) against the forward's 2.
constexpr double kAttentionBackwardMatmuls = 2.5;

Op gemm(std::string name, double m, double n, double k, bool weight_gradient = false) {
  Op op{.name = std::move(name), .kind = OpKind::kGemm, .m = m, .n = n, .k = k};
  op.weight_gradient = weight_gradient;
  return op;
}
Op memory(std::string name, double bytes) { return {.name = std::move(name), .kind = OpKind::kMemory, .bytes = bytes}; }
Op collective(std::string name, OpKind kind, double bytes) { return {.name = std::move(name), .kind = kind, .bytes = bytes}; }

// One op of the unfused attention core (LayerOpOptions::unfused_attention).
Op core_gemm(std::string name, double m, double n, double k, double bytes) {
  Op op = gemm(std::move(name), m, n, k);
  op.bytes = bytes;
  op.attention_core = true;
  return op;
}
Op core_memory(std::string name, double bytes) {
  Op op = memory(std::move(name), bytes);
  op.attention_core = true;
  return op;
}

// Megatron's unfused core, forward and backward (layer_ops.h): `query_rows` = s b heads_l query
// rows, each against `keys` keys (s x CP) of dimension d.
void unfused_core(double query_rows, double keys, double d, double t, bool dropout, std::vector<Op>& forward,
                  std::vector<Op>& backward) {
  const double scores = query_rows * keys;  // e elements
  const double qkv_bytes = query_rows * d * t;
  forward.push_back(core_gemm("attention scores (Q K^T)", query_rows, keys, d, scores * t + 2 * qkv_bytes));
  forward.push_back(core_memory("scale-mask-softmax", 2 * t * scores));
  if (dropout) forward.push_back(core_memory("attention dropout", (2 * t + 1) * scores));
  forward.push_back(core_gemm("attention context (P V)", query_rows, d, keys, scores * t + 2 * qkv_bytes));
  backward.push_back(core_gemm("attention dP (dO V^T)", query_rows, keys, d, scores * t + 2 * qkv_bytes));
  backward.push_back(core_gemm("attention dV (P^T dO)", keys, d, query_rows, scores * t + 2 * qkv_bytes));
  if (dropout) backward.push_back(core_memory("attention dropout backward", (2 * t + 1) * scores));
  backward.push_back(core_memory("scale-mask-softmax backward", 3 * t * scores));
  backward.push_back(core_gemm("attention dQ (dS K)", query_rows, d, keys, scores * t + 2 * qkv_bytes));
  backward.push_back(core_gemm("attention dK (dS^T Q)", keys, d, query_rows, scores * t + 2 * qkv_bytes));
}

}  // namespace

LayerOps transformer_layer_ops(const ModelConfig& c, const LayerShapes& s, const LayerOpOptions& o) {
  const double t = static_cast<double>(dtype_size(c.dtype));
  const double r = static_cast<double>(s.rows()), r_l = static_cast<double>(s.local_rows());
  const double h = static_cast<double>(s.hidden);
  const double qkv = static_cast<double>(s.local_qkv()), projection = static_cast<double>(s.local_projection());
  const double fc1 = static_cast<double>(s.local_fc1), ffn = static_cast<double>(s.local_ffn);
  const bool sp = o.sequence_parallel, tp = o.tensor_parallel > 1;
  const bool dropout = c.hidden_dropout > 0.0f, rope = c.position_embedding == PositionEmbedding::kRope;
  const double full_activation = r * h * t;  // [s, b, h]: what TP's collectives move
  const double rope_bytes = 2 * t * r * static_cast<double>(s.local_heads + s.local_groups) * s.head_dim;
  // The causal core executes half of Megatron's 4 b s^2 heads d; under CP, s queries against CP s keys.
  const double attention_flops = 0.5 * 4 * r * static_cast<double>(s.sequence * o.context_parallel) * projection;

  LayerOps ops;
  std::vector<Op>& f = ops.forward;
  // Column-parallel input: gathered under SP. Row-parallel output: reduced (SP: reduce-scattered).
  auto column_input = [&](std::vector<Op>& list, const char* name) {
    if (sp) list.push_back(collective(name, OpKind::kAllGather, full_activation));
  };
  auto row_output = [&](std::vector<Op>& list, const char* name) {
    if (tp) list.push_back(collective(name, sp ? OpKind::kReduceScatter : OpKind::kAllReduce, full_activation));
  };
  f.push_back(memory("norm1", 2 * t * r_l * h));
  column_input(f, "all-gather ln1");
  f.push_back(gemm("linear_qkv", r, qkv, h));
  if (rope) f.push_back(memory("rope", rope_bytes));
  std::vector<Op> core_backward;  // the unfused core's backward ops, in order
  if (o.unfused_attention) {
    unfused_core(r * static_cast<double>(s.local_heads), static_cast<double>(s.sequence * o.context_parallel),
                 static_cast<double>(s.head_dim), t, c.attention_dropout > 0.0f, f, core_backward);
  } else {
    f.push_back({.name = "attention", .kind = OpKind::kAttention, .flops = attention_flops});
  }
  f.push_back(gemm("linear_proj", r, h, projection));
  row_output(f, "linear_proj output reduction");
  if (dropout) f.push_back(memory("dropout (attention output)", (2 * t + 1) * r_l * h));
  f.push_back(memory("norm2 (with the residual)", 4 * t * r_l * h));
  // The MLP: a dense layer's, or an MoE layer's shared expert (if any) and its routed experts. The
  // router of this trainer reads the rows gathered over TP (ExpertParallel::route_gathered_rows).
  const bool dense_mlp = s.dense_mlp();
  const bool router_gather = s.moe_layer && o.expert.route_gathered_rows;
  if (dense_mlp || router_gather) column_input(f, "all-gather ln2");
  if (dense_mlp) {
    f.push_back(gemm("linear_fc1", r, fc1, h));
    f.push_back(memory(c.swiglu ? "swiglu" : "gelu", t * r * (fc1 + ffn)));
    f.push_back(gemm("linear_fc2", r, h, ffn));
    row_output(f, "linear_fc2 output reduction");
  }
  std::vector<Op> routed_backward;
  if (s.moe_layer) routed_expert_ops(c, s, o, f, routed_backward);
  if (dropout) f.push_back(memory("dropout (mlp output)", (2 * t + 1) * r_l * h));
  f.push_back(memory("residual_add", 3 * t * r_l * h));

  std::vector<Op>& g = ops.backward;
  // Row-parallel backward: the output gradient gathered under SP; column-parallel backward: the
  // input gradient reduced (SP: reduce-scattered), and Megatron's re-gather of the SP input.
  auto row_backward = [&](const char* name, double in, double out) {
    if (sp) g.push_back(collective(std::string(name) + " output gradient all-gather", OpKind::kAllGather, full_activation));
    g.push_back(gemm(std::string(name) + " input gradient", r, in, out));
    g.push_back(gemm(std::string(name) + " weight gradient", in, out, r, true));
    if (c.add_bias_linear) g.push_back(memory(std::string(name) + " bias gradient", t * r_l * h));
  };
  auto column_backward = [&](const char* name, double in, double out) {
    g.push_back(gemm(std::string(name) + " input gradient", r, in, out));
    if (sp && o.regather_sequence_parallel_input) {
      g.push_back(collective(std::string(name) + " input all-gather again", OpKind::kAllGather, full_activation));
    }
    g.push_back(gemm(std::string(name) + " weight gradient", out, in, r, true));
    if (c.add_bias_linear || (c.add_qkv_bias && std::string(name) == "linear_qkv")) {
      g.push_back(memory(std::string(name) + " bias gradient", t * r * out));
    }
    if (tp) g.push_back(collective(std::string(name) + " input gradient reduction",
                                   sp ? OpKind::kReduceScatter : OpKind::kAllReduce, full_activation));
  };
  if (dropout) g.push_back(memory("dropout backward (mlp output)", (2 * t + 1) * r_l * h));
  g.insert(g.end(), routed_backward.begin(), routed_backward.end());
  if (dense_mlp) {
    row_backward("linear_fc2", ffn, h);
    g.push_back(memory(c.swiglu ? "swiglu backward" : "gelu backward", t * r * (ffn + 2 * fc1)));
    column_backward("linear_fc1", h, fc1);
  } else if (router_gather && sp) {
    g.push_back(collective("router input gradient reduction", OpKind::kReduceScatter, full_activation));
  }
  g.push_back(memory("norm2 backward", 3 * t * r_l * h));
  g.push_back(memory("residual_add", 3 * t * r_l * h));
  if (dropout) g.push_back(memory("dropout backward (attention output)", (2 * t + 1) * r_l * h));
  row_backward("linear_proj", projection, h);
  if (o.unfused_attention) {
    g.insert(g.end(), core_backward.begin(), core_backward.end());
  } else {
    g.push_back({.name = "attention backward", .kind = OpKind::kAttentionBackward,
                 .flops = kAttentionBackwardMatmuls * attention_flops});
  }
  if (rope) g.push_back(memory("rope backward", rope_bytes));
  column_backward("linear_qkv", h, qkv);
  g.push_back(memory("norm1 backward", 3 * t * r_l * h));
  g.push_back(memory("residual_add", 3 * t * r_l * h));
  return ops;
}

namespace {
// Whether a layer's forward GEMM has a bias (linear_qkv's also with --add-qkv-bias).
bool has_bias(const ModelConfig& c, const Op& op) {
  return c.add_bias_linear || (c.add_qkv_bias && op.name == "linear_qkv");
}
}  // namespace

double layer_parameter_elements(const ModelConfig& c, const LayerOps& ops) {
  double elements = 0;
  for (const Op& op : ops.forward) {
    if (op.kind == OpKind::kGemm) elements += op.count * (op.n * op.k + (has_bias(c, op) ? op.n : 0.0));
  }
  return elements + 2.0 * static_cast<double>(c.hidden_size) * (c.has_layernorm_bias() ? 2 : 1);
}

std::vector<double> layer_parameter_tensors(const ModelConfig& c, const LayerOps& ops) {
  std::vector<double> tensors;
  const auto norm = [&] {
    tensors.push_back(static_cast<double>(c.hidden_size));
    if (c.has_layernorm_bias()) tensors.push_back(static_cast<double>(c.hidden_size));
  };
  int gemm = 0;
  for (const Op& op : ops.forward) {
    if (op.kind != OpKind::kGemm) continue;
    if (gemm == 0 || gemm == 2) norm();  // before linear_qkv and linear_fc1
    tensors.push_back(op.count * op.n * op.k);
    if (has_bias(c, op)) tensors.push_back(op.n);
    ++gemm;
  }
  return tensors;
}

}  // namespace gpt::perf
