// FP8 training of the transformer layers' linears (Megatron's --fp8-format / --fp8-recipe, as
// Transformer Engine runs them): each GEMM's two operands are cast to FP8 with per-tensor scales
// (kernels/ops.h MatmulOptions::fp8), the product scaled back; master weights, gradients and every
// other op stay in the model's dtype. The embedding and the output layer stay in it too.
//
//   forward     y  = x W^T       x: input (forward format), W: weight (forward format)
//   input grad  dx = dy W        dy: output gradient (backward format: E5M2 with hybrid)
//   weight grad dW = dy^T x      the same casts of dy and x (unless --no-fp8-wgrad)
//
// A scale makes a tensor's largest magnitude (its amax) land at the format's largest value:
// scale = max_finite / amax (/ 2^margin with delayed scaling). Two recipes:
//   tensorwise  the tensor's own amax, computed before each cast (Transformer Engine's current
//               scaling). No state.
//   delayed     the amax of earlier steps (Transformer Engine's DelayedScaling): each step records
//               every tensor's amax; at the step's end the amaxes go into a history of
//               --fp8-amax-history-len steps, and the next step's scale comes from the history's
//               most recent entry or its maximum (--fp8-amax-compute-algo). Scales start at 1.
//
// Layouts never change the numbers: a tensor's amax is that of the whole tensor, whatever splits
// it. Tensorwise, a tensor split over tensor parallelism reduces its amax over the TP group before
// the cast (x of a row-parallel linear, dy of a column-parallel one, every weight). Delayed, a
// step's amax is the maximum over the step's microbatches on every rank (one all-reduce over the
// world at the step's end), so the scales, and their history, are the same on every rank; this
// class keeps the state of every layer on every rank, which makes the checkpoint records
// (rank 0's) complete under any pipeline split. An evaluation's passes record nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "core/status.h"

namespace gpt {

class Communicator;
class Context;

// Megatron's --fp8-recipe.
enum class Fp8Recipe { kTensorwise, kDelayed };

struct Fp8Config {
  bool enabled = false;
  Fp8Format forward_format = Fp8Format::kE4M3;   // inputs and weights
  Fp8Format backward_format = Fp8Format::kE4M3;  // output gradients (E5M2 with --fp8-format hybrid)
  Fp8Recipe recipe = Fp8Recipe::kDelayed;
  int margin = 0;                // --fp8-margin (delayed)
  int amax_history_len = 1;      // --fp8-amax-history-len (delayed)
  bool amax_history_max = false;  // --fp8-amax-compute-algo max (else most_recent)
  bool weight_gradient = true;   // false: --no-fp8-wgrad (dW from the unscaled operands)
};

// The tensors of a linear that are cast.
enum class Fp8Role { kInput, kWeight, kGradOutput };

class Fp8Scaling {
 public:
  static constexpr int kLinearsPerLayer = 4;  // linear_qkv, linear_proj, linear_fc1, linear_fc2

  Fp8Scaling(const Fp8Config& config, int64_t num_layers);

  const Fp8Config& config() const { return config_; }
  Fp8Format format(Fp8Role role) const {
    return role == Fp8Role::kGradOutput ? config_.backward_format : config_.forward_format;
  }

  // The scale of a tensor about to be cast, whose amax (over the whole tensor) is `amax`.
  // Tensorwise: from this amax. Delayed: the step's scale; the amax joins the step's record
  // (unless an evaluation is running).
  float scale(int64_t layer, int linear, Fp8Role role, float amax);
  // True when scale() needs the amax of the tensor (always, except for delayed scaling outside a
  // training step, whose amaxes are not recorded).
  bool needs_amax() const { return config_.recipe == Fp8Recipe::kTensorwise || recording_; }

  // A training step's passes record amaxes, from begin_step to end_step; passes outside (an
  // evaluation) do not.
  void begin_step();
  // Delayed: the step's amaxes, reduced (maximum) over `world`, into the history, and the next
  // step's scales. Nothing for tensorwise. Every rank calls it.
  void end_step(Context& ctx, Communicator& world);

  // Checkpoint records (delayed: the scales and histories; tensorwise: none): "fp8/..." keys.
  void save_records(std::map<std::string, std::string>& records) const;
  absl::Status load_records(const std::map<std::string, std::string>& records);

  // scale = max_finite / amax / 2^margin, or `previous` where amax is 0 or not finite
  // (Transformer Engine's rule).
  static float scale_for(float amax, Fp8Format format, int margin, float previous);

 private:
  struct Entry {
    float scale = 1.0f;
    float step_amax = 0.0f;
    std::vector<float> history;  // most recent first, amax_history_len entries
  };
  Entry& entry(int64_t layer, int linear, Fp8Role role);

  Fp8Config config_;
  int64_t num_layers_;
  std::vector<Entry> entries_;  // [layer][linear][role]
  std::vector<float> step_amaxes_;  // end_step's staging for the world's all-reduce, [entries]
  bool recording_ = false;
};

}  // namespace gpt
