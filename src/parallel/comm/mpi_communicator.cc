#include "parallel/comm/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>

#include "core/float16.h"
#include "core/check.h"
#include "core/stream_copy.h"

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
    case DType::kBFloat16:  // moved as raw bits; reductions widen to FP32
    case DType::kFloat16: return MPI_UINT16_T;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

}  // namespace

// One operation in flight: its MPI requests and the host copies it works on, which are its own
// until wait() has copied the results back.
class MpiCommunicator::Pending final : public PendingCollective {
 public:
  Pending(MpiCommunicator& comm, std::string operation) : comm_(comm), operation_(std::move(operation)) {}
  ~Pending() override {
    for (std::unique_ptr<HostStaging>& area : staging_) comm_.return_staging(std::move(area));
  }

  struct Host {
    void* data;
    MPI_Datatype type;
  };
  // Host view of `t` in the type MPI works on (FP32 for BF16 and FP16 reductions): the tensor itself when
  // it is a host tensor of that type, else a staging copy, filled from `t` when `copy_in` and
  // copied back into `t` by wait() when `copy_out`.
  Host stage(Context& ctx, const Tensor& t, bool widen_float16, bool copy_in, bool copy_out) {
    const bool widen = widen_float16 && is_float16_dtype(t.dtype());
    if (t.device() == Device::kCpu && !widen) return {t.data(), mpi_type(t.dtype())};
    void* host = borrow(widen ? static_cast<size_t>(t.numel()) * sizeof(float) : t.bytes());
    if (copy_in) {
      const void* bits = t.data();
      if (t.device() != Device::kCpu) {
        void* landing = widen ? borrow(t.bytes()) : host;
        copy_to_host(ctx, landing, t);
        ctx.synchronize();  // MPI reads host memory: this stream's copy must have landed
        bits = landing;
      }
      if (widen) {
        const auto* from = static_cast<const uint16_t*>(bits);
        auto* to = static_cast<float*>(host);
        const bool half = t.dtype() == DType::kFloat16;
        for (int64_t i = 0; i < t.numel(); ++i) to[i] = half ? fp16_bits_to_float(from[i]) : bf16_bits_to_float(from[i]);
      }
    }
    if (copy_out) copy_back_.push_back({t, host, widen});
    return {host, widen ? MPI_FLOAT : mpi_type(t.dtype())};
  }

  void wait(Context& ctx) override {
    comm_.wait_requests(operation_.c_str(), requests);
    bool queued = false;
    for (const CopyBack& back : copy_back_) {
      const void* bits = back.data;
      if (back.widened) {
        auto* narrowed = back.tensor.device() == Device::kCpu ? static_cast<uint16_t*>(back.tensor.data())
                                                              : static_cast<uint16_t*>(borrow(back.tensor.bytes()));
        const auto* from = static_cast<const float*>(back.data);
        const bool half = back.tensor.dtype() == DType::kFloat16;
        for (int64_t i = 0; i < back.tensor.numel(); ++i) {
          narrowed[i] = half ? float_to_fp16_bits(from[i]) : float_to_bf16_bits(from[i]);
        }
        bits = narrowed;
      }
      if (back.tensor.device() != Device::kCpu) {
        copy_to_device(ctx, back.tensor, bits);
        queued = true;
      }
    }
    // The staging areas go back to the pool, and page-locked ones are read by the copies until the
    // stream reaches them: wait for this stream (not the device) before letting them go.
    if (queued) ctx.synchronize();
  }

  std::string describe() const override { return operation_ + " on group '" + comm_.name_ + "'"; }

  void progress() override {
    int done = 0;
    const std::string& name_ = comm_.name_;  // for GPT_MPI_CHECK's message
    GPT_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
  }

  std::vector<MPI_Request> requests;

 private:
  struct CopyBack {
    Tensor tensor;
    void* data;
    bool widened;
  };

  void* borrow(size_t bytes) {
    staging_.push_back(comm_.borrow_staging());
    return staging_.back()->reserve(bytes);
  }

  MpiCommunicator& comm_;
  std::string operation_;
  std::vector<std::unique_ptr<HostStaging>> staging_;
  std::vector<CopyBack> copy_back_;
};

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_seconds)
    : comm_(comm), name_(std::move(name)), timeout_seconds_(timeout_seconds) {
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

std::unique_ptr<HostStaging> MpiCommunicator::borrow_staging() {
  if (free_staging_.empty()) return std::make_unique<HostStaging>();
  // The largest free area: it most likely fits, and areas then keep distinct sizes.
  auto largest = std::max_element(free_staging_.begin(), free_staging_.end(),
                                  [](const auto& a, const auto& b) { return a->capacity() < b->capacity(); });
  std::unique_ptr<HostStaging> area = std::move(*largest);
  free_staging_.erase(largest);
  return area;
}

void MpiCommunicator::return_staging(std::unique_ptr<HostStaging> area) { free_staging_.push_back(std::move(area)); }

void MpiCommunicator::wait_requests(const char* operation, std::vector<MPI_Request>& requests) {
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

namespace {

// MPI counts are ints (Debian's OpenMPI has no MPI-4 large-count calls): a longer contiguous
// message goes as consecutive pieces of at most 2^30 elements, one request each. `call` gets
// (pointer, count, request) per piece.
int64_t g_max_piece = int64_t{1} << 30;

template <typename Call>
void in_pieces(void* data, int64_t count, MPI_Datatype type, std::vector<MPI_Request>& requests, Call&& call) {
  int element = 0;
  MPI_Type_size(type, &element);
  for (int64_t begin = 0; begin < count; begin += g_max_piece) {
    const int piece = static_cast<int>(std::min(g_max_piece, count - begin));
    requests.push_back(MPI_REQUEST_NULL);
    call(static_cast<char*>(data) + begin * element, piece, &requests.back());
  }
}

}  // namespace

void MpiCommunicator::set_message_piece_for_testing(int64_t elements) {
  GPT_CHECK(elements >= 1 && elements <= (int64_t{1} << 30)) << "message piece " << elements;
  g_max_piece = elements;
}

int MpiCommunicator::checked_count(int64_t count, const char* operation) const {
  GPT_CHECK_LE(count, int64_t{std::numeric_limits<int>::max()})
      << operation << " on group '" << name_ << "': " << count << " elements per rank exceed MPI's int count "
      << "(gradient buckets are cut at 2^30 elements for this reason)";
  return static_cast<int>(count);
}

CollectiveHandle MpiCommunicator::start_all_reduce(Context& ctx, const Tensor& data, ReduceOp op) {
  if (data.numel() == 0) return {};
  auto pending = std::make_unique<Pending>(*this, "all_reduce");
  const Pending::Host host = pending->stage(ctx, data, /*widen_float16=*/true, /*copy_in=*/true, /*copy_out=*/true);
  in_pieces(host.data, data.numel(), host.type, pending->requests, [&](void* piece, int count, MPI_Request* request) {
    GPT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, piece, count, host.type, mpi_op(op), comm_, request));
  });
  return CollectiveHandle(std::move(pending));
}

CollectiveHandle MpiCommunicator::start_reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input,
                                                       ReduceOp op) {
  GPT_CHECK(input.numel() == output.numel() * size_ && input.dtype() == output.dtype())
      << "reduce_scatter " << input.to_string() << " -> " << output.to_string() << " on " << name_;
  auto pending = std::make_unique<Pending>(*this, "reduce_scatter");
  const Pending::Host in = pending->stage(ctx, input, true, /*copy_in=*/true, /*copy_out=*/false);
  const Pending::Host out = pending->stage(ctx, output, true, /*copy_in=*/false, /*copy_out=*/true);
  pending->requests.resize(1);
  GPT_MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, checked_count(output.numel(), "reduce_scatter"), in.type,
                                          mpi_op(op), comm_, &pending->requests[0]));
  return CollectiveHandle(std::move(pending));
}

CollectiveHandle MpiCommunicator::start_all_gather(Context& ctx, const Tensor& output, const Tensor& input) {
  GPT_CHECK(output.numel() == input.numel() * size_ && input.dtype() == output.dtype())
      << "all_gather " << input.to_string() << " -> " << output.to_string() << " on " << name_;
  auto pending = std::make_unique<Pending>(*this, "all_gather");
  const Pending::Host in = pending->stage(ctx, input, false, /*copy_in=*/true, /*copy_out=*/false);
  const Pending::Host out = pending->stage(ctx, output, false, /*copy_in=*/false, /*copy_out=*/true);
  pending->requests.resize(1);
  const int count = checked_count(input.numel(), "all_gather");
  GPT_MPI_CHECK(MPI_Iallgather(in.data, count, in.type, out.data, count, out.type, comm_, &pending->requests[0]));
  return CollectiveHandle(std::move(pending));
}

CollectiveHandle MpiCommunicator::start_broadcast(Context& ctx, const Tensor& data, int root) {
  auto pending = std::make_unique<Pending>(*this, "broadcast");
  const bool is_root = rank_ == root;
  const Pending::Host host = pending->stage(ctx, data, false, /*copy_in=*/is_root, /*copy_out=*/!is_root);
  in_pieces(host.data, data.numel(), host.type, pending->requests, [&](void* piece, int count, MPI_Request* request) {
    GPT_MPI_CHECK(MPI_Ibcast(piece, count, host.type, root, comm_, request));
  });
  return CollectiveHandle(std::move(pending));
}

CollectiveHandle MpiCommunicator::start_exchange(Context& ctx, std::span<const PeerTransfer> transfers) {
  if (transfers.empty()) return {};
  // Host tensors are used in place; device tensors each get their own staging area.
  // Named by its peers, so that a timeout says which rank did not answer.
  std::ostringstream operation;
  operation << "send/receive with world rank";
  for (size_t i = 0; i < transfers.size(); ++i) {
    const int peer = transfers[i].peer;
    operation << (i ? ", " : " ") << (peer >= 0 && peer < size_ ? world_ranks_[static_cast<size_t>(peer)] : peer)
              << (transfers[i].kind == PeerTransfer::Kind::kSend ? " (send)" : " (receive)");
  }
  auto pending = std::make_unique<Pending>(*this, operation.str());
  for (size_t i = 0; i < transfers.size(); ++i) {
    const PeerTransfer& t = transfers[i];
    GPT_CHECK(t.peer >= 0 && t.peer < size_ && t.peer != rank_) << "peer " << t.peer << " in group " << name_;
    const bool send = t.kind == PeerTransfer::Kind::kSend;
    const Pending::Host host = pending->stage(ctx, t.tensor, false, /*copy_in=*/send, /*copy_out=*/!send);
    // Pieces between one pair of ranks arrive in order (MPI does not overtake on one tag).
    in_pieces(host.data, t.tensor.numel(), host.type, pending->requests, [&](void* piece, int count, MPI_Request* r) {
      if (send) {
        GPT_MPI_CHECK(MPI_Isend(piece, count, host.type, t.peer, 0, comm_, r));
      } else {
        GPT_MPI_CHECK(MPI_Irecv(piece, count, host.type, t.peer, 0, comm_, r));
      }
    });
  }
  return CollectiveHandle(std::move(pending));
}

void MpiCommunicator::barrier(Context&) {
  std::vector<MPI_Request> requests(1);
  GPT_MPI_CHECK(MPI_Ibarrier(comm_, &requests[0]));
  wait_requests("barrier", requests);
}

}  // namespace gpt
