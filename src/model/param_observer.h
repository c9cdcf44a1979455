// What a model chunk tells about its parameters while it runs, group by group (a group is the
// embedding, one transformer layer, or the output layer with the final norm and the LM head): the
// seam data-parallel gradient reduction, parameter gathering (ZeRO-3) and offloading hang on.
//
// Per microbatch (stash slot), in the order the chunk runs:
//   forward:    before_use(kForward)   ... the group's forward ...   after_use(kForward)
//   backward:   [full recompute: before_use(kRecompute) / after_use(kRecompute) for each layer of a
//               recompute group, right before the backward of the group's last layer]
//               before_use(kBackward)  ... input gradient ...        after_use(kBackward)
//               ... weight gradient (at once, or in a later backward_weight pass) ...
//               gradients_ready(last_of_step)
// Only the input-gradient pass reads parameter values (the weight gradient reads activations and
// output gradients), so a gathered parameter may be released after after_use(kBackward), and a
// gradient is complete for the microbatch at gradients_ready. `last_of_step` comes from the
// pipeline schedule (the chunk's last backward of the step): the group's gradients are final.
#pragma once

#include <string>
#include <vector>

#include "core/context.h"
#include "model/param_store.h"

namespace gpt {

enum class ParamUse { kForward, kRecompute, kBackward };

const char* to_string(ParamUse use);

struct ParamGroup {
  int index = 0;     // in the chunk, forward order
  std::string name;  // "embedding", "layer 7" (global layer number), "output"
  std::vector<Param*> params;  // the tied word embedding is listed in every group that uses it
};

class ParamObserver {
 public:
  virtual ~ParamObserver() = default;
  virtual void before_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) {}
  virtual void after_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) {}
  virtual void gradients_ready(Context& ctx, const ParamGroup& group, int slot, bool last_of_step) {}
};

}  // namespace gpt
