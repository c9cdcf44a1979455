// The mixture-of-experts block (Megatron-Core's MoELayer), the second FeedForwardBlock beside the
// dense MlpBlock (model/mlp_block.h), from the second norm's output to what it adds to the residual
// stream (model/moe_config.h states the math). Without expert parallelism (EP 1, ETP = TP) every TP
// rank computes its slice of every expert over the TP-gathered rows, as below; with it the rows go
// to their experts' ranks over the dispatcher group and back (model/moe_block_exchange.cc: the
// allgather and alltoall dispatchers), the router staying as below:
//
//   b [s_l, b, h] -gather(SP)-> x [T = s b, h] -> logits = x W_r^T (+ b_r) [T, E] float32
//     -> moe_route: each token's k experts and weights p [T, k] -> the dispatch (host: which
//        pairs keep a row of the expert-major buffer, model/expert_dispatch.h)
//     -> permute x into rows [M, h] -> per expert e over its rows: fc1_e -> act -> fc2_e (+ b2_e)
//     -> combine y_t = sum_j p_tj rows[dest_tj]  (TP partial sums) -reduce(-scatter)-> [s_l, b, h]
//     (+ the shared expert, a dense MLP on b; its fc1 column- and fc2 row-parallel)  -> D (dropout)
//
// Every TP rank routes all T rows of the gathered input (the same ops on the same rows, so the
// same routing on each): the router's weight gradient is then whole on every rank (no TP sum) and
// its input gradient is added on TP rank 0 only, before the input gradient's reduction. Megatron
// routes each rank's s_l b rows and gathers the routing; the numbers are the same, and capacity
// drops per rank's run of rows as Megatron's (model/expert_dispatch.h's segments).
//
// The experts run as one grouped GEMM: one GEMM per expert over its contiguous rows (each
// expert's row count is on the host after the dispatch). Their weight gradients run in the
// input-gradient pass, or (WeightGradTiming::kDeferred, the zero-bubble schedules) in
// backward_weight from a lease holding what they read (the rows' output and fc1 gradients, the
// activations and the permuted input: [M, h], [M, ffn_e_l], [M, fc1_e_l], [M, h]), as a Linear's.
//
// Load balancing: the auxiliary losses (aux_loss, seq_aux_loss, global_aux_loss) and the z-loss add their
// gradients to the logits in backward, scaled as the LM loss of one microbatch (MoePass); their
// values are kept per layer for the log line. The expert bias (sigmoid routing) is moved once per
// iteration by finish_iteration from the iteration's token counts over data x context parallelism.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <deque>

#include "model/expert_dispatch.h"
#include "model/lease.h"
#include "checkpoint/sharded_tensor.h"
#include "model/mlp_block.h"

namespace gpt {

// What the chunk tells its MoE blocks about the current pass: in training, the gradient scale of
// one microbatch's loss (the LM loss's per-token scale times its tokens); absent in evaluation.
struct MoePass {
  std::optional<float> loss_gradient_scale;
  // The data x context-parallel group (global_aux_loss sums each microbatch's counts over it; null:
  // this rank alone, with its context group).
  Communicator* data_context = nullptr;
};

// One MoE layer's load-balancing figures, summed over the microbatches since the last take().
struct MoeLayerMetrics {
  int64_t layer = 0;
  double load_balancing_loss = 0.0;      // aux_loss / its coefficient
  double seq_load_balancing_loss = 0.0;  // seq_aux_loss / its coefficient
  double global_load_balancing_loss = 0.0;  // global_aux_loss / its coefficient (this rank's share)
  double z_loss = 0.0;                   // this rank's share of the mean logsumexp^2 (summed over CP: the mean)
  std::vector<double> tokens_per_expert; // routed pairs kept per expert (this rank's rows)
  int64_t microbatches = 0;
};

class MoeBlock final : public FeedForwardBlock {
 public:
  MoeBlock(const BlockBuild& build, const MoePass& pass);

  void forward_up(Context& ctx, int slot, const MlpActivations& a, const Tensor& input) override;
  BlockOutput forward_down(Context& ctx, int slot, const MlpActivations& a) override;
  Tensor backward_input(Context& ctx, int slot, const MlpActivations& a, const Tensor& input,
                        const Tensor& grad_output, WeightGradTiming timing) override;
  void backward_weight(Context& ctx) override;

  // The iteration's end (before the optimizer step): the expert bias update from the token counts
  // summed over `data_context` (Megatron's finalize_model_grads). Every rank of the group calls it.
  void finish_iteration(Context& ctx, Communicator& data_context);
  // The experts' outputs (fc2 of each expert's rows) of the slot, which backward reads: forward_down
  // runs it; full recompute runs it alone on a group's last layer (whose output is not rebuilt).
  void experts_down(Context& ctx, int slot, const MlpActivations& a);
  // Full recompute re-runs forward_up of a slot: its tokens and figures are not counted again.
  void set_recomputing(bool recomputing) { recomputing_ = recomputing; }
  // Forgets the counts and figures since the last finish_iteration (the iteration runs again).
  void restart_iteration();
  // The figures since the last take (and resets them).
  MoeLayerMetrics take_metrics();
  // The expert bias [E] float32 (undefined without --moe-router-enable-expert-bias).
  const Tensor& expert_bias() const { return expert_bias_; }
  // The expert bias as a checkpoint piece (model/param_registry.h's expert_bias_name; the whole
  // [E] tensor, held alike by every tensor-, context- and data-parallel rank of the layer: TP rank 0
  // writes it, spread over the data-parallel replicas). Zeroes it first if no forward has yet, so
  // that a checkpoint loaded into it is not overwritten by the first forward's initialisation.
  // Nothing without --moe-router-enable-expert-bias.
  std::optional<ShardedTensor> expert_bias_piece(Context& ctx);
  // What the constructor takes from its arena.
  static int64_t persistent_bytes(const ModelConfig& config);
  // Bytes of the shared expert's weight-gradient leases (model/linear.h).
  static int64_t deferral_bytes(const ModelConfig& config, const LayerShapes& shapes, bool sequence_parallel,
                                int deferral_depth);

 private:
  struct Expert {
    Param* fc1_weight = nullptr;  // [fc1_e_l, h]
    Param* fc1_bias = nullptr;
    Param* fc2_weight = nullptr;  // [h, ffn_e_l]
    Param* fc2_bias = nullptr;
  };
  // The slot's dispatch, on the host from its forward to its backward.
  struct SlotRouting {
    std::vector<int64_t> expert_rows;  // [E]
    int64_t rows = 0;                  // M of this microbatch
    std::vector<float> coefficients;   // [groups, E] the auxiliary losses' d loss / d score
    int64_t groups = 1;
    double z_scale = 0.0;              // the z-loss's gradient factor (0: none)
    std::vector<float> global_mean;    // [E] global_aux_loss's running mean of the counts (full recompute reads it)
    // The alltoall dispatcher's row counts per member (model/moe_all_to_all.h).
    std::vector<int64_t> send_rows, receive_rows;
    int64_t sent() const;
  };

  // Per expert e, over its rows [first, first + rows_e): fn(e, first, rows_e).
  template <typename Fn>
  void for_each_expert(const std::vector<int64_t>& expert_rows, Fn&& fn) const;
  void route(Context& ctx, int slot, const MlpActivations& a, const Tensor& x);
  // Under expert parallelism: this rank's rows' routing (after its router's drops) gathered over the
  // dispatcher group, and this rank's experts' share of the group's rows planned (routing) and
  // stashed (a's exchange_destination / exchange_weights, source, row_weights).
  void dispatch_exchange(Context& ctx, SlotRouting& routing, const MlpActivations& a,
                         std::span<const int32_t> indices, const ExpertDispatch& d);
  // The auxiliary losses' and z-loss's values (metrics) and gradient factors of the slot.
  void load_balancing(Context& ctx, SlotRouting& routing, const MlpActivations& a);
  void experts_up(Context& ctx, const SlotRouting& routing, const MlpActivations& a, const Tensor& x);
  // The router's backward: logits' gradient from the weights' (moe_dweights [T, k]) and the losses,
  // then its parameters' gradients and its input gradient added into grad_x: the rows
  // [first_row, first_row + rows of grad_x) of the T rows (all of them on TP rank 0 without expert
  // parallelism; each rank's own rows with it).
  void router_backward(Context& ctx, const SlotRouting& routing, const MlpActivations& a, const Tensor& x,
                       const Tensor& grad_x, int64_t first_row);
  // The experts' backward: from grad_y_full (the block output's gradient over the rows x holds:
  // [T, h] gathered over TP, or [N, h] over the dispatcher group) to the permuted input's gradient
  // (returned, [M, h] in moe_rows_b), their parameters' gradients (now, or recorded for
  // backward_weight), and the combine weights' gradients (partial sums) into dweights [rows, k]
  // by `destination` [rows, k].
  Tensor experts_backward(Context& ctx, const SlotRouting& routing, const MlpActivations& a, const Tensor& x,
                          const Tensor& grad_y_full, WeightGradTiming timing, const Tensor& destination,
                          const Tensor& dweights);
  // backward_input's routed part, from the dropout's output gradient d_out [s_l, b, h] to the input
  // gradient [s_l, b, h] (in local_a under SP): every expert over the TP-gathered rows (TP sums), or
  // this rank's experts over the dispatcher group's rows (the group's sums).
  Tensor gathered_backward(Context& ctx, const SlotRouting& routing, const MlpActivations& a, const Tensor& input,
                           const Tensor& d_out, WeightGradTiming timing);
  // Under expert parallelism (model/moe_block_exchange.cc): the rows this rank's experts read
  // ([N, h] gathered, or [M, h] received), from its own rows [s_l, b, h] (forward and backward) ...
  Tensor exchange_rows(Context& ctx, int slot, const MlpActivations& a, const Tensor& own);
  // ... the experts' results (expert_out) back to their rows' owners, combined: [s_l, b, h] in local_a ...
  Tensor exchange_outputs(Context& ctx, int slot, const MlpActivations& a);
  // ... and backward: the experts' input and weight gradients back to the owners.
  Tensor exchanged_backward(Context& ctx, int slot, const MlpActivations& a, const Tensor& input,
                            const Tensor& d_out, WeightGradTiming timing);
  // The combine weights' gradients of this rank's rows, [s_l b, k] (in moe_own_dweights, or
  // moe_dweights with TP 1), gathered over TP into moe_dweights [T, k].
  void gather_weight_grads(Context& ctx, const Tensor& own_dweights);
  // The experts' fc2 (from each row's output gradient d_out [M, h] and activation act [M, ffn_e_l])
  // or fc1 (from d_fc1 [M, fc1_e_l] and the permuted input [M, h]) weight and bias gradients.
  void fc2_weight_grads(Context& ctx, const std::vector<int64_t>& expert_rows, const Tensor& d_out,
                        const Tensor& act) const;
  void fc1_weight_grads(Context& ctx, const std::vector<int64_t>& expert_rows, const Tensor& d_fc1,
                        const Tensor& input) const;
  // The lease's parts for `shapes` (what deferral_bytes counts).
  static std::vector<std::pair<DType, Shape>> lease_parts(const LayerShapes& shapes, DType dtype);
  // The iteration's token counts (expert bias, global_aux_loss) back to zero.
  void reset_iteration_counts();
  ops::RouterOptions router_options() const;

  const ModelConfig& config_;
  const MoeConfig& moe_;
  const MoePass& pass_;
  MlpActivation activation_;
  const TensorParallel& tp_;
  Communicator* exchange_ = nullptr;  // the dispatcher group under expert parallelism (else null)
  int64_t first_expert_ = 0;          // this rank's experts [first_expert_, first_expert_ + local_experts_)
  int64_t local_experts_;
  Communicator* context_group_;  // null: CP = 1
  LayerShapes shapes_;
  LayerWorkspace& ws_;
  LayerDropout dropout_;
  Param& router_weight_;
  Param* router_bias_ = nullptr;
  std::vector<Expert> experts_;  // this rank's experts, in order
  std::optional<Linear> shared_fc1_, shared_fc2_;
  Tensor expert_bias_;                      // [E] float32 (aux-loss-free balancing)
  bool recomputing_ = false;
  int64_t layer_ = 0;                       // the global layer number
  std::vector<double> iteration_tokens_;    // [E] kept pairs this iteration (expert bias)
  // global_aux_loss: the iteration's counts summed over data x context parallelism and the
  // microbatches so far (float32 as Megatron's global_tokens_per_expert buffer), and their number.
  std::vector<float> global_tokens_;
  float global_steps_ = 0.0f;
  std::vector<SlotRouting> slots_;
  MoeLayerMetrics metrics_;
  LeaseRing expert_leases_;  // the deferred weight gradients' inputs
  struct PendingWeightGrads {
    std::vector<int64_t> expert_rows;
    int64_t rows = 0;
  };
  std::deque<PendingWeightGrads> pending_;
};

// The feed-forward block of `build.layer`: an MoeBlock in an MoE layer, else the dense MlpBlock.
std::unique_ptr<FeedForwardBlock> make_feed_forward_block(const BlockBuild& build, const MoePass& pass);

}  // namespace gpt
