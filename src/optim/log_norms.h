// Diagnostics for the log line, as Megatron computes them:
//   --log-params-norm        calc_params_l2_norm: the L2 norm of the FP32 main weights (the
//                            optimizer's master copy under --bf16), every parameter once;
//   --log-num-zeros-in-grad  count_zeros_fp32: the number of gradient elements equal to zero.
// Both count what this rank holds (its owned ranges; TP duplicates and the last stage's tied
// embedding copy excluded, as for the gradient norm) and are summed over `groups`, the same groups
// as the gradient norm (model-parallel, plus data-parallel with the distributed optimizer).
#pragma once

#include <cstdint>
#include <span>

#include "core/context.h"
#include "model/param_store.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "parallel/comm/communicator.h"

namespace gpt {

// `scratch`: a float32 [1] tensor.
double global_params_norm(Context& ctx, const ParamStore& params, const AdamW& optimizer, const Tensor& scratch,
                          std::span<Communicator* const> groups);

// `scratch`: an int64 [1] tensor. Counts the gradients as they are when called (before clipping
// scales them; a zero stays zero).
int64_t count_zero_gradients(Context& ctx, const ParamStore& params, std::span<const Range> owned,
                             const Tensor& scratch, std::span<Communicator* const> groups);

// The same with each domain's part reduced over its own groups (optim/grad_clip.h's NormGroups:
// the dense groups alone when the plan keeps no experts apart).
double domain_params_norm(Context& ctx, const ParamStore& params, const AdamW& optimizer, const Tensor& scratch,
                          const NormGroups& groups);
int64_t domain_zero_gradients(Context& ctx, const ParamStore& params, std::span<const Range> owned,
                              const Tensor& scratch, const NormGroups& groups);

}  // namespace gpt
