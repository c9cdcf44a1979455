// RoPE (the half-split pairs, and Megatron's --rotary-interleaved pairs (x_2j, x_2j+1), at a
// position offset as context parallelism's chunks use) and the exact erf GeLU
// (--no-bias-gelu-fusion / --disable-bias-linear without --swiglu), GPU against the CPU reference
// in FP32, BF16 and FP16 (the fixture: gpu/ops_twin.h).
#include <cstring>
#include <vector>

#include "gpu/ops_twin.h"

namespace gpt {
namespace {

using gpu_test::kTypes;
using gpu_test::OpsTest;
using gpu_test::Twin;

TEST_F(OpsTest, RopeForwardBackwardPackingsAndWidths) {
  struct Case {
    int64_t s, b, groups, q, d, rotary_dim, offset;
  };
  for (DType t : kTypes) {
    for (const Case& c : {Case{1, 1, 1, 1, 8, 8, 0}, Case{37, 2, 3, 1, 64, 64, 0}, Case{33, 2, 2, 4, 128, 128, 0},
                          Case{17, 3, 2, 3, 64, 32, 0}, Case{13, 2, 2, 1, 12, 6, 0}, Case{9, 2, 2, 2, 64, 64, 1},
                          Case{4096, 2, 2, 2, 64, 64, 0}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " s=" << c.s << " b=" << c.b << " groups=" << c.groups
                                        << " q=" << c.q << " d=" << c.d << " rotary_dim=" << c.rotary_dim
                                        << " offset=" << c.offset);
      const Shape shape{c.s, c.b, c.groups, (c.q + 2) * c.d};
      Twin storage = make(t, {shape.numel() + c.offset});
      Twin qkv = part(storage, c.offset, shape);
      ops::rope_forward(cpu_, qkv.cpu, c.d, c.rotary_dim, 10000.0f, 0, false);
      ops::rope_forward(*gpu_, qkv.gpu, c.d, c.rotary_dim, 10000.0f, 0, false);
      EXPECT_LE(error(qkv), tolerance(t));
      ops::rope_backward(cpu_, qkv.cpu, c.d, c.rotary_dim, 10000.0f, 0, false);
      ops::rope_backward(*gpu_, qkv.gpu, c.d, c.rotary_dim, 10000.0f, 0, false);
      EXPECT_LE(error(qkv), tolerance(t));
      // Elements RoPE does not rotate keep their bits on the GPU.
      const std::vector<uint8_t> back = download(qkv.gpu);
      const int64_t width = (c.q + 2) * c.d, element = static_cast<int64_t>(dtype_size(t));
      for (int64_t i = 0; i < shape.numel(); ++i) {
        const int64_t column = i % width;
        if (column >= (c.q + 1) * c.d || column % c.d >= c.rotary_dim) {
          ASSERT_EQ(std::memcmp(back.data() + i * element, static_cast<const uint8_t*>(qkv.cpu.data()) + i * element,
                                element),
                    0)
              << i;
        }
      }
    }
  }
}

// The interleaved pairs (Megatron's --rotary-interleaved) over the same packings and widths, some at
// a position offset.
TEST_F(OpsTest, RopeInterleavedForwardBackwardPackingsAndWidths) {
  struct Case {
    int64_t s, b, groups, q, d, rotary_dim, offset, position;
  };
  for (DType t : kTypes) {
    for (const Case& c : {Case{1, 1, 1, 1, 8, 8, 0, 0}, Case{37, 2, 3, 1, 64, 64, 0, 0},
                          Case{33, 2, 2, 4, 128, 128, 0, 500}, Case{17, 3, 2, 3, 64, 32, 0, 0},
                          Case{13, 2, 2, 1, 12, 6, 0, 7}, Case{9, 2, 2, 2, 64, 64, 1, 0}, Case{4096, 2, 2, 2, 64, 64, 0, 0}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " s=" << c.s << " b=" << c.b << " groups=" << c.groups
                                        << " q=" << c.q << " d=" << c.d << " rotary_dim=" << c.rotary_dim
                                        << " offset=" << c.offset << " position=" << c.position);
      const Shape shape{c.s, c.b, c.groups, (c.q + 2) * c.d};
      Twin storage = make(t, {shape.numel() + c.offset});
      Twin qkv = part(storage, c.offset, shape);
      ops::rope_forward(cpu_, qkv.cpu, c.d, c.rotary_dim, 10000.0f, c.position, true);
      ops::rope_forward(*gpu_, qkv.gpu, c.d, c.rotary_dim, 10000.0f, c.position, true);
      EXPECT_LE(error(qkv), tolerance(t));
      ops::rope_backward(cpu_, qkv.cpu, c.d, c.rotary_dim, 10000.0f, c.position, true);
      ops::rope_backward(*gpu_, qkv.gpu, c.d, c.rotary_dim, 10000.0f, c.position, true);
      EXPECT_LE(error(qkv), tolerance(t));
      // Elements RoPE does not rotate keep their bits on the GPU.
      const std::vector<uint8_t> back = download(qkv.gpu);
      const int64_t width = (c.q + 2) * c.d, element = static_cast<int64_t>(dtype_size(t));
      for (int64_t i = 0; i < shape.numel(); ++i) {
        const int64_t column = i % width;
        if (column >= (c.q + 1) * c.d || column % c.d >= c.rotary_dim) {
          ASSERT_EQ(std::memcmp(back.data() + i * element, static_cast<const uint8_t*>(qkv.cpu.data()) + i * element,
                                element),
                    0)
              << i;
        }
      }
    }
  }
}

// Llama 3.1's frequency scaling (--use-rope-scaling): the GPU rotates by the frequencies the CPU
// uses (rope_inverse_frequencies, computed on the host for both), at a context-parallel offset.
TEST_F(OpsTest, RopeWithLlama31ScalingMatchesTheCpu) {
  RopeScaling scaling;
  scaling.enabled = true;
  const RopeFrequencies frequencies(500000.0f, scaling);
  for (DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    Twin qkv = make(t, Shape{300, 2, 2, 4 * 128});
    ops::rope_forward(cpu_, qkv.cpu, 128, 128, frequencies, 7, false);
    ops::rope_forward(*gpu_, qkv.gpu, 128, 128, frequencies, 7, false);
    EXPECT_LE(error(qkv), tolerance(t));
    ops::rope_backward(cpu_, qkv.cpu, 128, 128, frequencies, 7, false);
    ops::rope_backward(*gpu_, qkv.gpu, 128, 128, frequencies, 7, false);
    EXPECT_LE(error(qkv), tolerance(t));
  }
}

// The exact GeLU x Phi(x) and its gradient, forward in place and out of place, backward in place,
// on sizes around the vector width and a misaligned view.
TEST_F(OpsTest, ExactGeluForwardAndBackward) {
  for (DType t : kTypes) {
    for (int64_t n : {1, 7, 1003, 65536 + 5}) {
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n=" << n << " offset=" << offset);
        Twin x_storage = make(t, {n + offset}, 2.0f), d_storage = make(t, {n + offset});
        Twin x = part(x_storage, offset, {n}), d = part(d_storage, offset, {n});
        Twin y = output(t, {n});
        ops::gelu_exact_forward(cpu_, y.cpu, x.cpu);
        ops::gelu_exact_forward(*gpu_, y.gpu, x.gpu);
        EXPECT_LE(error(y), tolerance(t));
        ops::gelu_exact_backward(cpu_, d.cpu, d.cpu, x.cpu);
        ops::gelu_exact_backward(*gpu_, d.gpu, d.gpu, x.gpu);
        EXPECT_LE(error(d), tolerance(t));
        ops::gelu_exact_forward(cpu_, x.cpu, x.cpu);
        ops::gelu_exact_forward(*gpu_, x.gpu, x.gpu);
        EXPECT_LE(error(x), tolerance(t)) << "in place";
      }
    }
  }
}

}  // namespace
}  // namespace gpt
