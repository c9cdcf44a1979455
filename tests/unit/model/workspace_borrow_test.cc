// Borrow (model/workspace_borrow.h) with its check compiled in (GPT_CHECK_BORROWS, as in debug
// builds): holds of disjoint bytes coexist, a hold of bytes another holder still has stops the
// process naming both, and a hold ends with its scope in any order.
#include "model/workspace_borrow.h"

#include <memory>
#include <vector>

#include <gtest/gtest.h>

namespace gpt {
namespace {

// A [rows, 4] float32 buffer on the host, as a chunk's workspace buffer.
Tensor host_buffer(std::vector<float>& storage, int64_t rows) {
  storage.assign(static_cast<size_t>(rows * 4), 0.0f);
  return Tensor(storage.data(), DType::kFloat32, Shape{rows, 4}, Device::kCpu);
}

TEST(WorkspaceBorrow, DisjointHoldsCoexistAndEndInAnyOrder) {
  std::vector<float> storage;
  const Tensor buffer = host_buffer(storage, 8);
  auto first = std::make_unique<Borrow>(buffer.slice(0, 4), "first half");
  {
    Borrow second(buffer.slice(4, 8), "second half");
    EXPECT_EQ(second->data(), buffer.slice(4, 8).data());
    first.reset();  // the older hold ends while the newer one is still held
  }
  Borrow whole(buffer, "whole buffer");  // both ended: the bytes are free again
  EXPECT_EQ(whole->bytes(), buffer.bytes());
}

TEST(WorkspaceBorrowDeathTest, OverlappingHoldStopsNamingBothHolders) {
  std::vector<float> storage;
  const Tensor buffer = host_buffer(storage, 8);
  EXPECT_DEATH(
      {
        Borrow residual(buffer, "d_residual");
        Borrow view(buffer.slice(2, 3), "dropout gradient");  // a view inside the held buffer
      },
      "dropout gradient borrows workspace bytes that d_residual still holds");
}

}  // namespace
}  // namespace gpt
