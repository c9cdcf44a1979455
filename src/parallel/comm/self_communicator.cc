#include "parallel/comm/self_communicator.h"

#include "core/check.h"
#include "kernels/ops.h"

namespace gpt {

CollectiveHandle SelfCommunicator::start_reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input,
                                                        ReduceOp) {
  ops::copy(ctx, output, input);
  return {};
}

CollectiveHandle SelfCommunicator::start_all_gather(Context& ctx, const Tensor& output, const Tensor& input) {
  ops::copy(ctx, output, input);
  return {};
}

CollectiveHandle SelfCommunicator::start_broadcast(Context&, const Tensor&, int root) {
  GPT_CHECK_EQ(root, 0) << "broadcast root outside a group of one (" << name_ << ")";
  return {};
}

CollectiveHandle SelfCommunicator::start_exchange(Context&, std::span<const PeerTransfer> transfers) {
  GPT_CHECK(transfers.empty()) << "point-to-point transfer in the group of one '" << name_ << "'";
  return {};
}

}  // namespace gpt
