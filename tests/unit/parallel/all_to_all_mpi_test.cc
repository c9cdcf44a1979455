// The variable-size all-to-all (parallel/comm/all_to_all.h) over the MPI communicator (mpirun -np 4)
// and the Gloo communicator (torchrun, the same file with torchrun_test_main.cc), on the world of 4
// and on both kinds of pair of a TP 2 x DP 2 grid. Every rank draws the whole matrix of row counts
// (sender x receiver; zeros included, whole rows and columns of zeros too) from a seed all ranks
// share, so each one knows independently what every peer must send it: the exchanged counts must
// equal the matrix's column, and every received element must equal the value its sender computed
// for it (small integers, exact in FP32 and BF16, distinct per sender, receiver, row and column).
// With GPT_TEST_DEVICE=cuda (tests/gpu/mpi_all_to_all_cuda_test.py) the same exchanges run on device
// buffers, every rank sharing the one GPU: MPI stages the row blocks, the own block and the counts
// are copied on the GPU.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/float16.h"
#include "core/memory.h"
#include "gtest/gtest.h"
#include "parallel/comm/all_to_all.h"
#include "test_grid.h"

namespace gpt {
namespace {

ProcessGrid& grid() {
  static std::unique_ptr<ProcessGrid> instance = build_test_grid(GridShape{2, 1, 2}, /*timeout_seconds=*/120.0);
  return *instance;
}

bool on_gpu() {
  static const bool gpu = [] {
    const char* device = std::getenv("GPT_TEST_DEVICE");
    return device != nullptr && std::string(device) == "cuda";
  }();
  return gpu;
}

Context& ctx() {
  static Context context = on_gpu() ? Context::gpu(0) : Context::cpu(1);
  return context;
}

// `host` as a [rows, width] tensor: itself on the CPU, a copy in `device` on the GPU.
template <typename T>
Tensor place(std::vector<T>& host, Buffer& device, int64_t width) {
  const Shape shape({static_cast<int64_t>(host.size()) / width, width});
  if (!on_gpu()) return Tensor(host.data(), dtype_of<T>(), shape, Device::kCpu);
  device = Buffer(Device::kCuda, host.size() * sizeof(T));
  const Tensor tensor = device.as_tensor(dtype_of<T>(), shape);
  copy_bytes(Device::kCuda, tensor.data(), Device::kCpu, host.data(), tensor.bytes());
  return tensor;
}

std::vector<Communicator*> groups() { return {&grid().world(), &grid().tensor(), &grid().data()}; }

// rows[s][d]: rows group rank s sends group rank d, the same on every rank for one seed. Every
// third draw is zero; `pattern` 1 empties rank 1's sends, 2 empties everything.
using CountMatrix = std::vector<std::vector<int64_t>>;
CountMatrix draw_counts(int size, uint64_t seed, int pattern) {
  std::mt19937_64 random(seed);
  CountMatrix rows(static_cast<size_t>(size), std::vector<int64_t>(static_cast<size_t>(size)));
  for (auto& from : rows) {
    for (int64_t& n : from) n = random() % 3 == 0 ? 0 : static_cast<int64_t>(1 + random() % 6);
  }
  if (pattern == 1) rows[1 % size].assign(static_cast<size_t>(size), 0);
  if (pattern == 2) {
    for (auto& from : rows) from.assign(static_cast<size_t>(size), 0);
  }
  return rows;
}

// Element (row j, column c) of the block group rank s sends group rank d: in [-128, 127].
float value(int s, int d, int64_t j, int64_t c) {
  return static_cast<float>(s * 64 + d * 16 + (j * 5 + c * 3) % 16 - 128);
}

template <typename T>
T from_float(float v) {
  return T(v);
}

// One all-to-all in flight on `comm`: its buffers and what must arrive.
template <typename T>
struct Exchange {
  Communicator* comm;
  CountMatrix rows;
  int64_t width;
  std::vector<T> sent, received;
  Buffer send_device, receive_device;  // on the GPU only
  Tensor receive;
  CollectiveHandle handle;

  Exchange(Communicator& c, uint64_t seed, int pattern, int64_t w) : comm(&c), width(w) {
    const int size = c.size(), me = c.rank();
    rows = draw_counts(size, seed, pattern);
    std::vector<int64_t> send_rows = rows[static_cast<size_t>(me)];
    // Each rank learns its column from the peers, and checks it against the matrix.
    const std::vector<int64_t> receive_rows = exchange_counts(c, ctx(), send_rows);
    for (int s = 0; s < size; ++s) {
      EXPECT_EQ(receive_rows[static_cast<size_t>(s)], rows[static_cast<size_t>(s)][static_cast<size_t>(me)])
          << c.name() << ": rows from group rank " << s;
    }
    for (int d = 0; d < size; ++d) {
      for (int64_t j = 0; j < rows[static_cast<size_t>(me)][static_cast<size_t>(d)]; ++j) {
        for (int64_t col = 0; col < width; ++col) sent.push_back(from_float<T>(value(me, d, j, col)));
      }
    }
    int64_t total = 0;
    for (int64_t n : receive_rows) total += n;
    received.assign(static_cast<size_t>(total * width), from_float<T>(1e30f));  // never a value()
    const Tensor send = place(sent, send_device, width);
    receive = place(received, receive_device, width);
    handle = start_all_to_all_rows(c, ctx(), send, send_rows, receive, receive_rows);
  }

  // Waits, then checks every received element against its sender's value().
  void check() {
    handle.wait(ctx());
    if (on_gpu()) {
      ctx().synchronize();
      copy_bytes(Device::kCpu, received.data(), Device::kCuda, receive.data(), receive.bytes());
    }
    const int size = comm->size(), me = comm->rank();
    size_t at = 0;
    for (int s = 0; s < size; ++s) {
      for (int64_t j = 0; j < rows[static_cast<size_t>(s)][static_cast<size_t>(me)]; ++j) {
        for (int64_t col = 0; col < width; ++col, ++at) {
          ASSERT_EQ(static_cast<float>(received[at]), value(s, me, j, col))
              << comm->name() << " rank " << me << ": from rank " << s << ", row " << j << ", column " << col;
        }
      }
    }
    EXPECT_EQ(at, received.size());
  }
};

template <typename T>
void exchange_everywhere(uint64_t seed_base) {
  for (Communicator* comm : groups()) {
    for (int pattern = 0; pattern < 3; ++pattern) {
      for (int64_t width : {1, 5, 33}) {
        for (uint64_t round = 0; round < (pattern == 0 ? 4u : 1u); ++round) {
          Exchange<T> exchange(*comm, seed_base + round * 131 + static_cast<uint64_t>(width) * 7 + pattern, pattern,
                               width);
          exchange.check();
        }
      }
    }
  }
}

TEST(AllToAllRows, Float32EveryRowFromEveryPeer) { exchange_everywhere<float>(1000); }

TEST(AllToAllRows, BFloat16EveryRowFromEveryPeer) { exchange_everywhere<bf16>(2000); }

// Both pairs' exchanges and the world's in flight together (every rank starts them in the same
// order), waited on in reverse: the blocks of different groups do not mix.
TEST(AllToAllRows, SeveralGroupsInFlightTogether) {
  std::vector<std::unique_ptr<Exchange<float>>> exchanges;
  uint64_t seed = 3000;
  for (Communicator* comm : groups()) exchanges.push_back(std::make_unique<Exchange<float>>(*comm, ++seed, 0, 9));
  for (auto e = exchanges.rbegin(); e != exchanges.rend(); ++e) (*e)->check();
}

}  // namespace
}  // namespace gpt
