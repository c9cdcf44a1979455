// Context parallelism's block attention (ops::attention_block_forward/backward, copy_columns):
// every rank's chunks of the load-balanced split (model/layer_shapes.h: rank r holds chunks r and
// 2 CP - 1 - r), attended block by block against every rank's packed K/V as the ring visits them
// (fully masked blocks skipped), must give the whole sequence's attention_forward output and lse
// rows and, with the K/V gradients summed back to their owners, attention_backward's gradients:
// CP 2 and 3, odd and even chunk sizes, grouped-query attention, with and without dropout (its mask
// at global coordinates), FP32 and BF16. Plus RoPE's position offset and copy_columns.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"

namespace gpt {
namespace {
using namespace testing_util;

struct Case {
  int64_t cp, chunk, b, groups, q, d;
  float dropout;
};

std::string describe(const Case& c, DType dtype) {
  return "cp=" + std::to_string(c.cp) + " chunk=" + std::to_string(c.chunk) + " groups=" + std::to_string(c.groups) +
         " q=" + std::to_string(c.q) + " p=" + std::to_string(c.dropout) + " " + std::string(dtype_name(dtype));
}

// Rows [first, first + count) of a [s, ...] tensor copied into rows [at, at + count) of another.
void copy_rows(const Tensor& to, int64_t at, const Tensor& from, int64_t first, int64_t count) {
  const int64_t row_bytes = static_cast<int64_t>(from.bytes()) / from.size(0);
  std::memcpy(static_cast<char*>(to.data()) + at * row_bytes, static_cast<const char*>(from.data()) + first * row_bytes,
              static_cast<size_t>(count * row_bytes));
}

// lse [b, heads, s]: row t of every (batch, head).
double lse_at(const Tensor& lse, int64_t b, int64_t heads, int64_t s, int64_t batch, int64_t head, int64_t t) {
  return lse.data_as<float>()[(batch * heads + head) * s + t];
}

TEST(AttentionBlock, RanksChunksMatchWholeSequence) {
  const Case cases[] = {{2, 3, 2, 2, 2, 4, 0.0f}, {2, 4, 1, 1, 3, 8, 0.3f}, {3, 3, 2, 2, 1, 4, 0.2f},
                        {3, 4, 1, 2, 2, 4, 0.0f}};
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(describe(c, dtype));
      TensorFactory make(7);
      Context ctx = Context::cpu(1);
      const int64_t S = 2 * c.cp * c.chunk, s = 2 * c.chunk, heads = c.groups * c.q, width = (c.q + 2) * c.d;
      const float scale = 0.5f;
      const ops::DropoutMask mask = c.dropout > 0.0f
                                        ? ops::DropoutMask{.probability = c.dropout, .key = 99, .sample_offset = 5,
                                                           .row_offset = 2}
                                        : ops::DropoutMask{};
      // The whole sequence.
      const Tensor qkv = make.random(dtype, {S, c.b, c.groups, width});
      const Tensor dout = make.random(dtype, {S, c.b, heads, c.d});
      const Tensor out = make.poisoned(dtype, {S, c.b, heads, c.d});
      const Tensor lse = make.poisoned(DType::kFloat32, {c.b, heads, S});
      const Tensor dqkv = make.poisoned(dtype, {S, c.b, c.groups, width});
      ops::attention_forward(ctx, out, lse, qkv, scale, mask);
      ops::attention_backward(ctx, dqkv, dout, qkv, out, lse, scale, mask);

      // Each rank's chunks, and each rank's K/V block packed as the ring sends it.
      std::vector<Tensor> local_qkv, local_dout, kv, dkv;
      auto chunk_index = [&](int64_t rank, int half) { return half == 0 ? rank : 2 * c.cp - 1 - rank; };
      for (int64_t r = 0; r < c.cp; ++r) {
        local_qkv.push_back(make.poisoned(dtype, {s, c.b, c.groups, width}));
        local_dout.push_back(make.poisoned(dtype, {s, c.b, heads, c.d}));
        for (int half = 0; half < 2; ++half) {
          copy_rows(local_qkv[r], half * c.chunk, qkv, chunk_index(r, half) * c.chunk, c.chunk);
          copy_rows(local_dout[r], half * c.chunk, dout, chunk_index(r, half) * c.chunk, c.chunk);
        }
        kv.push_back(make.poisoned(dtype, {s, c.b, c.groups, 2 * c.d}));
        ops::copy_columns(ctx, kv[r], 0, local_qkv[r].view({s * c.b * c.groups, width}), width - 2 * c.d, 2 * c.d,
                          false);
        dkv.push_back(make.random(dtype, {s, c.b, c.groups, 2 * c.d}));
        ops::zero(ctx, dkv[r]);
      }
      for (int64_t r = 0; r < c.cp; ++r) {
        const Tensor local_out = make.poisoned(dtype, {s, c.b, heads, c.d});
        const Tensor local_lse = make.poisoned(DType::kFloat32, {c.b, heads, s});
        const Tensor local_dqkv = make.random(dtype, {s, c.b, c.groups, width});
        ops::zero(ctx, local_dqkv);
        std::vector<ops::AttentionBlock> blocks;
        bool started[2] = {false, false};
        for (int64_t step = 0; step < c.cp; ++step) {
          const int64_t owner = (r - step + c.cp) % c.cp;
          for (int qi = 0; qi < 2; ++qi) {
            for (int ki = 0; ki < 2; ++ki) {
              if (chunk_index(owner, ki) > chunk_index(r, qi)) continue;
              ops::AttentionBlock block{.query_row = qi * c.chunk,
                                        .query_rows = c.chunk,
                                        .query_position = chunk_index(r, qi) * c.chunk,
                                        .key_row = ki * c.chunk,
                                        .key_rows = c.chunk,
                                        .key_position = chunk_index(owner, ki) * c.chunk,
                                        .sequence = S,
                                        .accumulate = started[qi]};
              ops::attention_block_forward(ctx, local_out, local_lse, local_qkv[r], kv[owner], scale, block, mask);
              started[qi] = true;
              block.accumulate = false;
              blocks.push_back(block);
            }
          }
        }
        // Forward: the rank's rows of the whole output and lse.
        std::vector<double> want_out, want_lse(static_cast<size_t>(c.b * heads * s)), got_lse(want_lse.size());
        const Tensor expected_out = make.poisoned(dtype, {s, c.b, heads, c.d});
        for (int half = 0; half < 2; ++half) {
          copy_rows(expected_out, half * c.chunk, out, chunk_index(r, half) * c.chunk, c.chunk);
        }
        for (int64_t batch = 0; batch < c.b; ++batch) {
          for (int64_t head = 0; head < heads; ++head) {
            for (int64_t t = 0; t < s; ++t) {
              const int64_t global = chunk_index(r, t < c.chunk ? 0 : 1) * c.chunk + t % c.chunk;
              const size_t i = static_cast<size_t>((batch * heads + head) * s + t);
              want_lse[i] = lse_at(lse, c.b, heads, S, batch, head, global);
              got_lse[i] = lse_at(local_lse, c.b, heads, s, batch, head, t);
            }
          }
        }
        EXPECT_LE(relative_error(local_out, values(expected_out)), 3 * tolerance(dtype)) << "rank " << r << " output";
        EXPECT_LE(relative_error(got_lse, want_lse), 1e-5) << "rank " << r << " lse";
        // Backward from the merged output: queries here, keys and values to their owners' dkv.
        for (const ops::AttentionBlock& block : blocks) {
          const int64_t owner = [&] {
            for (int64_t o = 0; o < c.cp; ++o) {
              for (int ki = 0; ki < 2; ++ki) {
                if (chunk_index(o, ki) * c.chunk == block.key_position && ki * c.chunk == block.key_row) return o;
              }
            }
            return int64_t{-1};
          }();
          ASSERT_GE(owner, 0);
          ops::attention_block_backward(ctx, local_dqkv, dkv[owner], local_dout[r], local_qkv[r], kv[owner], local_out,
                                        local_lse, scale, block, mask);
        }
        const Tensor expected_dq = make.poisoned(dtype, {s, c.b, c.groups, width});
        for (int half = 0; half < 2; ++half) {
          copy_rows(expected_dq, half * c.chunk, dqkv, chunk_index(r, half) * c.chunk, c.chunk);
        }
        // The query parts now (the K/V parts get their owners' sums below).
        const Tensor got_q = make.poisoned(dtype, {s * c.b * c.groups, c.q * c.d});
        const Tensor want_q = make.poisoned(dtype, {s * c.b * c.groups, c.q * c.d});
        ops::copy_columns(ctx, got_q, 0, local_dqkv.view({s * c.b * c.groups, width}), 0, c.q * c.d, false);
        ops::copy_columns(ctx, want_q, 0, expected_dq.view({s * c.b * c.groups, width}), 0, c.q * c.d, false);
        EXPECT_LE(relative_error(got_q, values(want_q)), 3 * tolerance(dtype)) << "rank " << r << " dq";
      }
      // Every rank's key and value gradients, summed over all ranks' queries.
      for (int64_t r = 0; r < c.cp; ++r) {
        const Tensor expected_dq = make.poisoned(dtype, {s, c.b, c.groups, width});
        for (int half = 0; half < 2; ++half) {
          copy_rows(expected_dq, half * c.chunk, dqkv, chunk_index(r, half) * c.chunk, c.chunk);
        }
        const Tensor want_kv = make.poisoned(dtype, {s, c.b, c.groups, 2 * c.d});
        ops::copy_columns(ctx, want_kv, 0, expected_dq.view({s * c.b * c.groups, width}), width - 2 * c.d, 2 * c.d,
                          false);
        EXPECT_LE(relative_error(dkv[r], values(want_kv)), 3 * tolerance(dtype)) << "rank " << r << " dk, dv";
      }
    }
  }
}

TEST(AttentionBlock, CopyColumnsCopiesAndAccumulates) {
  TensorFactory make(3);
  Context ctx = Context::cpu(1);
  const Tensor in = make.random(DType::kFloat32, {4, 6});
  const Tensor out = make.random(DType::kFloat32, {4, 5});
  const std::vector<double> before = values(out);
  ops::copy_columns(ctx, out, 1, in, 3, 2, false);
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t j = 0; j < 5; ++j) {
      const double want = (j == 1 || j == 2) ? at(in, r * 6 + 3 + j - 1) : before[r * 5 + j];
      EXPECT_EQ(at(out, r * 5 + j), want) << r << "," << j;
    }
  }
  ops::copy_columns(ctx, out, 1, in, 3, 2, true);
  EXPECT_FLOAT_EQ(static_cast<float>(at(out, 2 * 5 + 1)), static_cast<float>(2 * at(in, 2 * 6 + 3)));
}

TEST(AttentionBlock, RopeAtAnOffsetIsTheWholeSequenceRows) {
  // Context parallelism rotates each chunk at its global positions.
  TensorFactory make(4);
  Context ctx = Context::cpu(1);
  const int64_t S = 12, b = 2, groups = 2, q = 2, d = 8, width = (q + 2) * d;
  const Tensor whole = make.random(DType::kFloat32, {S, b, groups, width});
  const Tensor piece = make.poisoned(DType::kFloat32, {4, b, groups, width});
  copy_rows(piece, 0, whole, 6, 4);
  ops::rope_forward(ctx, whole, d, d, 10000.0f, 0, false);
  ops::rope_forward(ctx, piece, d, d, 10000.0f, 6, false);
  const Tensor expected = make.poisoned(DType::kFloat32, {4, b, groups, width});
  copy_rows(expected, 0, whole, 6, 4);
  EXPECT_LE(relative_error(piece, values(expected)), 1e-7);
  ops::rope_backward(ctx, piece, d, d, 10000.0f, 6, false);
  ops::rope_backward(ctx, whole, d, d, 10000.0f, 0, false);
  copy_rows(expected, 0, whole, 6, 4);
  EXPECT_LE(relative_error(piece, values(expected)), 1e-7);
}

}  // namespace
}  // namespace gpt
