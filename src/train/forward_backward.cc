#include "train/forward_backward.h"

#include <algorithm>
#include <set>
#include <string>

#include "core/check.h"
#include "train/pipeline_split.h"

namespace gpt {
namespace {

pipeline::Schedule checked(absl::StatusOr<pipeline::Schedule> schedule) {
  // The layout was validated with the arguments (validate_for_world): a refusal here is a bug.
  GPT_CHECK(schedule.ok()) << "pipeline schedule: " << schedule.status();
  return *std::move(schedule);
}

}  // namespace

bool PipelineLayout::holds_embedding() const {
  return std::any_of(chunks.begin(), chunks.end(), [](const ChunkLayout& c) { return c.has_embedding; });
}

bool PipelineLayout::holds_output() const {
  return std::any_of(chunks.begin(), chunks.end(), [](const ChunkLayout& c) { return c.has_output; });
}

std::vector<ParamSpec> rank_param_specs(const std::vector<ParamSpec>& all, const PipelineLayout& layout,
                                        ExpertShare experts) {
  // A rank whose chunks hold both ends (ZB-V's rank 0) has one word embedding, shared by its
  // first chunk's embedding and its last chunk's tied head, as on one rank.
  const int64_t num_experts = routed_experts(all);
  std::vector<ParamSpec> specs;
  std::set<std::string> names;
  for (const ChunkLayout& chunk : layout.chunks) {
    for (ParamSpec& spec : chunk_param_specs(all, chunk)) {
      if (!holds_param(spec, num_experts, experts)) continue;
      if (names.insert(spec.name).second) specs.push_back(std::move(spec));
    }
  }
  return specs;
}

ForwardBackward::ForwardBackward(const PipelineLayout& layout, const std::vector<int64_t>& train_microbatches)
    : layout_(layout),
      train_microbatches_(layout.microbatches),
      train_(training_schedule(layout.microbatches)),
      evaluate_(checked(pipeline::make_forward_only_schedule(layout.pipeline_size, layout.virtual_size,
                                                             static_cast<int>(layout.microbatches), layout.placement,
                                                             layout.microbatch_group))) {
  GPT_CHECK(train_.placement == layout.placement) << "pipeline schedule of another chunk placement";
  const int chunks = layout.virtual_size;
  const auto& rank = static_cast<size_t>(layout.pipeline_rank);
  slots_ = pipeline::stash_slots(train_.ranks[rank], chunks, layout.stages());
  const std::vector<int> evaluation = pipeline::stash_slots(evaluate_.ranks[rank], chunks, layout.stages());
  for (size_t c = 0; c < slots_.size(); ++c) slots_[c] = std::max(slots_[c], evaluation[c]);
  depths_ = pipeline::deferral_depths(train_.ranks[rank], chunks);
  // Every other training schedule the run may switch to: the buffers are sized once, for all.
  for (int64_t m : train_microbatches) {
    if (m == layout.microbatches) continue;
    // A count the layout cannot run (an interleaved schedule's multiple of PP) is refused before
    // the run reaches it (check_batch_sizes_reached): nothing to size for it.
    absl::StatusOr<pipeline::Schedule> made = pipeline::make_schedule(
        layout.schedule, layout.pipeline_size, layout.virtual_size, static_cast<int>(m), layout.microbatch_group);
    if (!made.ok()) continue;
    const pipeline::Schedule& other = *made;
    const std::vector<int> slots = pipeline::stash_slots(other.ranks[rank], chunks, layout.stages());
    const std::vector<int> depths = pipeline::deferral_depths(other.ranks[rank], chunks);
    for (size_t c = 0; c < slots_.size(); ++c) {
      slots_[c] = std::max(slots_[c], slots[c]);
      depths_[c] = std::max(depths_[c], depths[c]);
    }
  }
}

pipeline::Schedule ForwardBackward::training_schedule(int64_t microbatches) const {
  return checked(pipeline::make_schedule(layout_.schedule, layout_.pipeline_size, layout_.virtual_size,
                                         static_cast<int>(microbatches), layout_.microbatch_group));
}

void ForwardBackward::set_train_microbatches(int64_t microbatches) {
  if (microbatches == train_microbatches_) return;
  pipeline::Schedule schedule = training_schedule(microbatches);
  const int chunks = layout_.virtual_size;
  const auto& rank = static_cast<size_t>(layout_.pipeline_rank);
  const std::vector<int> slots = pipeline::stash_slots(schedule.ranks[rank], chunks, layout_.stages());
  const std::vector<int> depths = pipeline::deferral_depths(schedule.ranks[rank], chunks);
  for (size_t c = 0; c < slots_.size(); ++c) {
    GPT_CHECK_LE(slots[c], slots_[c]) << "stash slots of " << microbatches << " microbatches, chunk " << c;
    GPT_CHECK_LE(depths[c], depths_[c]) << "lease depth of " << microbatches << " microbatches, chunk " << c;
  }
  train_ = std::move(schedule);
  train_microbatches_ = microbatches;
}

void ForwardBackward::attach(std::vector<pipeline::Stage*> chunks, Arena& arena) {
  GPT_CHECK_EQ(chunks.size(), slots_.size()) << "model chunks for the pipeline";
  executor_ = std::make_unique<pipeline::Executor>(layout_.stages(), std::move(chunks), slots_, arena);
}

void ForwardBackward::run(Context& ctx, Communicator& pipeline, Pass pass) {
  GPT_CHECK(executor_ != nullptr) << "forward_backward before the model chunks were attached";
  executor_->set_recording(recording_ && pass == Pass::kTrain);
  executor_->run(ctx, pipeline, schedule(pass).ranks[static_cast<size_t>(layout_.pipeline_rank)]);
}

const std::vector<std::pair<double, double>>& ForwardBackward::timeline() const {
  GPT_CHECK(executor_ != nullptr) << "timeline before the model chunks were attached";
  return executor_->timeline();
}

}  // namespace gpt
