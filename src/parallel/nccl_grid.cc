#include "parallel/comm/nccl_communicator.h"
#include "parallel/process_grid.h"

namespace gpt {

void ProcessGrid::adopt_nccl(Context& ctx, double timeout_seconds) {
  for (std::unique_ptr<Communicator>* group :
       {&world_, &tensor_, &data_, &pipeline_, &embedding_, &model_parallel_, &context_, &data_context_,
        &optimizer_instance_, &across_optimizer_instances_, &context_inner_, &context_outer_, &expert_.tensor,
        &expert_.model, &expert_.exchange, &expert_.data, &expert_.tensor_model_pipeline}) {
    if (*group == nullptr || (*group)->size() == 1) continue;
    auto nccl = std::make_unique<NcclCommunicator>(ctx, **group, (*group)->name(), timeout_seconds);
    bootstrap_.push_back(std::move(*group));
    *group = std::move(nccl);
  }
}

}  // namespace gpt
