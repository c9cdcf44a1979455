#include "parallel/comm/mpi_communicator.h"

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/bf16.h"
#include "core/check.h"
#include "core/memory.h"

#define GPT_MPI_CHECK(call)                                                           \
  do {                                                                                \
    const int gpt_mpi_status_ = (call);                                               \
    if (gpt_mpi_status_ != MPI_SUCCESS) {                                             \
      char gpt_mpi_text_[MPI_MAX_ERROR_STRING];                                       \
      int gpt_mpi_length_ = 0;                                                        \
      MPI_Error_string(gpt_mpi_status_, gpt_mpi_text_, &gpt_mpi_length_);             \
      GPT_FATAL() << #call << " failed on group '" << name_ << "': " << gpt_mpi_text_; \
    }                                                                                 \
  } while (false)

namespace gpt {
namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kBFloat16: return MPI_UINT16_T;  // moved as raw bits; reductions widen to FP32
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_seconds)
    : comm_(comm), name_(std::move(name)), timeout_seconds_(timeout_seconds) {
  staging_.reserve(3);
  for (int i = 0; i < 3; ++i) staging_.emplace_back();
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  world_ranks_.resize(static_cast<size_t>(size_));
  GPT_MPI_CHECK(MPI_Allgather(&world_rank_, 1, MPI_INT, world_ranks_.data(), 1, MPI_INT, comm_));
}

MpiCommunicator::~MpiCommunicator() {
  // A communicator that outlives MPI (a static in a test) needs no freeing: MPI is gone.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

MpiCommunicator::Staged MpiCommunicator::stage_in(Context& ctx, const Tensor& t, int slot, bool widen_bf16,
                                                  bool copy_contents) {
  const bool widen = widen_bf16 && t.dtype() == DType::kBFloat16;
  if (t.device() == Device::kCpu && !widen) return {t.data(), mpi_type(t.dtype()), false};
  const size_t bytes = static_cast<size_t>(t.numel()) * (widen ? sizeof(float) : dtype_size(t.dtype()));
  void* buffer = staging_[static_cast<size_t>(slot)].reserve(bytes);
  if (copy_contents) {
    ctx.synchronize();
    if (!widen) {
      copy_bytes(Device::kCpu, buffer, t.device(), t.data(), t.bytes());
    } else {
      const bf16* bits = host_bf16(t);
      auto* widened = static_cast<float*>(buffer);
      for (int64_t i = 0; i < t.numel(); ++i) widened[i] = bits[i].to_float();
    }
  }
  return {buffer, widen ? MPI_FLOAT : mpi_type(t.dtype()), true};
}

const bf16* MpiCommunicator::host_bf16(const Tensor& t) {
  if (t.device() == Device::kCpu) return t.data_as<bf16>();
  void* bits = staging_[2].reserve(t.bytes());
  copy_bytes(Device::kCpu, bits, t.device(), t.data(), t.bytes());
  return static_cast<const bf16*>(bits);
}

void MpiCommunicator::stage_out(Context& ctx, const Tensor& t, const Staged& staged) {
  if (!staged.copied) return;
  if (staged.type == MPI_FLOAT && t.dtype() == DType::kBFloat16) {
    bf16* bits = t.device() == Device::kCpu ? t.data_as<bf16>() : static_cast<bf16*>(staging_[2].reserve(t.bytes()));
    const auto* widened = static_cast<const float*>(staged.data);
    for (int64_t i = 0; i < t.numel(); ++i) bits[i] = bf16(widened[i]);
    if (t.device() != Device::kCpu) copy_bytes(t.device(), t.data(), Device::kCpu, bits, t.bytes());
  } else {
    copy_bytes(t.device(), t.data(), Device::kCpu, staged.data, t.bytes());
  }
}

void MpiCommunicator::wait(const char* operation, std::vector<MPI_Request>& requests) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds_);
  // Poll with back-off: MPI needs the calls to make progress, but several ranks may share a core.
  auto pause = std::chrono::microseconds(0);
  while (true) {
    int done = 0;
    GPT_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
    if (done) return;
    if (Clock::now() > deadline) {
      std::ostringstream members;
      for (size_t i = 0; i < world_ranks_.size(); ++i) members << (i ? "," : "") << world_ranks_[i];
      GPT_FATAL() << operation << " on group '" << name_ << "' (world ranks [" << members.str()
                  << "]) timed out on world rank " << world_rank_ << " after " << timeout_seconds_
                  << " s (--distributed-timeout-minutes): a rank of the group did not arrive";
    }
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
  }
}

void MpiCommunicator::all_reduce(Context& ctx, const Tensor& data, ReduceOp op) {
  if (data.numel() == 0) return;
  const Staged staged = stage_in(ctx, data, 0, /*widen_bf16=*/true, /*copy_contents=*/true);
  std::vector<MPI_Request> requests(1);
  GPT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, staged.data, static_cast<int>(data.numel()), staged.type, mpi_op(op),
                               comm_, &requests[0]));
  wait("all_reduce", requests);
  stage_out(ctx, data, staged);
}

void MpiCommunicator::reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp op) {
  GPT_CHECK(input.numel() == output.numel() * size_ && input.dtype() == output.dtype())
      << "reduce_scatter " << input.to_string() << " -> " << output.to_string() << " on " << name_;
  const Staged in = stage_in(ctx, input, 0, true, true);
  const Staged out = stage_in(ctx, output, 1, true, false);
  std::vector<MPI_Request> requests(1);
  GPT_MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, static_cast<int>(output.numel()), in.type, mpi_op(op),
                                          comm_, &requests[0]));
  wait("reduce_scatter", requests);
  stage_out(ctx, output, out);
}

void MpiCommunicator::all_gather(Context& ctx, const Tensor& output, const Tensor& input) {
  GPT_CHECK(output.numel() == input.numel() * size_ && input.dtype() == output.dtype())
      << "all_gather " << input.to_string() << " -> " << output.to_string() << " on " << name_;
  const Staged in = stage_in(ctx, input, 0, false, true);
  const Staged out = stage_in(ctx, output, 1, false, false);
  std::vector<MPI_Request> requests(1);
  GPT_MPI_CHECK(MPI_Iallgather(in.data, static_cast<int>(input.numel()), in.type, out.data,
                               static_cast<int>(input.numel()), out.type, comm_, &requests[0]));
  wait("all_gather", requests);
  stage_out(ctx, output, out);
}

void MpiCommunicator::broadcast(Context& ctx, const Tensor& data, int root) {
  const Staged staged = stage_in(ctx, data, 0, false, rank_ == root);
  std::vector<MPI_Request> requests(1);
  GPT_MPI_CHECK(MPI_Ibcast(staged.data, static_cast<int>(data.numel()), staged.type, root, comm_, &requests[0]));
  wait("broadcast", requests);
  if (rank_ != root) stage_out(ctx, data, staged);
}

void MpiCommunicator::exchange(Context& ctx, std::span<const PeerTransfer> transfers) {
  // Host tensors are used in place; device tensors each get their own staging buffer.
  while (transfer_staging_.size() < transfers.size()) transfer_staging_.emplace_back();
  std::vector<void*> buffers(transfers.size());
  std::vector<MPI_Request> requests(transfers.size());
  if (!transfers.empty()) ctx.synchronize();
  for (size_t i = 0; i < transfers.size(); ++i) {
    const PeerTransfer& t = transfers[i];
    GPT_CHECK(t.peer >= 0 && t.peer < size_ && t.peer != rank_) << "peer " << t.peer << " in group " << name_;
    buffers[i] = t.tensor.data();
    if (t.tensor.device() != Device::kCpu) {
      buffers[i] = transfer_staging_[i].reserve(t.tensor.bytes());
      if (t.kind == PeerTransfer::Kind::kSend) {
        copy_bytes(Device::kCpu, buffers[i], t.tensor.device(), t.tensor.data(), t.tensor.bytes());
      }
    }
    const int count = static_cast<int>(t.tensor.numel());
    const MPI_Datatype type = mpi_type(t.tensor.dtype());
    if (t.kind == PeerTransfer::Kind::kSend) {
      GPT_MPI_CHECK(MPI_Isend(buffers[i], count, type, t.peer, 0, comm_, &requests[i]));
    } else {
      GPT_MPI_CHECK(MPI_Irecv(buffers[i], count, type, t.peer, 0, comm_, &requests[i]));
    }
  }
  wait("send/receive", requests);
  for (size_t i = 0; i < transfers.size(); ++i) {
    const PeerTransfer& t = transfers[i];
    if (t.kind == PeerTransfer::Kind::kReceive && t.tensor.device() != Device::kCpu) {
      copy_bytes(t.tensor.device(), t.tensor.data(), Device::kCpu, buffers[i], t.tensor.bytes());
    }
  }
}

void MpiCommunicator::barrier(Context&) {
  std::vector<MPI_Request> requests(1);
  GPT_MPI_CHECK(MPI_Ibarrier(comm_, &requests[0]));
  wait("barrier", requests);
}

}  // namespace gpt
