// The decoder for generation: the same modules' arithmetic as training (the op set's norms, GEMMs,
// activations; model/transformer_layer.h's order), FP32 on the host, without stashes, dropout or
// backward, over a ragged batch: each segment is some new tokens of one sequence, all segments'
// rows going through the linears together and each segment through the attention core alone.
// The blocks' op sequences are shared where generation runs them: the layer's sequence around its
// blocks (model/transformer_layer.h's layer_forward_up and layer_forward_output: N1, the attention
// block's output and bias fused into N2, the MLP's up half, the output residual add), every norm's
// forward (model/norm.h's NormForward, as training's Norm), the MLP block's fc1 and activation
// (model/mlp_block.h's mlp_up_forward), the q/k norms' per-head step (model/attention_block.h's
// apply_to_qk_heads), and RoPE is the op set's (one implementation). The GEMMs of qkv, proj, fc1
// and fc2 with their tensor-parallel reductions, and the per-segment RoPE and attention core, are
// still written here: the blocks' Linear modules are built on ParamStore (FP8, sequence
// parallelism, deferred weight gradients) and one LayerShapes per chunk, generation runs on FP32
// checkpoint tensors, a row count that changes with each call and a KV cache per sequence.
//
//   forward_cached: every segment's tokens appended to its sequence's KV cache at positions
//     length .. length + s - 1 (RoPE angles and learned positions continue there: the op from the
//     segment's first position); the attention core is KvCacheAttention. Prefill is one call with
//     whole prompts, decoding one call per step with one token per live sequence.
//   tensor parallelism (a `tensor_group` of more than one rank): each rank holds its slice
//     (generate/tensor_slice.h); the word embedding is looked up vocabulary-parallel and summed
//     over the group, linear_qkv and linear_fc1 are column-parallel (the attention runs on the
//     rank's heads and caches its groups), linear_proj and linear_fc2 row-parallel with their
//     partial sums all-reduced before the bias and residual, and the LM head's local logits are
//     all-gathered, so that every rank returns the same full logits and samples the same token.
//   devices: the linears, norms and activations run on the context's device (the op set's CPU or
//     CUDA kernels, parameters uploaded once); the embedding rows are assembled and the KV cache
//     kept and attended on the host (on a GPU each segment's qkv rows are staged to the host and
//     its attention output back), so that both devices run this one path.
//   mixture of experts: an MoE layer (the saved --moe-layer-freq pattern) runs generate/inference_moe.h
//     in place of fc1 and fc2 (router, each token's k experts, dropless, the shared expert).
//   forward_full: one whole sequence from position 0 through the training path's attention core
//     (LocalAttention, the op set's causal attention) and RoPE op, no cache: the reference the
//     cached path is tested against.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/memory.h"
#include "generate/inference_moe.h"
#include "generate/kv_cache_attention.h"
#include "generate/tensor_slice.h"
#include "model/config.h"
#include "model/layer_block.h"
#include "model/norm.h"
#include "parallel/comm/communicator.h"

namespace gpt {

class InferenceModel {
 public:
  // `params`: global name -> FP32 values (generate/checkpoint_model.h), this rank's slices under
  // tensor parallelism; kept by reference. `sequences` KV caches of `capacity` positions each.
  // `tensor_group`: the tensor-parallel ranks (nullptr: one rank).
  InferenceModel(const ModelConfig& config, const std::map<std::string, std::vector<float>>& params, Context& ctx,
                 int64_t sequences, int64_t capacity, Communicator* tensor_group = nullptr);

  struct Segment {
    int64_t sequence = 0;
    std::span<const int32_t> tokens;
  };
  // Logits [segments, padded_vocab] of each segment's last token (the same on every TP rank).
  void forward_cached(std::span<const Segment> segments, std::vector<float>& logits);
  // Logits [padded_vocab] of the last token of `tokens` (positions 0 .. s - 1), no cache.
  void forward_full(std::span<const int32_t> tokens, std::vector<float>& logits);

  KvCache& cache() { return cache_; }
  const ModelConfig& config() const { return config_; }

 private:
  struct Row {
    int32_t token;
    int64_t position;
  };
  // This rank's widths (the whole model's with one rank).
  struct Widths {
    int64_t h, d, heads, groups, q;           // hidden, head dim, heads_l, groups_l, queries per group
    int64_t qkv, projection, ffn, fc1;        // qkv_l, heads_l d, ffn_l, fc1_l
    int64_t vocab, vocab_local, vocab_first;  // padded vocabulary, this rank's rows of it, its first id
  };
  static Widths widths(const ModelConfig& config, const TensorSlice& slice);
  void run(std::span<const Segment> segments, bool cached, std::vector<float>& logits);
  // The segments' rows in order, each with its absolute position.
  std::vector<Row> rows_of(std::span<const Segment> segments, bool cached) const;
  // x [n, h] = the rows' embeddings.
  void embed(const std::vector<Row>& rows, const Tensor& x);
  // One layer on x [n, h], in place.
  void layer_forward(int64_t layer, std::span<const Segment> segments, const std::vector<Row>& rows, bool cached,
                     const Tensor& x);
  // The attention block on a [n, h] (N1's output): qkv, the q/k norms, attend, proj reduced over
  // the group; proj's bias handed back for the layer's fused residual norm.
  BlockOutput attention_block(int64_t layer, std::span<const Segment> segments, const std::vector<Row>& rows,
                              bool cached, const Tensor& a);
  // --qk-layernorm: the norms `prefix` + q_layernorm / k_layernorm over qkv [n, qkv_l]'s heads, in place.
  void qk_norm(const std::string& prefix, const Tensor& qkv);
  // qkv [n, qkv_l] -> attention [n, heads_l d], one segment at a time (RoPE first).
  void attend(int64_t layer, std::span<const Segment> segments, const std::vector<Row>& rows, bool cached,
              const Tensor& qkv, const Tensor& attention);
  // Logits [segments, padded_vocab] of each segment's last row of x [n, h].
  void head(std::span<const Segment> segments, const Tensor& x, std::vector<float>& logits);
  // The norm `name` (LayerNorm or RMSNorm as configured) over rows of `width`: model/norm.h's
  // forward (training's Norm) on this model's parameters.
  NormForward norm(const std::string& name, int64_t width) const;
  // Sums a row-parallel GEMM's partial result over the tensor-parallel group (in place).
  void reduce(const Tensor& partial);
  const float* param(const std::string& name) const;
  // A scratch tensor on the context's device, its buffer grown to the largest batch seen.
  Tensor scratch(Buffer& buffer, Shape shape);
  // A host scratch tensor.
  static Tensor host(std::vector<float>& buffer, Shape shape);
  Tensor weight(const std::string& name, Shape shape) const;
  Tensor bias(const std::string& name, int64_t size) const;  // undefined without biases

  ModelConfig config_;
  Communicator* tensor_group_;
  TensorSlice slice_;
  Widths w_;
  const std::map<std::string, std::vector<float>>& params_;
  Context& ctx_;
  Context host_ctx_;  // the KV cache's attention and host-side collectives
  std::map<std::string, Buffer> device_params_;  // GPU: every parameter, uploaded once
  KvCache cache_;
  std::vector<std::unique_ptr<KvCacheAttention>> cached_cores_;  // per layer
  std::unique_ptr<AttentionCore> full_core_;                      // LocalAttention
  std::unique_ptr<InferenceMoe> moe_;                             // the MoE layers' feed-forward
  // Scratch on the context's device, grown to the largest batch seen.
  Buffer x_, ln_, mean_, rstd_, qkv_, attention_, proj_, residual_, fc1_, act_, mlp_, lse_, last_, logits_;
  Buffer qk_rows_, qk_mean_, qk_rstd_;  // --qk-layernorm: the query (then key) heads as rows of d
  // Host scratch: the embedding rows, a segment's staged qkv and attention output, the logits.
  std::vector<float> embedded_, qkv_host_, attention_host_, lse_host_, local_logits_, gathered_logits_;
};

// Rotates the query and key heads of one token's packed qkv row [groups, (q + 2) d] by RoPE at
// `position`: the op set's rope_forward on the host, on that one row.
void rope_at_position(float* qkv_row, int64_t groups, int64_t queries_per_group, int64_t head_dim,
                      int64_t rotary_dim, const RopeFrequencies& frequencies, int64_t position, bool interleaved);

}  // namespace gpt
