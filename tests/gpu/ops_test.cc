// Every CUDA op against the CPU reference on the same random inputs: outputs are poisoned (NaN)
// before each run so unwritten elements show, shapes include odd sizes and sizes that are not a
// multiple of the vector width. Error metric: ||gpu - cpu|| / ||cpu||.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/arena.h"
#include "core/memory.h"
#include "gpu/gpu_test_util.h"
#include "gpu/ops_twin.h"
#include "kernels/ops.h"

namespace gpt {
namespace {

using gpu_test::kTypes;
using gpu_test::OpsTest;
using gpu_test::Twin;

TEST_F(OpsTest, MatmulAllTransposesBiasGeluAndAccumulation) {
  for (DType t : kTypes) {
    for (auto [m, n, k] : {std::tuple{1, 1, 1}, std::tuple{17, 33, 65}, std::tuple{128, 96, 200}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          Twin a = make(t, ta ? Shape({k, m}) : Shape({m, k}));
          Twin b = make(t, tb ? Shape({n, k}) : Shape({k, n}));
          Twin bias = make(t, {n});
          Twin out = output(t, {m, n}), pre = output(t, {m, n});
          ops::matmul(cpu_, out.cpu, a.cpu, b.cpu, {.transpose_a = ta, .transpose_b = tb, .bias = bias.cpu, .pre_gelu = pre.cpu});
          ops::matmul(*gpu_, out.gpu, a.gpu, b.gpu, {.transpose_a = ta, .transpose_b = tb, .bias = bias.gpu, .pre_gelu = pre.gpu});
          // cuBLASLt's GeLU epilogue evaluates tanh with its own approximation: on an H100 an FP32
          // single-element output differed by 2.2e-5 relative (pre-GeLU values agree to 1e-7).
          const double gelu_tolerance = t == DType::kFloat32 ? 1e-4 : 2 * tolerance(t);
          EXPECT_LE(error(out), gelu_tolerance) << "gelu m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb;
          EXPECT_LE(error(pre), 2 * tolerance(t));
          // Weight-gradient style: FP32 output accumulated (beta 1) from the operands' dtype.
          Twin acc = make(DType::kFloat32, {m, n});
          ops::matmul(cpu_, acc.cpu, a.cpu, b.cpu, {.transpose_a = ta, .transpose_b = tb, .beta = 1.0f});
          ops::matmul(*gpu_, acc.gpu, a.gpu, b.gpu, {.transpose_a = ta, .transpose_b = tb, .beta = 1.0f});
          EXPECT_LE(error(acc), 1e-5) << "accumulate";
        }
      }
    }
  }
}

TEST_F(OpsTest, LayerNormForwardResidualBackwardAndBiasGrad) {
  for (DType t : kTypes) {
    for (auto [rows, h] : {std::pair{1, 7}, std::pair{37, 129}, std::pair{64, 1024}}) {
      Twin x = make(t, {rows, h}, 2.0f, 0.5f), delta = make(t, {rows, h}), delta_bias = make(t, {h});
      Twin w = make(t, {h}, 0.2f, 1.0f), b = make(t, {h});
      Twin y = output(t, {rows, h}), residual = output(t, {rows, h});
      Twin mean = output(DType::kFloat32, {rows}), rstd = output(DType::kFloat32, {rows});
      for (Context* c : {&cpu_, gpu_.get()}) {
        const bool on_gpu = c != &cpu_;
        auto pick = [&](const Twin& v) { return on_gpu ? v.gpu : v.cpu; };
        ops::residual_layernorm_forward(*c, pick(residual), pick(y), pick(mean), pick(rstd), pick(x), pick(delta),
                                        pick(delta_bias), pick(w), pick(b), 1e-5f, 0.0f);
      }
      EXPECT_LE(error(y), tolerance(t));
      EXPECT_LE(error(residual), tolerance(t));
      EXPECT_LE(error(rstd), 1e-5);
      Twin dy = make(t, {rows, h}), dx = make(t, {rows, h});
      Twin dw = make(DType::kFloat32, {h}), db = make(DType::kFloat32, {h});
      ops::layernorm_backward(cpu_, dx.cpu, dw.cpu, db.cpu, dy.cpu, residual.cpu, mean.cpu, rstd.cpu, w.cpu, true, 0.0f);
      ops::layernorm_backward(*gpu_, dx.gpu, dw.gpu, db.gpu, dy.gpu, residual.gpu, mean.gpu, rstd.gpu, w.gpu, true, 0.0f);
      EXPECT_LE(error(dx), tolerance(t));
      EXPECT_LE(error(dw), 1e-4);
      EXPECT_LE(error(db), 1e-4);
      Twin bias_grad = make(DType::kFloat32, {h});
      ops::bias_grad(cpu_, bias_grad.cpu, dy.cpu);
      ops::bias_grad(*gpu_, bias_grad.gpu, dy.gpu);
      EXPECT_LE(error(bias_grad), 1e-5);
    }
  }
}

TEST_F(OpsTest, ElementwiseOps) {
  for (DType t : kTypes) {
    for (int64_t n : {1, 7, 1003, 65536 + 5}) {
      const int64_t h = n % 7 == 0 ? 7 : 1;
      Twin x = make(t, {n / h, h}), d = make(t, {n / h, h}), bias = make(t, {h}), out = output(t, {n / h, h});
      ops::residual_add(cpu_, out.cpu, x.cpu, d.cpu, bias.cpu);
      ops::residual_add(*gpu_, out.gpu, x.gpu, d.gpu, bias.gpu);
      EXPECT_LE(error(out), tolerance(t));
      Twin y = output(t, {n / h, h});
      ops::gelu_forward(cpu_, y.cpu, x.cpu);
      ops::gelu_forward(*gpu_, y.gpu, x.gpu);
      EXPECT_LE(error(y), tolerance(t));
      ops::gelu_backward(cpu_, d.cpu, d.cpu, x.cpu);
      ops::gelu_backward(*gpu_, d.gpu, d.gpu, x.gpu);
      EXPECT_LE(error(d), tolerance(t));
      // Squared ReLU (--squared-relu): the same explicitly rounded float operations on both backends.
      ops::squared_relu_forward(cpu_, y.cpu, x.cpu);
      ops::squared_relu_forward(*gpu_, y.gpu, x.gpu);
      EXPECT_LE(error(y), tolerance(t));
      ops::squared_relu_backward(cpu_, d.cpu, d.cpu, x.cpu);
      ops::squared_relu_backward(*gpu_, d.gpu, d.gpu, x.gpu);
      EXPECT_LE(error(d), tolerance(t));
      Twin other = output(t == DType::kFloat32 ? DType::kBFloat16 : DType::kFloat32, {n});
      ops::cast(cpu_, other.cpu, x.cpu);
      ops::cast(*gpu_, other.gpu, x.gpu);
      EXPECT_EQ(error(other), 0.0) << "casts round identically";
    }
  }
  Twin f = make(DType::kFloat32, {100003});
  Twin total = make(DType::kFloat32, {1}), squares = make(DType::kFloat32, {1});
  ops::sum(cpu_, total.cpu, f.cpu);
  ops::sum(*gpu_, total.gpu, f.gpu);
  ops::sum_of_squares(cpu_, squares.cpu, f.cpu);
  ops::sum_of_squares(*gpu_, squares.gpu, f.gpu);
  EXPECT_LE(error(total), 1e-4);
  EXPECT_LE(error(squares), 1e-5);
  ops::scale(cpu_, f.cpu, 0.37f);
  ops::scale(*gpu_, f.gpu, 0.37f);
  EXPECT_EQ(error(f), 0.0);
  Twin duplicate = output(DType::kFloat32, {100003});
  ops::copy(cpu_, duplicate.cpu, f.cpu);
  ops::copy(*gpu_, duplicate.gpu, f.gpu);
  EXPECT_EQ(error(duplicate), 0.0);
  ops::zero(*gpu_, f.gpu);
  ops::zero(cpu_, f.cpu);
  EXPECT_EQ(error(f), 0.0);
}

TEST_F(OpsTest, AttentionForwardAndBackward) {
  for (DType t : kTypes) {
    for (auto [s, b, heads, d] : {std::tuple{1, 1, 1, 8}, std::tuple{37, 2, 3, 16}, std::tuple{128, 2, 4, 64}}) {
      Twin qkv = make(t, {s, b, heads, 3 * d}), out = output(t, {s, b, heads, d});
      Twin lse = output(DType::kFloat32, {b, heads, s});
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      ops::attention_forward(cpu_, out.cpu, lse.cpu, qkv.cpu, scale, ops::DropoutMask{});
      ops::attention_forward(*gpu_, out.gpu, lse.gpu, qkv.gpu, scale, ops::DropoutMask{});
      EXPECT_LE(error(out), tolerance(t)) << "s=" << s;
      EXPECT_LE(error(lse), 1e-5);
      Twin dout = make(t, {s, b, heads, d}), dqkv = output(t, {s, b, heads, 3 * d});
      ops::attention_backward(cpu_, dqkv.cpu, dout.cpu, qkv.cpu, out.cpu, lse.cpu, scale, ops::DropoutMask{});
      ops::attention_backward(*gpu_, dqkv.gpu, dout.gpu, qkv.gpu, out.gpu, lse.gpu, scale, ops::DropoutMask{});
      EXPECT_LE(error(dqkv), is_float16_dtype(t) ? 2e-2 : 1e-4) << "s=" << s;
    }
  }
}

// Context parallelism's block attention (two blocks merged: a full earlier block and the causal
// diagonal one, GQA, packed K/V, with and without dropout), its gradient, copy_columns both ways and
// RoPE at a position offset, against the CPU reference.
TEST_F(OpsTest, ContextParallelBlocksCopyColumnsAndRopeOffset) {
  for (DType t : kTypes) {
    const int64_t chunk = 19, b = 2, groups = 2, q = 2, d = 16, width = (q + 2) * d, heads = groups * q;
    for (const float p : {0.0f, 0.2f}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " p=" << p);
      const ops::DropoutMask mask =
          p > 0 ? ops::DropoutMask{.probability = p, .key = 7, .sample_offset = 3, .row_offset = 1} : ops::DropoutMask{};
      Twin qkv = make(t, {2 * chunk, b, groups, width}), kv = output(t, {2 * chunk, b, groups, 2 * d});
      for (Context* ctx : {&cpu_, gpu_.get()}) {
        const Tensor& in = ctx == &cpu_ ? qkv.cpu : qkv.gpu;
        ops::copy_columns(*ctx, ctx == &cpu_ ? kv.cpu : kv.gpu, 0, in.view({2 * chunk * b * groups, width}),
                          width - 2 * d, 2 * d, false);
      }
      EXPECT_LE(error(kv), 0.0);
      Twin out = output(t, {2 * chunk, b, heads, d}), lse = output(DType::kFloat32, {b, heads, 2 * chunk});
      // Queries: the second chunk at position 3 chunk; keys: chunk 0 (position 0, full) then chunk 1
      // of the block (position 3 chunk, diagonal).
      const ops::AttentionBlock full{.query_row = chunk, .query_rows = chunk, .query_position = 3 * chunk,
                                     .key_row = 0, .key_rows = chunk, .key_position = 0, .sequence = 4 * chunk};
      ops::AttentionBlock diagonal = full;
      diagonal.key_row = chunk;
      diagonal.key_position = 3 * chunk;
      diagonal.accumulate = true;
      for (Context* ctx : {&cpu_, gpu_.get()}) {
        const bool host = ctx == &cpu_;
        for (const ops::AttentionBlock& block : {full, diagonal}) {
          ops::attention_block_forward(*ctx, host ? out.cpu : out.gpu, host ? lse.cpu : lse.gpu,
                                       host ? qkv.cpu : qkv.gpu, host ? kv.cpu : kv.gpu, 0.25f, block, mask);
        }
      }
      const Twin out_rows = part(out, chunk * b * heads * d, {chunk, b, heads, d});
      EXPECT_LE(error(out_rows), 2 * tolerance(t));
      Twin dout = make(t, {2 * chunk, b, heads, d}), dqkv = make(t, {2 * chunk, b, groups, width});
      Twin dkv = make(t, {2 * chunk, b, groups, 2 * d});
      for (Context* ctx : {&cpu_, gpu_.get()}) {
        const bool host = ctx == &cpu_;
        ops::zero(*ctx, host ? dqkv.cpu : dqkv.gpu);
        ops::zero(*ctx, host ? dkv.cpu : dkv.gpu);
        for (const ops::AttentionBlock& block : {full, diagonal}) {
          ops::attention_block_backward(*ctx, host ? dqkv.cpu : dqkv.gpu, host ? dkv.cpu : dkv.gpu,
                                        host ? dout.cpu : dout.gpu, host ? qkv.cpu : qkv.gpu, host ? kv.cpu : kv.gpu,
                                        host ? out.cpu : out.gpu, host ? lse.cpu : lse.gpu, 0.25f, block, mask);
        }
        ops::copy_columns(*ctx, (host ? dqkv.cpu : dqkv.gpu).view({2 * chunk * b * groups, width}), width - 2 * d,
                          host ? dkv.cpu : dkv.gpu, 0, 2 * d, true);
      }
      EXPECT_LE(error(dqkv), t == DType::kBFloat16 ? 2e-2 : 1e-4);
      ops::rope_forward(cpu_, qkv.cpu, d, d, 10000.0f, 1000, false);
      ops::rope_forward(*gpu_, qkv.gpu, d, d, 10000.0f, 1000, false);
      EXPECT_LE(error(qkv), tolerance(t));
    }
  }
}

TEST_F(OpsTest, EmbeddingsAndPositions) {
  for (DType t : kTypes) {
    const int64_t s = 33, b = 3, h = 41, local_vocab = 50, start = 20;
    Twin table = make(t, {local_vocab, h}), ids = tokens({s * b}, 0, 90), out = output(t, {s * b, h});
    ops::embedding_forward(cpu_, out.cpu, ids.cpu, table.cpu, start);
    ops::embedding_forward(*gpu_, out.gpu, ids.gpu, table.gpu, start);
    EXPECT_EQ(error(out), 0.0);
    Twin positions = make(t, {40, h});
    ops::position_embedding_forward(cpu_, out.cpu, positions.cpu, b, 5);
    ops::position_embedding_forward(*gpu_, out.gpu, positions.gpu, b, 5);
    EXPECT_LE(error(out), tolerance(t));
    Twin dtable = make(DType::kFloat32, {local_vocab, h}), dpositions = make(DType::kFloat32, {40, h});
    ops::embedding_backward(cpu_, dtable.cpu, out.cpu, ids.cpu, start);
    ops::embedding_backward(*gpu_, dtable.gpu, out.gpu, ids.gpu, start);
    EXPECT_LE(error(dtable), 1e-6);
    ops::position_embedding_backward(cpu_, dpositions.cpu, out.cpu, b, 5);
    ops::position_embedding_backward(*gpu_, dpositions.gpu, out.gpu, b, 5);
    EXPECT_LE(error(dpositions), 1e-6);
  }
}

TEST_F(OpsTest, CrossEntropyPiecesWithPaddingAndShards) {
  for (DType t : kTypes) {
    const int64_t rows = 19, cols = 1031, valid = 1000, start = 500;
    Twin logits = make(t, {rows, cols}, 3.0f), targets = tokens({rows}, 0, 2000);
    Twin m = output(DType::kFloat32, {rows}), sumexp = output(DType::kFloat32, {rows});
    Twin target = output(DType::kFloat32, {rows}), loss = output(DType::kFloat32, {rows});
    for (Context* c : {&cpu_, gpu_.get()}) {
      const bool g = c != &cpu_;
      auto pick = [&](const Twin& v) { return g ? v.gpu : v.cpu; };
      ops::cross_entropy_stats(*c, pick(m), pick(sumexp), pick(target), pick(logits), pick(targets), start, valid);
      ops::cross_entropy_loss(*c, pick(loss), pick(m), pick(sumexp), pick(target));
      ops::cross_entropy_backward(*c, pick(logits), pick(logits), pick(targets), pick(m), pick(sumexp), 0.25f, start, valid);
    }
    EXPECT_LE(error(m), 1e-6);
    EXPECT_LE(error(sumexp), 1e-5);
    EXPECT_LE(error(target), 1e-6);
    EXPECT_LE(error(loss), 1e-5);
    EXPECT_LE(error(logits), tolerance(t));
    Twin global = make(DType::kFloat32, {rows}, 0.1f, 2.0f);
    ops::cross_entropy_rescale(cpu_, sumexp.cpu, m.cpu, global.cpu);
    ops::cross_entropy_rescale(*gpu_, sumexp.gpu, m.gpu, global.gpu);
    EXPECT_LE(error(sumexp), 1e-5);
  }
}

TEST_F(OpsTest, AdamWMatchesTheReferenceOverSeveralSteps) {
  const int64_t n = 10007;
  Twin master = make(DType::kFloat32, {n}), grad = make(DType::kFloat32, {n});
  Twin m = make(DType::kFloat32, {n}, 0.0f), v = make(DType::kFloat32, {n}, 0.0f), copy = output(DType::kBFloat16, {n});
  for (int step = 1; step <= 5; ++step) {
    const ops::AdamWStep s{.learning_rate = 1e-3f, .weight_decay = 0.1f, .step = step, .grad_scale = 0.5f};
    ops::adamw_update(cpu_, s, master.cpu, grad.cpu, m.cpu, v.cpu, copy.cpu);
    ops::adamw_update(*gpu_, s, master.gpu, grad.gpu, m.gpu, v.gpu, copy.gpu);
  }
  EXPECT_LE(error(master), 1e-6);
  EXPECT_LE(error(m), 1e-6);
  EXPECT_LE(error(v), 1e-6);
  EXPECT_LE(error(copy), 1e-2);
}

// Every register configuration of the one-pass LayerNorm kernels (h from 7 to 8192, in both
// dtypes), the multi-pass path beyond (h = 20000), the scalar path (odd h, misaligned views), many
// more rows than the grid holds (the grid strides), outputs aliasing inputs as the model uses them,
// and the weight/bias gradients bitwise reproducible.
TEST_F(OpsTest, LayerNormEveryRowConfigurationAlignmentAndAliasing) {
  struct Case {
    int64_t rows, h, offset;
  };
  const Case cases[] = {{3, 7, 0},     {5, 64, 0},    {9, 200, 0},   {7, 256, 0},    {33, 768, 0},  {5, 1000, 0},
                        {4, 1024, 0},  {6, 2048, 0},  {3, 4100, 0},  {3, 4096, 0},   {2, 8192, 0},  {2, 20000, 0},
                        {17, 768, 1},  {5, 2048, 3},  {100003, 8, 0}, {40000, 24, 0}};
  // Zero-centred weights (--apply-layernorm-1p): the kernels scale by weight + 1.
  constexpr float kOffset = 1.0f;
  for (DType t : kTypes) {
    for (const Case& c : cases) {
      const int64_t rows = c.rows, h = c.h, n = rows * h;
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " rows=" << rows << " h=" << h << " offset=" << c.offset);
      Twin x_storage = make(t, {n + c.offset}, 2.0f, 0.5f), delta_storage = make(t, {n + c.offset});
      Twin x = part(x_storage, c.offset, {rows, h}), delta = part(delta_storage, c.offset, {rows, h});
      Twin delta_bias = make(t, {h}), w = make(t, {h}, 0.2f, 1.0f), b = make(t, {h});
      Twin y = output(t, {rows, h}), residual = output(t, {rows, h});
      Twin mean = output(DType::kFloat32, {rows}), rstd = output(DType::kFloat32, {rows});
      for (Context* ctx : {&cpu_, gpu_.get()}) {
        const bool on_gpu = ctx != &cpu_;
        auto pick = [&](const Twin& v) { return on_gpu ? v.gpu : v.cpu; };
        ops::layernorm_forward(*ctx, pick(y), pick(mean), pick(rstd), pick(x), pick(w), pick(b), 1e-5f, kOffset);
      }
      EXPECT_LE(error(y), tolerance(t));
      EXPECT_LE(error(mean), 1e-5);
      EXPECT_LE(error(rstd), 1e-5);
      // Fused residual, written over x (the residual stream is updated in place).
      for (Context* ctx : {&cpu_, gpu_.get()}) {
        const bool on_gpu = ctx != &cpu_;
        auto pick = [&](const Twin& v) { return on_gpu ? v.gpu : v.cpu; };
        ops::residual_layernorm_forward(*ctx, pick(x), pick(y), pick(mean), pick(rstd), pick(x), pick(delta),
                                        pick(delta_bias), pick(w), pick(b), 1e-5f, kOffset);
      }
      EXPECT_LE(error(x), tolerance(t));
      EXPECT_LE(error(y), tolerance(t));
      EXPECT_LE(error(rstd), 1e-5);
      // Backward twice: into a separate dx (accumulating), then dx written over dy.
      Twin dy = make(t, {rows, h}), dx = make(t, {rows, h});
      Twin dw = make(DType::kFloat32, {h}), db = make(DType::kFloat32, {h});
      for (bool in_place : {false, true}) {
        const Twin& target = in_place ? dy : dx;
        ops::layernorm_backward(cpu_, target.cpu, dw.cpu, db.cpu, dy.cpu, x.cpu, mean.cpu, rstd.cpu, w.cpu, !in_place, kOffset);
        ops::layernorm_backward(*gpu_, target.gpu, dw.gpu, db.gpu, dy.gpu, x.gpu, mean.gpu, rstd.gpu, w.gpu, !in_place, kOffset);
        EXPECT_LE(error(target), tolerance(t)) << "in place " << in_place;
        EXPECT_LE(error(dw), 1e-4);
        EXPECT_LE(error(db), 1e-4);
      }
      // Deterministic: the same inputs give the same bits, run after run.
      std::vector<std::vector<uint8_t>> runs;
      for (int run = 0; run < 2; ++run) {
        Twin dw_run = output(DType::kFloat32, {h}), db_run = output(DType::kFloat32, {h});
        ops::zero(*gpu_, dw_run.gpu);
        ops::zero(*gpu_, db_run.gpu);
        ops::copy(*gpu_, dx.gpu, dy.gpu);  // the same dy each run, overwritten in place
        ops::layernorm_backward(*gpu_, dx.gpu, dw_run.gpu, db_run.gpu, dx.gpu, x.gpu, mean.gpu, rstd.gpu, w.gpu, false, kOffset);
        runs.push_back(download(dw_run.gpu));
        runs.push_back(download(db_run.gpu));
        runs.push_back(download(dx.gpu));
      }
      EXPECT_EQ(runs[0], runs[3]) << "dweight";
      EXPECT_EQ(runs[1], runs[4]) << "dbias";
      EXPECT_EQ(runs[2], runs[5]) << "dx";
    }
  }
}

// Vector body with scalar head and tail: misaligned views of every operand, sizes around the
// vector width, a residual bias whose rows are not a multiple of the width, and an element count
// far beyond one thread per element of the grid.
TEST_F(OpsTest, ElementwiseOpsOnMisalignedViewsAndLargeSizes) {
  struct Case {
    int64_t n, h, x_offset, d_offset, out_offset;
  };
  // Equal offsets: a scalar head, then the vector body. Different offsets: all scalar.
  const Case cases[] = {{8, 8, 1, 1, 1},       {9 * 13, 13, 3, 6, 0},  {768 * 5, 768, 0, 0, 0},
                        {768 * 5, 768, 2, 2, 2}, {768 * 5 + 3, 1, 5, 5, 5}, {24 * 700000, 24, 0, 0, 0}};
  for (DType t : kTypes) {
    for (const Case& c : cases) {
      const int64_t n = c.n, h = c.h;
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n=" << n << " h=" << h << " offsets " << c.x_offset
                                        << " " << c.d_offset << " " << c.out_offset);
      Twin x_storage = make(t, {n + c.x_offset}), d_storage = make(t, {n + c.d_offset});
      Twin x = part(x_storage, c.x_offset, {n / h, h}), d = part(d_storage, c.d_offset, {n / h, h});
      Twin bias = make(t, {h});
      Twin out_storage = output(t, {n + c.out_offset});
      Twin out = part(out_storage, c.out_offset, {n / h, h});
      ops::residual_add(cpu_, out.cpu, x.cpu, d.cpu, bias.cpu);
      ops::residual_add(*gpu_, out.gpu, x.gpu, d.gpu, bias.gpu);
      EXPECT_TRUE(identical(out)) << "residual_add";
      ops::residual_add(cpu_, d.cpu, x.cpu, d.cpu, Tensor());
      ops::residual_add(*gpu_, d.gpu, x.gpu, d.gpu, Tensor());
      EXPECT_TRUE(identical(d)) << "residual_add in place";
      Twin y = output(t, {n / h, h});
      ops::gelu_forward(cpu_, y.cpu, x.cpu);
      ops::gelu_forward(*gpu_, y.gpu, x.gpu);
      EXPECT_LE(error(y), tolerance(t));
      ops::gelu_backward(cpu_, d.cpu, d.cpu, x.cpu);
      ops::gelu_backward(*gpu_, d.gpu, d.gpu, x.gpu);
      EXPECT_LE(error(d), tolerance(t));
      Twin other = output(t == DType::kFloat32 ? DType::kBFloat16 : DType::kFloat32, {n + 1});
      Twin other_part = part(other, 1, {n});
      ops::cast(cpu_, other_part.cpu, x.cpu);
      ops::cast(*gpu_, other_part.gpu, x.gpu);
      EXPECT_TRUE(identical(other_part)) << "cast";
    }
  }
  for (int64_t offset : {0, 1, 2}) {
    // Mean 1, so that the sum is far from 0 and its relative error meaningful.
    Twin f_storage = make(DType::kFloat32, {(int64_t{1} << 22) + 7}, 1.0f, 1.0f);
    Twin f = part(f_storage, offset, {(int64_t{1} << 22) + 5 - offset});
    Twin total = make(DType::kFloat32, {1}), squares = make(DType::kFloat32, {1});
    ops::sum(cpu_, total.cpu, f.cpu);
    ops::sum(*gpu_, total.gpu, f.gpu);
    ops::sum_of_squares(cpu_, squares.cpu, f.cpu);
    ops::sum_of_squares(*gpu_, squares.gpu, f.gpu);
    EXPECT_LE(error(total), 1e-4);
    EXPECT_LE(error(squares), 1e-5);
    // Reproducible: the same sum, bit for bit, every time.
    Twin first = output(DType::kFloat32, {1}), second = output(DType::kFloat32, {1});
    ops::zero(*gpu_, first.gpu);
    ops::zero(*gpu_, second.gpu);
    ops::sum_of_squares(*gpu_, first.gpu, f.gpu);
    ops::sum_of_squares(*gpu_, second.gpu, f.gpu);
    EXPECT_EQ(download(first.gpu), download(second.gpu));
    ops::scale(cpu_, f.cpu, 0.37f);
    ops::scale(*gpu_, f.gpu, 0.37f);
    EXPECT_TRUE(identical(f)) << "scale";
  }
}

// Vectorized statistics and gradient over a GPT-2 vocabulary shard (padded columns excluded), the
// scalar path (odd widths, a misaligned view), and more rows than the grid holds.
TEST_F(OpsTest, CrossEntropyVectorizedShardsAndManyRows) {
  struct Case {
    int64_t rows, cols, valid, start, offset;
  };
  for (DType t : kTypes) {
    for (const Case& c : {Case{7, 50304, 50257, 0, 0}, Case{5, 25152, 25152, 25152, 0}, Case{6, 25152, 25105, 25152, 0},
                          Case{9, 1000, 997, 0, 1}, Case{5000, 64, 60, 30, 0}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " rows=" << c.rows << " cols=" << c.cols);
      Twin storage = make(t, {c.rows * c.cols + c.offset}, 3.0f);
      Twin logits = part(storage, c.offset, {c.rows, c.cols});
      Twin targets = tokens({c.rows}, 0, static_cast<int32_t>(2 * c.cols));
      Twin m = output(DType::kFloat32, {c.rows}), sumexp = output(DType::kFloat32, {c.rows});
      Twin target = output(DType::kFloat32, {c.rows}), dlogits = output(t, {c.rows, c.cols});
      for (Context* ctx : {&cpu_, gpu_.get()}) {
        const bool g = ctx != &cpu_;
        auto pick = [&](const Twin& v) { return g ? v.gpu : v.cpu; };
        ops::cross_entropy_stats(*ctx, pick(m), pick(sumexp), pick(target), pick(logits), pick(targets), c.start, c.valid);
        ops::cross_entropy_backward(*ctx, pick(dlogits), pick(logits), pick(targets), pick(m), pick(sumexp), 0.5f,
                                    c.start, c.valid);
      }
      EXPECT_EQ(error(m), 0.0);
      EXPECT_LE(error(sumexp), 1e-5);
      EXPECT_EQ(error(target), 0.0);
      EXPECT_LE(error(dlogits), tolerance(t));
      // In place, as the output layer calls it.
      ops::cross_entropy_backward(cpu_, logits.cpu, logits.cpu, targets.cpu, m.cpu, sumexp.cpu, 0.5f, c.start, c.valid);
      ops::cross_entropy_backward(*gpu_, logits.gpu, logits.gpu, targets.gpu, m.gpu, sumexp.gpu, 0.5f, c.start, c.valid);
      EXPECT_LE(error(logits), tolerance(t));
    }
  }
}

// Vectorized rows (h a multiple of the pack) and the scalar path; a token gradient with long runs
// of one token (the sort and the in-order sum), bitwise reproducible; more rows than the grid.
TEST_F(OpsTest, EmbeddingsVectorizedAndDeterministic) {
  for (DType t : kTypes) {
    for (auto [s, b, h] : {std::tuple{int64_t{64}, int64_t{4}, int64_t{768}}, std::tuple{int64_t{33}, int64_t{3}, int64_t{44}},
                           std::tuple{int64_t{5000}, int64_t{8}, int64_t{16}}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " s=" << s << " b=" << b << " h=" << h);
      const int64_t local_vocab = 300, start = 100;
      Twin table = make(t, {local_vocab, h}), out = output(t, {s * b, h});
      // Mostly tokens of a few ids (long runs), some outside this shard.
      Twin ids = tokens({s * b}, 95, 110);
      ops::embedding_forward(cpu_, out.cpu, ids.cpu, table.cpu, start);
      ops::embedding_forward(*gpu_, out.gpu, ids.gpu, table.gpu, start);
      EXPECT_TRUE(identical(out));
      Twin positions = make(t, {s + 7, h});
      ops::position_embedding_forward(cpu_, out.cpu, positions.cpu, b, 7);
      ops::position_embedding_forward(*gpu_, out.gpu, positions.gpu, b, 7);
      EXPECT_TRUE(identical(out));
      Twin dtable = make(DType::kFloat32, {local_vocab, h}), dpositions = make(DType::kFloat32, {s + 7, h});
      // FP32 sums in row order on both sides, associated differently (the CPU adds each row into
      // the table, the GPU a run's total): runs of thousands of rows differ by a few 1e-6.
      ops::embedding_backward(cpu_, dtable.cpu, out.cpu, ids.cpu, start);
      ops::embedding_backward(*gpu_, dtable.gpu, out.gpu, ids.gpu, start);
      EXPECT_LE(error(dtable), 2e-5);
      ops::position_embedding_backward(cpu_, dpositions.cpu, out.cpu, b, 7);
      ops::position_embedding_backward(*gpu_, dpositions.gpu, out.gpu, b, 7);
      EXPECT_LE(error(dpositions), 2e-6);
      Twin again = output(DType::kFloat32, {local_vocab, h});
      ops::zero(*gpu_, dtable.gpu);
      ops::zero(*gpu_, again.gpu);
      ops::embedding_backward(*gpu_, dtable.gpu, out.gpu, ids.gpu, start);
      ops::embedding_backward(*gpu_, again.gpu, out.gpu, ids.gpu, start);
      EXPECT_EQ(download(dtable.gpu), download(again.gpu));
    }
  }
}

// Bias gradients of GPT-sized columns (vector path) and odd ones, from FP32 and BF16 rows.
TEST_F(OpsTest, BiasGradVectorizedAndOddColumns) {
  for (DType t : kTypes) {
    for (auto [rows, cols] : {std::pair{int64_t{3000}, int64_t{3072}}, std::pair{int64_t{2}, int64_t{2304}},
                              std::pair{int64_t{777}, int64_t{100}}, std::pair{int64_t{5}, int64_t{5}}}) {
      Twin dy = make(t, {rows, cols}), dbias = make(DType::kFloat32, {cols});
      ops::bias_grad(cpu_, dbias.cpu, dy.cpu);
      ops::bias_grad(*gpu_, dbias.gpu, dy.gpu);
      EXPECT_LE(error(dbias), 1e-5) << dtype_name(t) << " rows=" << rows << " cols=" << cols;
    }
  }
}

// The multi-tensor AdamW is the CPU reference bit for bit (both avoid FMA contraction): more
// segments than one launch takes, odd offsets and lengths, empty segments, gaps left untouched,
// with and without the BF16 copy, on aligned and misaligned state.
TEST_F(OpsTest, AdamWSegmentsMatchTheReferenceBitForBit) {
  std::mt19937 pick(7);
  std::vector<ops::AdamWSegment> segments;
  int64_t offset = 0;
  for (int i = 0; i < 1000; ++i) {
    const int64_t length = i % 97 == 0 ? 0 : std::uniform_int_distribution<int64_t>(1, i % 10 == 0 ? 20000 : 300)(pick);
    const int64_t gap = i % 13 == 0 ? 3 : 0;
    segments.push_back({.offset = offset + gap, .length = length, .weight_decay = i % 3 != 0});
    offset += gap + length;
  }
  std::reverse(segments.begin(), segments.end());  // any order
  // Views of the state starting 0, 1 or 3 elements past alignment (the same phase everywhere: a
  // scalar head, then 16-byte groups), and gradients out of phase with the state (all scalar).
  for (auto [state_shift, grad_shift] : {std::pair{0, 0}, std::pair{1, 1}, std::pair{3, 3}, std::pair{1, 2}}) {
    for (bool with_copy : {true, false}) {
      const int64_t n = offset;
      Twin master = make(DType::kFloat32, {n + 3}), grad = make(DType::kFloat32, {n + 3});
      // v stays positive (0.5 +- 0.01): the square root of a negative is a NaN whose bits differ.
      Twin m = make(DType::kFloat32, {n + 3}, 0.1f), v = make(DType::kFloat32, {n + 3}, 0.01f, 0.5f);
      Twin copy = output(DType::kBFloat16, {n + 3});
      auto view = [&](const Twin& t, int64_t shift) { return part(t, shift, {n}); };
      for (int step = 1; step <= 3; ++step) {
        const ops::AdamWStep s{.learning_rate = 1e-3f, .weight_decay = 0.1f, .step = step, .grad_scale = 0.5f};
        for (Context* ctx : {&cpu_, gpu_.get()}) {
          const bool g = ctx != &cpu_;
          auto on = [&](const Twin& t, int64_t shift) { return g ? view(t, shift).gpu : view(t, shift).cpu; };
          ops::adamw_update_segments(*ctx, s, on(master, state_shift), on(grad, grad_shift), on(m, state_shift),
                                     on(v, state_shift), with_copy ? on(copy, state_shift) : Tensor(), segments);
        }
      }
      SCOPED_TRACE(::testing::Message() << "shifts " << state_shift << " " << grad_shift << " copy " << with_copy);
      EXPECT_TRUE(identical(master));
      EXPECT_TRUE(identical(m));
      EXPECT_TRUE(identical(v));
      EXPECT_TRUE(identical(copy));  // including the poisoned gaps
    }
  }
  // The single-tensor op shares the kernel.
  Twin master = make(DType::kFloat32, {10007}), grad = make(DType::kFloat32, {10007});
  Twin m = make(DType::kFloat32, {10007}, 0.0f), v = make(DType::kFloat32, {10007}, 0.0f);
  Twin copy = output(DType::kBFloat16, {10007});
  const ops::AdamWStep s{.learning_rate = 1e-3f, .weight_decay = 0.1f, .step = 1, .grad_scale = 0.5f};
  ops::adamw_update(cpu_, s, master.cpu, grad.cpu, m.cpu, v.cpu, copy.cpu);
  ops::adamw_update(*gpu_, s, master.gpu, grad.gpu, m.gpu, v.gpu, copy.gpu);
  EXPECT_TRUE(identical(master));
  EXPECT_TRUE(identical(copy));
}

// RMSNorm in every register configuration of the one-pass kernels (as the LayerNorm test), the
// multi-pass path (h = 20000), the scalar path (odd h, misaligned views), more rows than the grid
// holds, the residual written over x and dx over dy, and a bitwise reproducible weight gradient.
TEST_F(OpsTest, RmsNormEveryRowConfigurationAlignmentAndAliasing) {
  struct Case {
    int64_t rows, h, offset;
  };
  const Case cases[] = {{1, 7, 0},    {5, 64, 0},   {9, 200, 0},  {7, 256, 0},  {33, 768, 0},   {5, 1000, 0},
                        {4, 1024, 0}, {6, 2048, 0}, {3, 4100, 0}, {3, 4096, 0}, {2, 8192, 0},   {2, 20000, 0},
                        {17, 768, 1}, {5, 2048, 3}, {100003, 8, 0}, {40000, 24, 0}};
  // Zero-centred weights (--apply-layernorm-1p): the kernels scale by weight + 1.
  constexpr float kOffset = 1.0f;
  for (DType t : kTypes) {
    for (const Case& c : cases) {
      const int64_t rows = c.rows, h = c.h, n = rows * h;
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " rows=" << rows << " h=" << h << " offset=" << c.offset);
      Twin x_storage = make(t, {n + c.offset}, 2.0f, 0.5f), delta_storage = make(t, {n + c.offset});
      Twin x = part(x_storage, c.offset, {rows, h}), delta = part(delta_storage, c.offset, {rows, h});
      Twin delta_bias = make(t, {h}), w = make(t, {h}, 0.2f, 1.0f);
      Twin y = output(t, {rows, h}), rstd = output(DType::kFloat32, {rows});
      for (Context* ctx : {&cpu_, gpu_.get()}) {
        const bool on_gpu = ctx != &cpu_;
        auto pick = [&](const Twin& v) { return on_gpu ? v.gpu : v.cpu; };
        ops::rmsnorm_forward(*ctx, pick(y), pick(rstd), pick(x), pick(w), 1e-5f, kOffset);
      }
      EXPECT_LE(error(y), tolerance(t));
      EXPECT_LE(error(rstd), 1e-5);
      // Fused residual, written over x (the residual stream is updated in place).
      for (Context* ctx : {&cpu_, gpu_.get()}) {
        const bool on_gpu = ctx != &cpu_;
        auto pick = [&](const Twin& v) { return on_gpu ? v.gpu : v.cpu; };
        ops::residual_rmsnorm_forward(*ctx, pick(x), pick(y), pick(rstd), pick(x), pick(delta), pick(delta_bias),
                                      pick(w), 1e-5f, kOffset);
      }
      EXPECT_LE(error(x), tolerance(t));
      EXPECT_LE(error(y), tolerance(t));
      EXPECT_LE(error(rstd), 1e-5);
      // Backward twice: into a separate dx (accumulating), then dx written over dy.
      Twin dy = make(t, {rows, h}), dx = make(t, {rows, h}), dw = make(DType::kFloat32, {h});
      for (bool in_place : {false, true}) {
        const Twin& target = in_place ? dy : dx;
        ops::rmsnorm_backward(cpu_, target.cpu, dw.cpu, dy.cpu, x.cpu, rstd.cpu, w.cpu, !in_place, kOffset);
        ops::rmsnorm_backward(*gpu_, target.gpu, dw.gpu, dy.gpu, x.gpu, rstd.gpu, w.gpu, !in_place, kOffset);
        EXPECT_LE(error(target), tolerance(t)) << "in place " << in_place;
        EXPECT_LE(error(dw), 1e-4);
      }
      // Deterministic: the same inputs give the same bits, run after run.
      std::vector<std::vector<uint8_t>> runs;
      for (int run = 0; run < 2; ++run) {
        Twin dw_run = output(DType::kFloat32, {h});
        ops::zero(*gpu_, dw_run.gpu);
        ops::copy(*gpu_, dx.gpu, dy.gpu);  // the same dy each run, overwritten in place
        ops::rmsnorm_backward(*gpu_, dx.gpu, dw_run.gpu, dx.gpu, x.gpu, rstd.gpu, w.gpu, false, kOffset);
        runs.push_back(download(dw_run.gpu));
        runs.push_back(download(dx.gpu));
      }
      EXPECT_EQ(runs[0], runs[2]) << "dweight";
      EXPECT_EQ(runs[1], runs[3]) << "dx";
    }
  }
}

// SwiGLU on the vector path (f a multiple of the pack) and the scalar path (odd f, a misaligned
// view), more rows than the grid holds, and dx written over x.
TEST_F(OpsTest, SwiGluVectorizedScalarAndInPlace) {
  struct Case {
    int64_t rows, f, offset;
  };
  for (DType t : kTypes) {
    for (const Case& c : {Case{1, 1, 0}, Case{7, 13, 0}, Case{33, 64, 0}, Case{64, 2048, 0}, Case{9, 64, 1},
                          Case{300000, 8, 0}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " rows=" << c.rows << " f=" << c.f << " offset=" << c.offset);
      Twin storage = make(t, {c.rows * 2 * c.f + c.offset}, 3.0f);
      Twin x = part(storage, c.offset, {c.rows, 2 * c.f});
      Twin y = output(t, {c.rows, c.f}), dy = make(t, {c.rows, c.f}), dx = output(t, {c.rows, 2 * c.f});
      ops::swiglu_forward(cpu_, y.cpu, x.cpu);
      ops::swiglu_forward(*gpu_, y.gpu, x.gpu);
      EXPECT_LE(error(y), tolerance(t));
      ops::swiglu_backward(cpu_, dx.cpu, dy.cpu, x.cpu);
      ops::swiglu_backward(*gpu_, dx.gpu, dy.gpu, x.gpu);
      EXPECT_LE(error(dx), tolerance(t));
      ops::swiglu_backward(cpu_, x.cpu, dy.cpu, x.cpu);
      ops::swiglu_backward(*gpu_, x.gpu, dy.gpu, x.gpu);
      EXPECT_LE(error(x), tolerance(t)) << "in place";
    }
  }
}

// RoPE forward and backward in place: multi-head and grouped-query packing, partial rotary widths,
// the vector path and the scalar one (half widths that are not a multiple of the pack, a
// misaligned view), long sequences (large angles); value heads and pass-through dims unchanged.
// Dropout masks are the CPU reference's bit for bit (the same dropout_keeps of the same global
// coordinates): vector path and scalar path (h not a multiple of 4 or of the pack, misaligned
// views), with and without the bias, in place, backward with the same mask, offsets of a
// sequence-parallel shard and of a later microbatch, and the disabled mask (the bias add, a copy).
TEST_F(OpsTest, DropoutMasksAndValuesMatchTheReferenceBitForBit) {
  struct Case {
    int64_t s, b, h, offset;
  };
  for (DType t : kTypes) {
    for (const Case& c : {Case{1, 1, 8, 0}, Case{5, 3, 37, 0}, Case{64, 4, 1024, 0}, Case{33, 2, 768, 1},
                          Case{9, 2, 6, 0}, Case{512, 8, 1536, 0}}) {
      for (float p : {0.0f, 0.1f, 0.5f}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " s=" << c.s << " b=" << c.b << " h=" << c.h
                                          << " offset=" << c.offset << " p=" << p);
        const ops::DropoutMask mask{.probability = p,
                                    .key = ops::dropout_key(99, 5, 2, ops::DropoutSite::kAttentionOutput),
                                    .sample_offset = 12,
                                    .row_offset = 3 * c.s};
        const Shape shape{c.s, c.b, c.h};
        Twin storage = make(t, {shape.numel() + c.offset});
        Twin x = part(storage, c.offset, shape);
        Twin bias = make(t, {c.h}), out = output(t, shape), plain = output(t, shape);
        ops::dropout_forward(cpu_, out.cpu, x.cpu, bias.cpu, mask);
        ops::dropout_forward(*gpu_, out.gpu, x.gpu, bias.gpu, mask);
        EXPECT_TRUE(identical(out)) << "forward with bias";
        ops::dropout_forward(cpu_, plain.cpu, x.cpu, Tensor(), mask);
        ops::dropout_forward(*gpu_, plain.gpu, x.gpu, Tensor(), mask);
        EXPECT_TRUE(identical(plain)) << "forward without bias";
        Twin dy = make(t, shape), dx = output(t, shape);
        ops::dropout_backward(cpu_, dx.cpu, dy.cpu, mask);
        ops::dropout_backward(*gpu_, dx.gpu, dy.gpu, mask);
        EXPECT_TRUE(identical(dx)) << "backward";
        ops::dropout_backward(cpu_, dy.cpu, dy.cpu, mask);
        ops::dropout_backward(*gpu_, dy.gpu, dy.gpu, mask);
        EXPECT_TRUE(identical(dy)) << "backward in place";
        ops::dropout_forward(cpu_, x.cpu, x.cpu, bias.cpu, mask);
        ops::dropout_forward(*gpu_, x.gpu, x.gpu, bias.gpu, mask);
        EXPECT_TRUE(identical(x)) << "forward in place";
      }
    }
  }
}

}  // namespace
}  // namespace gpt
