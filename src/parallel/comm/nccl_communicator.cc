#include "parallel/comm/nccl_communicator.h"
#include "parallel/process_grid.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"
#include "core/logging.h"

#define GPT_NCCL_CHECK(call)                                                                         \
  do {                                                                                               \
    const ncclResult_t gpt_nccl_result_ = (call);                                                    \
    if (gpt_nccl_result_ != ncclSuccess) {                                                           \
      GPT_FATAL() << #call << " failed on group '" << name_ << "': " << ncclGetErrorString(gpt_nccl_result_); \
    }                                                                                                \
  } while (false)

namespace gpt {
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat16: return ncclFloat16;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

// An operation queued on the communicator's stream; waiting makes the caller's stream wait for it.
// The watchdog bounds it by the timeout whether or not anyone waits.
class NcclPending final : public PendingCollective {
 public:
  NcclPending(cudaEvent_t done, std::string operation, const std::string& group)
      : done_(done), operation_(std::move(operation)), group_(group) {}
  ~NcclPending() override { cudaEventDestroy(done_); }

  void wait(Context& ctx) override { GPT_CUDA_CHECK(cudaStreamWaitEvent(ctx.cuda().stream(), done_, 0)); }
  std::string describe() const override { return operation_ + " on group '" + group_ + "' (NCCL)"; }

 private:
  cudaEvent_t done_;
  std::string operation_;
  const std::string& group_;
};

}  // namespace

bool nccl_available() { return true; }

class NcclCommunicator::State {
 public:
  State(Context& ctx, Communicator& bootstrap, std::string name, double timeout_seconds)
      : name_(std::move(name)), timeout_(timeout_seconds), rank_(bootstrap.rank()), size_(bootstrap.size()) {
    GPT_CHECK(ctx.device() == Device::kCuda) << "NCCL communicator '" << name_ << "' needs a GPU context";
    ncclUniqueId id{};
    if (rank_ == 0) GPT_NCCL_CHECK(ncclGetUniqueId(&id));
    Context host = Context::cpu(1);
    bootstrap.broadcast(host, Tensor(&id, DType::kInt32, Shape({static_cast<int64_t>(sizeof(id) / 4)}), Device::kCpu), 0);
    GPT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    GPT_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    GPT_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(float)));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~State() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    cudaStreamSynchronize(stream_);
    for (Pending& p : pending_) cudaEventDestroy(p.done);
    ncclCommDestroy(comm_);
    cudaFree(barrier_word_);
    cudaStreamDestroy(stream_);
  }

  // Queues `enqueue` on the communicator's stream after the context's earlier work. The handle
  // orders the context's later work after it once waited on; until then the compute stream runs
  // on (overlap). The watchdog watches its own event, so a handle waited on late, or dropped by a
  // failing rank, does not blind it.
  template <typename Enqueue>
  CollectiveHandle start(Context& ctx, std::string operation, Enqueue&& enqueue) {
    cudaStream_t compute = ctx.cuda().stream();
    cudaEvent_t ready = nullptr, watched = nullptr, done = nullptr;
    GPT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    GPT_CUDA_CHECK(cudaEventCreateWithFlags(&watched, cudaEventDisableTiming));
    GPT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    GPT_CUDA_CHECK(cudaEventRecord(ready, compute));
    GPT_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    enqueue(stream_);
    GPT_CUDA_CHECK(cudaEventRecord(watched, stream_));
    GPT_CUDA_CHECK(cudaEventRecord(done, stream_));
    GPT_CUDA_CHECK(cudaEventDestroy(ready));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_));
      pending_.push_back({operation, watched, std::chrono::steady_clock::now() + timeout});
    }
    wake_.notify_all();
    return CollectiveHandle(std::make_unique<NcclPending>(done, std::move(operation), name_));
  }

  const std::string name_;
  double timeout_;
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* barrier_word_ = nullptr;

 private:
  struct Pending {
    std::string operation;
    cudaEvent_t done;
    std::chrono::steady_clock::time_point deadline;
  };

  // Polls the oldest unfinished operation; aborts the communicator at its deadline or on an
  // asynchronous NCCL error (a peer that died), so that no rank waits forever.
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) {
        cudaEventDestroy(pending_.front().done);
        pending_.pop_front();
      }
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      const bool late = !pending_.empty() && std::chrono::steady_clock::now() > pending_.front().deadline;
      if (async_error != ncclSuccess || late) {
        const std::string operation = pending_.empty() ? "NCCL operation" : pending_.front().operation;
        ncclCommAbort(comm_);
        GPT_FATAL() << operation << " on group '" << name_ << "' (NCCL) "
                    << (late ? "timed out" : "failed: ") << (late ? "" : ncclGetErrorString(async_error))
                    << " on group rank " << rank_ << " of " << size_ << " after " << timeout_
                    << " s (--distributed-timeout-minutes)";
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  bool stopping_ = false;
  std::thread watchdog_;
};

NcclCommunicator::NcclCommunicator(Context& ctx, Communicator& bootstrap, std::string name, double timeout_seconds)
    : state_(std::make_unique<State>(ctx, bootstrap, std::move(name), timeout_seconds)) {}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return state_->rank_; }
int NcclCommunicator::size() const { return state_->size_; }
const std::string& NcclCommunicator::name() const { return state_->name_; }

namespace {
void check_on_gpu(const std::string& group, const Tensor& t) {
  GPT_CHECK(t.device() == Device::kCuda) << "NCCL group '" << group << "' given host tensor " << t.to_string();
}
}  // namespace

CollectiveHandle NcclCommunicator::start_all_reduce(Context& ctx, const Tensor& data, ReduceOp op) {
  const std::string& name_ = state_->name_;
  check_on_gpu(name_, data);
  return state_->start(ctx, "all_reduce", [&](cudaStream_t stream) {
    GPT_NCCL_CHECK(ncclAllReduce(data.data(), data.data(), static_cast<size_t>(data.numel()), nccl_type(data.dtype()),
                                 nccl_op(op), state_->comm_, stream));
  });
}

CollectiveHandle NcclCommunicator::start_reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input,
                                                        ReduceOp op) {
  const std::string& name_ = state_->name_;
  check_on_gpu(name_, input);
  check_on_gpu(name_, output);
  GPT_CHECK(input.numel() == output.numel() * state_->size_ && input.dtype() == output.dtype())
      << "reduce_scatter " << input.to_string() << " -> " << output.to_string() << " on " << name_;
  return state_->start(ctx, "reduce_scatter", [&](cudaStream_t stream) {
    GPT_NCCL_CHECK(ncclReduceScatter(input.data(), output.data(), static_cast<size_t>(output.numel()),
                                     nccl_type(input.dtype()), nccl_op(op), state_->comm_, stream));
  });
}

CollectiveHandle NcclCommunicator::start_all_gather(Context& ctx, const Tensor& output, const Tensor& input) {
  const std::string& name_ = state_->name_;
  check_on_gpu(name_, input);
  check_on_gpu(name_, output);
  GPT_CHECK(output.numel() == input.numel() * state_->size_ && input.dtype() == output.dtype())
      << "all_gather " << input.to_string() << " -> " << output.to_string() << " on " << name_;
  return state_->start(ctx, "all_gather", [&](cudaStream_t stream) {
    GPT_NCCL_CHECK(ncclAllGather(input.data(), output.data(), static_cast<size_t>(input.numel()),
                                 nccl_type(input.dtype()), state_->comm_, stream));
  });
}

CollectiveHandle NcclCommunicator::start_broadcast(Context& ctx, const Tensor& data, int root) {
  const std::string& name_ = state_->name_;
  check_on_gpu(name_, data);
  return state_->start(ctx, "broadcast", [&](cudaStream_t stream) {
    GPT_NCCL_CHECK(ncclBroadcast(data.data(), data.data(), static_cast<size_t>(data.numel()), nccl_type(data.dtype()),
                                 root, state_->comm_, stream));
  });
}

CollectiveHandle NcclCommunicator::start_exchange(Context& ctx, std::span<const PeerTransfer> transfers) {
  const std::string& name_ = state_->name_;
  for (const PeerTransfer& t : transfers) check_on_gpu(name_, t.tensor);
  // Named by its peers, so that a timeout says which rank did not answer.
  std::string operation = "send/receive with group rank";
  for (size_t i = 0; i < transfers.size(); ++i) {
    operation += (i ? ", " : " ") + std::to_string(transfers[i].peer) +
                 (transfers[i].kind == PeerTransfer::Kind::kSend ? " (send)" : " (receive)");
  }
  return state_->start(ctx, std::move(operation), [&](cudaStream_t stream) {
    // One group call: sends and receives that depend on each other cannot deadlock.
    GPT_NCCL_CHECK(ncclGroupStart());
    for (const PeerTransfer& t : transfers) {
      const size_t count = static_cast<size_t>(t.tensor.numel());
      if (t.kind == PeerTransfer::Kind::kSend) {
        GPT_NCCL_CHECK(ncclSend(t.tensor.data(), count, nccl_type(t.tensor.dtype()), t.peer, state_->comm_, stream));
      } else {
        GPT_NCCL_CHECK(ncclRecv(t.tensor.data(), count, nccl_type(t.tensor.dtype()), t.peer, state_->comm_, stream));
      }
    }
    GPT_NCCL_CHECK(ncclGroupEnd());
  });
}

void NcclCommunicator::barrier(Context& ctx) {
  const std::string& name_ = state_->name_;
  state_->start(ctx, "barrier", [&](cudaStream_t stream) {
    GPT_NCCL_CHECK(ncclAllReduce(state_->barrier_word_, state_->barrier_word_, 1, ncclFloat32, ncclSum, state_->comm_,
                                 stream));
  }).wait(ctx);
  ctx.synchronize();
}

}  // namespace gpt
