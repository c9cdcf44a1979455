#include "parallel/comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <sstream>

#include "core/check.h"
#include "core/float16.h"
#include "core/stream_copy.h"

namespace gpt {
namespace {

using Clock = std::chrono::steady_clock;

// The slot of sends and receives: a prefix no Gloo collective uses (gloo/types.h takes 0x01-0x08),
// so point-to-point messages never match a collective's, whatever its tag.
using ReduceFunction = GlooCommunicator::ReduceFunction;

constexpr uint8_t kExchangeSlotPrefix = 0x70;
constexpr uint8_t kTreeSlotPrefix = 0x71;  // the binomial reductions' messages (reduce_to_root)

template <typename T>
ReduceFunction reduce_function(ReduceOp op) {
  return op == ReduceOp::kSum ? static_cast<ReduceFunction>(&gloo::sum<T>) : static_cast<ReduceFunction>(&gloo::max<T>);
}

ReduceFunction reduce_function(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kBFloat16:  // widened to FP32 before reducing
    case DType::kFloat16: return reduce_function<float>(op);
    case DType::kInt32: return reduce_function<int32_t>(op);
    case DType::kInt64: return reduce_function<int64_t>(op);
  }
  return nullptr;
}

std::chrono::milliseconds as_milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// A tensor as host bytes the operation works on: the tensor itself when it is a host tensor of the
// type Gloo reduces, else a copy (FP32 for a widened BF16 or FP16 tensor) that wait() copies back.
struct Staged {
  Tensor tensor;
  std::vector<char> copy;
  void* data = nullptr;
  size_t bytes = 0;
  bool widened = false;
  bool copy_out = false;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

std::unique_ptr<Staged> stage(Context& ctx, const Tensor& t, bool widen_float16, bool copy_in, bool copy_out) {
  auto s = std::make_unique<Staged>();
  s->tensor = t;
  s->widened = widen_float16 && is_float16_dtype(t.dtype());
  s->copy_out = copy_out;
  s->bytes = s->widened ? static_cast<size_t>(t.numel()) * sizeof(float) : t.bytes();
  if (t.device() == Device::kCpu && !s->widened) {
    s->data = t.data();
    s->copy_out = false;
    return s;
  }
  s->copy.resize(s->bytes);
  s->data = s->copy.data();
  if (!copy_in) return s;
  std::vector<char> landing;
  const void* bits = t.data();
  if (t.device() != Device::kCpu) {
    landing.resize(t.bytes());
    copy_to_host(ctx, s->widened ? landing.data() : s->data, t);
    ctx.synchronize();  // Gloo reads host memory: this stream's copy must have landed
    bits = landing.data();
  }
  if (s->widened) {
    const auto* from = static_cast<const uint16_t*>(bits);
    const bool half = t.dtype() == DType::kFloat16;
    for (int64_t i = 0; i < t.numel(); ++i) {
      s->as<float>()[i] = half ? fp16_bits_to_float(from[i]) : bf16_bits_to_float(from[i]);
    }
  }
  return s;
}

void copy_back(Context& ctx, const Staged& s) {
  if (!s.copy_out) return;
  const Tensor& t = s.tensor;
  std::vector<uint16_t> narrowed;
  const void* bits = s.data;
  if (s.widened) {
    narrowed.resize(static_cast<size_t>(t.numel()));
    const bool half = t.dtype() == DType::kFloat16;
    for (int64_t i = 0; i < t.numel(); ++i) {
      narrowed[i] = half ? float_to_fp16_bits(s.as<float>()[i]) : float_to_bf16_bits(s.as<float>()[i]);
    }
    bits = narrowed.data();
  }
  if (t.device() == Device::kCpu) {
    std::memcpy(t.data(), bits, t.bytes());
  } else {
    copy_to_device(ctx, t, bits);
    ctx.synchronize();  // `bits` is freed on return
  }
}

}  // namespace

// One collective for the worker, and its outcome for the waiting rank.
class GlooCommunicator::Job {
 public:
  explicit Job(std::function<void(uint32_t)> run) : run_(std::move(run)) {}

  void run(uint32_t tag) {
    std::string error;
    try {
      run_(tag);
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "Gloo error";
    }
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    finished_.notify_all();
  }

  // Waits until the job ran or `deadline`; the error text ("" when it succeeded), or nullopt at the
  // deadline.
  std::optional<std::string> wait_until(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!finished_.wait_until(lock, deadline, [&] { return done_; })) return std::nullopt;
    return error_;
  }

 private:
  std::function<void(uint32_t)> run_;
  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::string error_;
};

// A queued collective: its job and the host copies it works on (its own until wait()).
class GlooCommunicator::Pending final : public PendingCollective {
 public:
  Pending(GlooCommunicator& comm, std::string operation, std::vector<std::unique_ptr<Staged>> staged)
      : comm_(comm), operation_(std::move(operation)), staged_(std::move(staged)) {}
  ~Pending() override {
    // A job still queued would write into the copies: only a fatal path leaves one unwaited.
    if (job_) job_->wait_until(Clock::time_point::max());
  }

  void set_job(std::shared_ptr<Job> job) { job_ = std::move(job); }
  const std::vector<std::unique_ptr<Staged>>& staged() const { return staged_; }

  void wait(Context& ctx) override {
    // Gloo bounds the operation itself; the margin covers queued work ahead of it.
    const double patience = comm_.timeout_seconds_ + 5.0;
    const std::optional<std::string> error =
        job_->wait_until(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(patience)));
    if (!error) comm_.fail(operation_, "the operation did not complete");
    if (!error->empty()) comm_.fail(operation_, *error);
    job_.reset();
    for (const auto& s : staged_) copy_back(ctx, *s);
  }

  std::string describe() const override { return operation_ + " on group '" + comm_.name_ + "' (Gloo)"; }

 private:
  GlooCommunicator& comm_;
  std::string operation_;
  std::vector<std::unique_ptr<Staged>> staged_;
  std::shared_ptr<Job> job_;
};

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context, std::string name, double timeout_seconds,
                                   std::vector<int> world_ranks)
    : context_(std::move(context)),
      name_(std::move(name)),
      timeout_seconds_(timeout_seconds),
      rank_(context_->rank),
      size_(context_->size),
      world_ranks_(std::move(world_ranks)) {
  GPT_CHECK_EQ(static_cast<int>(world_ranks_.size()), size_) << "world ranks of group " << name_;
  context_->setTimeout(as_milliseconds(timeout_seconds_));
  worker_ = std::thread([this] { work(); });
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  worker_.join();
}

void GlooCommunicator::fail(const std::string& operation, const std::string& why) const {
  std::ostringstream members;
  for (size_t i = 0; i < world_ranks_.size(); ++i) members << (i ? "," : "") << world_ranks_[i];
  GPT_FATAL() << operation << " on group '" << name_ << "' (world ranks [" << members.str() << "]) failed on world rank "
              << world_ranks_[static_cast<size_t>(rank_)] << ": a rank of the group has ended, or did not arrive within "
              << timeout_seconds_ << " s (--distributed-timeout-minutes) (Gloo: " << why << ")";
}

std::shared_ptr<GlooCommunicator::Job> GlooCommunicator::enqueue(std::function<void(uint32_t)> run) {
  auto job = std::make_shared<Job>(std::move(run));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(job);
  }
  ready_.notify_one();
  return job;
}

void GlooCommunicator::work() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job->run(next_tag_++);
  }
}

void GlooCommunicator::reduce_to_root(void* data, size_t bytes, size_t element, ReduceFunction reduce,
                                      uint32_t tag) {
  // OpenMPI's libnbc reduces (MPI_Iallreduce in place, MPI_Ireduce_scatter_block) along this
  // binomial tree: in round r, the ranks that are multiples of 2^r add the partial sum of rank +
  // 2^(r-1), which sends it and leaves; 4 ranks give (x0 + x1) + (x2 + x3). Summing in that order
  // makes a Gloo job's sums equal an mpirun job's bit for bit (addition commutes exactly, so only
  // the grouping matters).
  const uint64_t slot = gloo::Slot::build(kTreeSlotPrefix, tag);
  std::vector<char> partial;
  auto mine = context_->createUnboundBuffer(data, bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> incoming;
  const auto timeout = as_milliseconds(timeout_seconds_);
  for (int step = 1; step < size_; step *= 2) {
    if (rank_ % (2 * step) != 0) {
      mine->send(rank_ - step, slot);
      mine->waitSend(timeout);
      return;
    }
    if (rank_ + step >= size_) continue;
    if (incoming == nullptr) {
      partial.resize(bytes);
      incoming = context_->createUnboundBuffer(partial.data(), bytes);
    }
    incoming->recv(rank_ + step, slot);
    incoming->waitRecv(timeout);
    reduce(data, data, partial.data(), bytes / element);
  }
}

void GlooCommunicator::broadcast_bytes(void* data, size_t bytes, int root, uint32_t tag) {
  gloo::BroadcastOptions opts(context_);
  opts.setOutput(static_cast<uint8_t*>(data), bytes);  // the root sends its output buffer
  opts.setRoot(root);
  opts.setTag(tag);
  opts.setTimeout(as_milliseconds(timeout_seconds_));
  gloo::broadcast(opts);
}

CollectiveHandle GlooCommunicator::start_all_reduce(Context& ctx, const Tensor& data, ReduceOp op) {
  if (data.numel() == 0 || size_ == 1) return {};
  std::vector<std::unique_ptr<Staged>> staged;
  staged.push_back(stage(ctx, data, /*widen_float16=*/true, /*copy_in=*/true, /*copy_out=*/true));
  const Staged& s = *staged[0];
  const size_t count = static_cast<size_t>(data.numel());
  const ReduceFunction reduce = reduce_function(data.dtype(), op);
  const size_t element = s.bytes / count;
  auto pending = std::make_unique<Pending>(*this, "all_reduce", std::move(staged));
  pending->set_job(enqueue([this, &s, count, reduce, element](uint32_t tag) {
    reduce_to_root(s.data, count * element, element, reduce, tag);
    broadcast_bytes(s.data, count * element, 0, tag);
  }));
  return CollectiveHandle(std::move(pending));
}

CollectiveHandle GlooCommunicator::start_reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input,
                                                        ReduceOp op) {
  GPT_CHECK(input.numel() == output.numel() * size_ && input.dtype() == output.dtype())
      << "reduce_scatter " << input.to_string() << " -> " << output.to_string() << " on " << name_;
  if (output.numel() == 0) return {};
  // As OpenMPI's libnbc does it: the whole input reduced to rank 0 along the binomial tree, then
  // each rank's block (here: the whole sum, broadcast; a copy of the input is reduced, so the input
  // stays unchanged as MPI's leaves it).
  std::vector<std::unique_ptr<Staged>> staged;
  staged.push_back(stage(ctx, input, true, /*copy_in=*/true, /*copy_out=*/false));
  staged.push_back(stage(ctx, output, true, /*copy_in=*/false, /*copy_out=*/true));
  if (staged[0]->copy.empty()) {  // the input was used in place: reduce a copy instead
    staged[0]->copy.assign(static_cast<const char*>(staged[0]->data),
                           static_cast<const char*>(staged[0]->data) + staged[0]->bytes);
    staged[0]->data = staged[0]->copy.data();
  }
  const Staged& in = *staged[0];
  const Staged& out = *staged[1];
  const size_t count = static_cast<size_t>(input.numel());
  const ReduceFunction reduce = reduce_function(input.dtype(), op);
  const size_t element = in.bytes / count;
  auto pending = std::make_unique<Pending>(*this, "reduce_scatter", std::move(staged));
  pending->set_job(enqueue([this, &in, &out, count, reduce, element](uint32_t tag) {
    reduce_to_root(in.data, count * element, element, reduce, tag);
    broadcast_bytes(in.data, count * element, 0, tag);
    std::memcpy(out.data, in.as<char>() + static_cast<size_t>(rank_) * out.bytes, out.bytes);
  }));
  return CollectiveHandle(std::move(pending));
}

CollectiveHandle GlooCommunicator::start_all_gather(Context& ctx, const Tensor& output, const Tensor& input) {
  GPT_CHECK(output.numel() == input.numel() * size_ && input.dtype() == output.dtype())
      << "all_gather " << input.to_string() << " -> " << output.to_string() << " on " << name_;
  if (input.numel() == 0) return {};
  std::vector<std::unique_ptr<Staged>> staged;
  staged.push_back(stage(ctx, input, false, /*copy_in=*/true, /*copy_out=*/false));
  staged.push_back(stage(ctx, output, false, /*copy_in=*/false, /*copy_out=*/true));
  const Staged& in = *staged[0];
  const Staged& out = *staged[1];
  auto pending = std::make_unique<Pending>(*this, "all_gather", std::move(staged));
  pending->set_job(enqueue([this, &in, &out](uint32_t tag) {
    gloo::AllgatherOptions opts(context_);  // bytes: gathering needs no type
    opts.setInput(in.as<uint8_t>(), in.bytes);
    opts.setOutput(out.as<uint8_t>(), out.bytes);
    opts.setTag(tag);
    opts.setTimeout(as_milliseconds(timeout_seconds_));
    gloo::allgather(opts);
  }));
  return CollectiveHandle(std::move(pending));
}

CollectiveHandle GlooCommunicator::start_broadcast(Context& ctx, const Tensor& data, int root) {
  GPT_CHECK(root >= 0 && root < size_) << "broadcast root " << root << " on " << name_;
  if (data.numel() == 0 || size_ == 1) return {};
  const bool is_root = rank_ == root;
  std::vector<std::unique_ptr<Staged>> staged;
  staged.push_back(stage(ctx, data, false, /*copy_in=*/is_root, /*copy_out=*/!is_root));
  const Staged& s = *staged[0];
  auto pending = std::make_unique<Pending>(*this, "broadcast", std::move(staged));
  pending->set_job(enqueue([this, &s, root](uint32_t tag) { broadcast_bytes(s.data, s.bytes, root, tag); }));
  return CollectiveHandle(std::move(pending));
}

// Sends and receives posted from the caller's thread; wait() waits for each within the timeout.
class GlooCommunicator::ExchangePending final : public PendingCollective {
 public:
  ExchangePending(GlooCommunicator& comm, std::string operation) : comm_(comm), operation_(std::move(operation)) {}

  void post(Context& ctx, const PeerTransfer& t) {
    const bool send = t.kind == PeerTransfer::Kind::kSend;
    staged_.push_back(stage(ctx, t.tensor, false, /*copy_in=*/send, /*copy_out=*/!send));
    Staged& s = *staged_.back();
    buffers_.push_back(comm_.context_->createUnboundBuffer(s.data, s.bytes));
    sends_.push_back(send);
    const uint64_t slot = gloo::Slot::build(kExchangeSlotPrefix, 0);
    if (send) {
      buffers_.back()->send(t.peer, slot);
    } else {
      buffers_.back()->recv(t.peer, slot);
    }
  }

  void wait(Context& ctx) override {
    const auto timeout = as_milliseconds(comm_.timeout_seconds_);
    for (size_t i = 0; i < buffers_.size(); ++i) {
      bool done = false;
      try {
        done = sends_[i] ? buffers_[i]->waitSend(timeout) : buffers_[i]->waitRecv(timeout);
      } catch (const std::exception& e) {
        comm_.fail(operation_, e.what());
      }
      if (!done) comm_.fail(operation_, "aborted");
    }
    for (const auto& s : staged_) copy_back(ctx, *s);
    buffers_.clear();
  }

  std::string describe() const override { return operation_ + " on group '" + comm_.name_ + "' (Gloo)"; }

 private:
  GlooCommunicator& comm_;
  std::string operation_;
  std::vector<std::unique_ptr<Staged>> staged_;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers_;
  std::vector<bool> sends_;
};

CollectiveHandle GlooCommunicator::start_exchange(Context& ctx, std::span<const PeerTransfer> transfers) {
  if (transfers.empty()) return {};
  std::ostringstream operation;
  operation << "send/receive with world rank";
  for (size_t i = 0; i < transfers.size(); ++i) {
    const int peer = transfers[i].peer;
    operation << (i ? ", " : " ") << (peer >= 0 && peer < size_ ? world_ranks_[static_cast<size_t>(peer)] : peer)
              << (transfers[i].kind == PeerTransfer::Kind::kSend ? " (send)" : " (receive)");
  }
  auto pending = std::make_unique<ExchangePending>(*this, operation.str());
  for (const PeerTransfer& t : transfers) {
    GPT_CHECK(t.peer >= 0 && t.peer < size_ && t.peer != rank_) << "peer " << t.peer << " in group " << name_;
    // Pieces between one pair of ranks on one slot arrive in the order posted.
    if (t.tensor.numel() > 0) pending->post(ctx, t);
  }
  return CollectiveHandle(std::move(pending));
}

void GlooCommunicator::barrier(Context& ctx) {
  if (size_ == 1) return;
  auto pending = std::make_unique<Pending>(*this, "barrier", std::vector<std::unique_ptr<Staged>>());
  pending->set_job(enqueue([this](uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(as_milliseconds(timeout_seconds_));
    gloo::barrier(opts);
  }));
  CollectiveHandle(std::move(pending)).wait(ctx);
}

}  // namespace gpt
