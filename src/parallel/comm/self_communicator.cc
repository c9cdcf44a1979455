#include "parallel/comm/self_communicator.h"

#include "core/memory.h"

namespace gpt {

void SelfCommunicator::reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp) {
  ctx.synchronize();
  copy_tensor(output, input);
}

void SelfCommunicator::all_gather(Context& ctx, const Tensor& output, const Tensor& input) {
  ctx.synchronize();
  copy_tensor(output, input);
}

void SelfCommunicator::broadcast(Context&, const Tensor&, int root) {
  GPT_CHECK_EQ(root, 0) << "broadcast root outside a group of one (" << name_ << ")";
}

void SelfCommunicator::exchange(Context&, std::span<const PeerTransfer> transfers) {
  GPT_CHECK(transfers.empty()) << "point-to-point transfer in the group of one '" << name_ << "'";
}

}  // namespace gpt
