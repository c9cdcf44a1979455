// AdamW over the ranges of a ParamStore's flat buffers that this rank owns: the whole buffer, or,
// with the distributed optimizer (ZeRO-1), this data-parallel rank's shard of every bucket. With
// BF16 parameters the optimizer keeps FP32 master weights for what it owns (copied from the BF16
// parameters at start, as Megatron does) and writes rounded copies back after each step; with FP32
// parameters the parameters are themselves the master weights. Moments are FP32. State is
// allocated for the owned elements only, the owned ranges one after another. A step
// is one multi-tensor update (ops::adamw_update_segments): one launch on the GPU for all parameters.
//
// Offload (--optimizer-cpu-offload, --optimizer-offload-fraction F): the first F of the state
// elements (master weights and moments) live in host memory (page-locked with a GPU). Their step
// copies the gradients device-to-host, runs the same AdamW op on the host's cores and copies the
// updated parameters host-to-device; with FP32 parameters the parameters themselves are copied to
// the host and back (they are the master weights). The arithmetic is the device op's, element by
// element: bit-identical on the CPU backend. With --overlap-cpu-optimizer-d2h-h2d the parts'
// copies run on their own stream while the host steps the part before (same arithmetic, same bits).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/host_staging.h"
#include "core/host_worker.h"
#include "core/context.h"
#include "kernels/ops.h"
#include "model/param_store.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.01f;
  double offload_fraction = 0.0;  // of the state elements, in host memory (0: none)
  // --overlap-cpu-optimizer-d2h-h2d: the offloaded parts' copies and host steps pipelined part by
  // part (a part's device-to-host copy and the previous part's host-to-device copy while the host
  // steps the part between), the copies on their own stream.
  bool overlap_host_copies = false;
};

class AdamW {
 public:
  // `owned`: disjoint ranges of the flat buffers this rank updates; empty means all of them.
  AdamW(Context& ctx, ParamStore& params, const AdamWConfig& config, Arena& arena, std::vector<Range> owned = {});
  // What the constructor takes from its arena for `owned_elements` with parameters in `dtype`:
  // the two moments, and FP32 master weights unless the parameters are FP32 (of the elements not
  // offloaded).
  static int64_t bytes(int64_t owned_elements, DType dtype, double offload_fraction = 0.0);
  // The offloaded state elements and the host bytes they take: master weights, moments, and
  // staging for their gradients and updated parameters.
  static int64_t offloaded_elements(int64_t owned_elements, double offload_fraction);
  static int64_t host_bytes(int64_t owned_elements, DType dtype, double offload_fraction);

  // One update with the given learning rate; gradients are multiplied by grad_scale first
  // (the clipping coefficient). Increments the step counter.
  void step(Context& ctx, float learning_rate, float grad_scale) { step(ctx, learning_rate, learning_rate, grad_scale); }
  // The same with the word embedding and output layer (ParamSpec::embedding_or_output) on their own
  // rate (--decoupled-lr): their segments updated by a second launch of the same op.
  void step(Context& ctx, float learning_rate, float decoupled_learning_rate, float grad_scale);

  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  // A resumed run that continues with its checkpoint's weight decay (--use-checkpoint-opt_param-scheduler).
  void set_weight_decay(float weight_decay) { config_.weight_decay = weight_decay; }
  float weight_decay() const { return config_.weight_decay; }
  // What this rank updates, and the FP32 state of it: the owned ranges' elements one after
  // another (without sharding, the layout of the store's flat buffers). master() is the flat
  // values themselves in FP32 training.
  const std::vector<Range>& owned() const { return owned_; }
  int64_t owned_elements() const { return exp_avg_.numel() + host_elements_; }
  int64_t host_elements() const { return host_elements_; }
  // The host memory the offloaded state and its staging took.
  int64_t host_bytes_allocated() const { return static_cast<int64_t>(host_memory_.capacity()); }
  // Without offload: the state tensors (master() is the flat values themselves in FP32 training,
  // without ZeRO-3).
  const Tensor& master() const { return separate_master_ ? master_ : params_.flat_values(); }
  const Tensor& exp_avg() const { return exp_avg_; }
  const Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  // Adds the squares of the master weights of owned flat elements `flat` (inside one part) into
  // scratch[0] (for the parameter norm), wherever they live.
  void add_master_squares(Context& ctx, const Tensor& scratch, Range flat) const;
  bool has_separate_master() const { return separate_master_; }
  // The state as checkpoint pieces: "optimizer/exp_avg/<name>", "optimizer/exp_avg_sq/<name>" and,
  // with separate master weights, "optimizer/master/<name>", each owned part of a parameter slice as
  // up to three rectangles of the global tensor (views of the state). `sharded`: the owned ranges
  // are this rank's alone (the distributed optimizer); otherwise every data-parallel rank holds the
  // same state. Tensor-parallel duplicates get replica_id 1, as in ParamStore::sharded_tensors.
  std::vector<ShardedTensor> sharded_tensors(bool sharded) const;
  // Master weights copied again from the parameters (after parameters were loaded without the
  // optimizer state); moments zeroed and the step count reset: a fresh optimizer.
  void reset_from_params(Context& ctx);

 private:
  struct Part {
    Range range;           // in the flat buffers
    int64_t state_offset;  // in the state tensors (host parts: the host tensors; else the device ones)
    std::vector<ops::AdamWSegment> segments;  // the parameters in `range`, offsets relative to it
    // The segments split by learning rate: the embedding and output layer's (decoupled) and the rest.
    std::vector<ops::AdamWSegment> base_segments, decoupled_segments;
    bool host = false;     // offloaded
  };
  Part make_part(Range range, int64_t state_offset, bool host) const;
  // The part's slice of a state tensor.
  Tensor state(const Part& part, const Tensor& device, const Tensor& host) const;
  // A host part's step in three stages: its gradients (FP32 training: and parameters) copied to
  // the host on `copies`, the update on the host's cores (the decoupled rate on the embedding and
  // output segments), the parameters copied back on `copies`. The copies are complete once
  // `copies` is synchronized.
  void download(Context& copies, const Part& part);
  void update_on_host(const ops::AdamWStep& step, const ops::AdamWStep& decoupled, const Part& part);
  void upload(Context& copies, const Part& part);
  // A host part, the stages one after another (`ctx`: the model's stream, synchronized first).
  void host_step(Context& ctx, const ops::AdamWStep& step, const ops::AdamWStep& decoupled, const Part& part);
  // Every host part, pipelined: part i's update on the host worker while part i+1 downloads and
  // part i-1 uploads on the copy stream.
  void pipelined_host_steps(Context& ctx, const ops::AdamWStep& step, const ops::AdamWStep& decoupled);
  void device_step(Context& ctx, const ops::AdamWStep& step, const std::vector<ops::AdamWSegment>& segments,
                   const Part& part);
  // Host parts: the master weights from the parameters (BF16: copied and cast; FP32: none kept).
  void host_master_from_params(Context& ctx);
  ParamStore& params_;
  AdamWConfig config_;
  bool separate_master_;
  std::vector<Range> owned_;
  std::vector<Part> parts_;
  Tensor master_, exp_avg_, exp_avg_sq_;
  int64_t host_elements_ = 0;
  HostStaging host_memory_;
  Tensor host_master_, host_exp_avg_, host_exp_avg_sq_;  // [host elements] FP32
  Tensor host_grads_, host_values_;  // staging: [host elements] FP32 and in the parameters' dtype
  mutable Context host_ctx_ = Context::cpu(1);  // the host step's threads
  Context copy_ctx_ = Context::cpu(1);          // the pipelined copies' stream (GPU) or immediate copies (CPU)
  std::unique_ptr<HostWorker> host_worker_;     // pipelined: runs a part's host step beside the copies
  int64_t steps_ = 0;
};

}  // namespace gpt
