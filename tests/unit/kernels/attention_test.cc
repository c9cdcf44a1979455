// Causal attention (ops::attention_forward/backward on the CPU) against the naive double
// reference: one query head per group (q = 1), grouped-query (GQA) and multi-query (MQA)
// attention, and attention dropout with the mask of kernels/dropout_mask.h computed here from its
// documented coordinates.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "kernels/dropout_mask.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;
using reference::AttentionShape;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

// The dropout multipliers keep_ij / (1 - p) of the probabilities [b, heads, s, s], from
// dropout_keeps at sample = sample_offset + batch, position = ((row_offset + head) s + i) s + j.
reference::Vec keep_multipliers(const AttentionShape& sh, const ops::DropoutMask& mask) {
  reference::Vec keep(static_cast<size_t>(sh.b * sh.heads() * sh.s * sh.s), 1.0);
  if (!mask.enabled()) return keep;
  const uint64_t threshold = ops::dropout_threshold(mask.probability);
  const double kept = 1.0 / (1.0 - static_cast<double>(mask.probability));
  for (int64_t batch = 0; batch < sh.b; ++batch) {
    for (int64_t head = 0; head < sh.heads(); ++head) {
      for (int64_t i = 0; i < sh.s; ++i) {
        for (int64_t j = 0; j < sh.s; ++j) {
          const auto position = static_cast<uint64_t>(((mask.row_offset + head) * sh.s + i) * sh.s + j);
          const bool keeps =
              ops::dropout_keeps(mask.key, static_cast<uint64_t>(mask.sample_offset + batch), position, threshold);
          keep[((batch * sh.heads() + head) * sh.s + i) * sh.s + j] = keeps ? kept : 0.0;
        }
      }
    }
  }
  return keep;
}

std::string describe(const AttentionShape& sh) {
  return "s=" + std::to_string(sh.s) + " b=" + std::to_string(sh.b) + " groups=" + std::to_string(sh.groups) +
         " q=" + std::to_string(sh.q) + " d=" + std::to_string(sh.d);
}

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  TensorFactory make(20);
  const double scale = 0.6;
  // q = 1; GQA (2 groups of 2 query heads); MQA (1 group of 3); each without and with a dropout mask.
  for (const AttentionShape sh : {AttentionShape{4, 2, 2, 1, 3}, AttentionShape{4, 2, 2, 2, 3},
                                  AttentionShape{5, 1, 1, 3, 2}}) {
    for (const float p : {0.0f, 0.5f}) {
      SCOPED_TRACE(describe(sh) + " p=" + std::to_string(p));
      const reference::Vec qkv = values(make.random(DType::kFloat32, {sh.s, sh.b, sh.groups, (sh.q + 2) * sh.d}));
      const reference::Vec dout = values(make.random(DType::kFloat32, {sh.s, sh.b, sh.heads(), sh.d}));
      const reference::Vec keep =
          p > 0 ? keep_multipliers(sh, {.probability = p, .key = 77, .sample_offset = 1, .row_offset = 0})
                : reference::Vec{};
      auto objective = [&](const reference::Vec& input) {
        reference::Vec out, lse;
        reference::attention(input, sh, scale, keep, out, lse);
        double total = 0;
        for (size_t i = 0; i < out.size(); ++i) total += dout[i] * out[i];
        return total;
      };
      const double error = relative_error(reference::attention_backward(qkv, dout, sh, scale, keep),
                                          reference::numeric_gradient(objective, qkv));
      EXPECT_LE(error, 1e-7);
      std::printf("reference vs finite differences, %s p=%.1f: %.2e\n", describe(sh).c_str(), p, error);
    }
  }
}

// Runs forward and backward on the CPU and checks them against the double reference.
void check_against_reference(TensorFactory& make, DType t, const AttentionShape& sh, const ops::DropoutMask& mask) {
  Context ctx = Context::cpu(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(sh.d));
  const reference::Vec keep = mask.enabled() ? keep_multipliers(sh, mask) : reference::Vec{};
  Tensor qkv = make.random(t, {sh.s, sh.b, sh.groups, (sh.q + 2) * sh.d});
  Tensor out = make.poisoned(t, {sh.s, sh.b, sh.heads(), sh.d});
  Tensor lse = make.poisoned(DType::kFloat32, {sh.b, sh.heads(), sh.s});
  ops::attention_forward(ctx, out, lse, qkv, static_cast<float>(scale), mask);
  reference::Vec out_want, lse_want;
  reference::attention(values(qkv), sh, scale, keep, out_want, lse_want);
  const double out_error = relative_error(out, out_want), lse_error = relative_error(lse, lse_want);
  EXPECT_LE(out_error, tolerance(t));
  EXPECT_LE(lse_error, 1e-6);
  Tensor dout = make.random(t, {sh.s, sh.b, sh.heads(), sh.d});
  Tensor dqkv = make.poisoned(t, {sh.s, sh.b, sh.groups, (sh.q + 2) * sh.d});
  ops::attention_backward(ctx, dqkv, dout, qkv, out, lse, static_cast<float>(scale), mask);
  const reference::Vec dqkv_want = reference::attention_backward(values(qkv), values(dout), sh, scale, keep);
  const double grad_error = relative_error(dqkv, dqkv_want);
  EXPECT_LE(grad_error, is_float16_dtype(t) ? 2e-2 : 1e-5);
  std::printf("%s %s p=%.1f: out %.2e lse %.2e dqkv %.2e\n", std::string(dtype_name(t)).c_str(),
              describe(sh).c_str(), mask.probability, out_error, lse_error, grad_error);
}

TEST(Attention, ForwardAndBackwardAgainstDoubleReference) {
  TensorFactory make(21);
  for (DType t : kTypes) {
    // q = 1 (the layout [s, b, heads, 3d]), as before grouped-query attention.
    for (const AttentionShape sh : {AttentionShape{1, 1, 1, 1, 8}, AttentionShape{17, 2, 3, 1, 16},
                                    AttentionShape{64, 1, 2, 1, 32}}) {
      SCOPED_TRACE(describe(sh));
      check_against_reference(make, t, sh, ops::DropoutMask{});
    }
  }
}

TEST(Attention, GroupedAndMultiQueryAgainstDoubleReference) {
  TensorFactory make(22);
  for (DType t : kTypes) {
    // GQA: 8 heads in 2 groups; MQA: 4 heads sharing one key/value head; one row.
    for (const AttentionShape sh : {AttentionShape{19, 2, 2, 4, 16}, AttentionShape{33, 2, 1, 4, 8},
                                    AttentionShape{1, 1, 2, 3, 8}}) {
      SCOPED_TRACE(describe(sh));
      check_against_reference(make, t, sh, ops::DropoutMask{});
    }
  }
}

TEST(Attention, DropoutAgainstDoubleReferenceWithTheDocumentedMask) {
  TensorFactory make(23);
  for (DType t : kTypes) {
    for (const float p : {0.1f, 0.5f}) {
      for (const AttentionShape sh : {AttentionShape{23, 2, 3, 1, 16}, AttentionShape{21, 2, 2, 4, 8}}) {
        SCOPED_TRACE(describe(sh) + " p=" + std::to_string(p));
        const ops::DropoutMask mask{.probability = p,
                                    .key = ops::dropout_key(1234, 7, 3, ops::DropoutSite::kAttentionProbabilities),
                                    .sample_offset = 5,
                                    .row_offset = 2};
        check_against_reference(make, t, sh, mask);
      }
    }
  }
}

// With K = 0 the probabilities of row i are 1 / (i + 1), and with V the identity (d = s) output
// row i is the dropped probability row itself: out_ij = keep_ij / ((1 - p) (i + 1)), for j <= i.
TEST(Attention, DropoutMaskIsTheDocumentedOne) {
  Context ctx = Context::cpu(1);
  TensorFactory make(24);
  const AttentionShape sh{48, 2, 2, 2, 48};
  const ops::DropoutMask mask{.probability = 0.3f, .key = 0x1234567890abcdefull, .sample_offset = 9, .row_offset = 4};
  Tensor qkv = make.random(DType::kFloat32, {sh.s, sh.b, sh.groups, (sh.q + 2) * sh.d});
  for (int64_t t = 0; t < sh.s; ++t) {
    for (int64_t batch = 0; batch < sh.b; ++batch) {
      for (int64_t group = 0; group < sh.groups; ++group) {
        const int64_t base = ((t * sh.b + batch) * sh.groups + group) * (sh.q + 2) * sh.d;
        for (int64_t c = 0; c < sh.d; ++c) {
          TensorFactory::set(qkv, base + sh.q * sh.d + c, 0.0);                        // key
          TensorFactory::set(qkv, base + (sh.q + 1) * sh.d + c, c == t ? 1.0 : 0.0);  // value
        }
      }
    }
  }
  Tensor out = make.poisoned(DType::kFloat32, {sh.s, sh.b, sh.heads(), sh.d});
  Tensor lse = make.poisoned(DType::kFloat32, {sh.b, sh.heads(), sh.s});
  ops::attention_forward(ctx, out, lse, qkv, 0.5f, mask);
  const reference::Vec keep = keep_multipliers(sh, mask);
  int64_t dropped = 0, total = 0, mismatches = 0;
  for (int64_t batch = 0; batch < sh.b; ++batch) {
    for (int64_t head = 0; head < sh.heads(); ++head) {
      for (int64_t i = 0; i < sh.s; ++i) {
        EXPECT_FLOAT_EQ(lse.data_as<float>()[(batch * sh.heads() + head) * sh.s + i], std::log(i + 1.0));
        for (int64_t j = 0; j < sh.s; ++j) {
          const double multiplier = keep[((batch * sh.heads() + head) * sh.s + i) * sh.s + j];
          const double want = j <= i ? multiplier / (i + 1.0) : 0.0;
          const double got = out.data_as<float>()[((i * sh.b + batch) * sh.heads() + head) * sh.d + j];
          if (std::abs(got - want) > 1e-6 * std::max(1.0, want)) ++mismatches;
          if (j <= i) {
            ++total;
            dropped += multiplier == 0.0;
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  const double rate = static_cast<double>(dropped) / static_cast<double>(total);
  EXPECT_NEAR(rate, 0.3, 0.02) << dropped << " of " << total;
  std::printf("dropped %lld of %lld causal probabilities (%.4f, p = 0.3)\n", static_cast<long long>(dropped),
              static_cast<long long>(total), rate);
}

// heads [2, 4) of a 4-head attention, computed alone with row_offset = 2, are the full
// computation's heads [2, 4) (its mask included): one query head per group (groups [2, 4) of 4)
// and GQA (group 1 of 2 groups of 2 query heads).
TEST(Attention, DropoutRowOffsetShiftsHeads) {
  Context ctx = Context::cpu(1);
  TensorFactory make(25);
  for (DType t : kTypes) {
    for (const int64_t q : {1, 2}) {
      const AttentionShape full{13, 2, 4 / q, q, 8};
      const AttentionShape part{13, 2, 2 / q, q, 8};
      const int64_t first_group = 2 / q, width = (q + 2) * full.d;
      SCOPED_TRACE(describe(full));
      const ops::DropoutMask mask{.probability = 0.25f, .key = 99, .sample_offset = 3, .row_offset = 0};
      ops::DropoutMask shifted = mask;
      shifted.row_offset = 2;
      Tensor qkv = make.random(t, {full.s, full.b, full.groups, width});
      Tensor dout = make.random(t, {full.s, full.b, full.heads(), full.d});
      Tensor qkv_part = make.poisoned(t, {part.s, part.b, part.groups, width});
      Tensor dout_part = make.poisoned(t, {part.s, part.b, part.heads(), part.d});
      for (int64_t row = 0; row < full.s * full.b; ++row) {
        for (int64_t e = 0; e < part.groups * width; ++e) {
          TensorFactory::set(qkv_part, row * part.groups * width + e, at(qkv, (row * full.groups + first_group) * width + e));
        }
        for (int64_t e = 0; e < part.heads() * part.d; ++e) {
          TensorFactory::set(dout_part, row * part.heads() * part.d + e, at(dout, (row * full.heads() + 2) * full.d + e));
        }
      }
      Tensor out = make.poisoned(t, {full.s, full.b, full.heads(), full.d});
      Tensor lse = make.poisoned(DType::kFloat32, {full.b, full.heads(), full.s});
      Tensor dqkv = make.poisoned(t, {full.s, full.b, full.groups, width});
      ops::attention_forward(ctx, out, lse, qkv, 0.3f, mask);
      ops::attention_backward(ctx, dqkv, dout, qkv, out, lse, 0.3f, mask);
      Tensor out_part = make.poisoned(t, {part.s, part.b, part.heads(), part.d});
      Tensor lse_part = make.poisoned(DType::kFloat32, {part.b, part.heads(), part.s});
      Tensor dqkv_part = make.poisoned(t, {part.s, part.b, part.groups, width});
      ops::attention_forward(ctx, out_part, lse_part, qkv_part, 0.3f, shifted);
      ops::attention_backward(ctx, dqkv_part, dout_part, qkv_part, out_part, lse_part, 0.3f, shifted);
      int64_t differences = 0;
      for (int64_t row = 0; row < full.s * full.b; ++row) {
        for (int64_t e = 0; e < part.heads() * part.d; ++e) {
          differences += at(out_part, row * part.heads() * part.d + e) != at(out, (row * full.heads() + 2) * full.d + e);
        }
        for (int64_t e = 0; e < part.groups * width; ++e) {
          differences +=
              at(dqkv_part, row * part.groups * width + e) != at(dqkv, (row * full.groups + first_group) * width + e);
        }
      }
      for (int64_t batch = 0; batch < full.b; ++batch) {
        for (int64_t e = 0; e < part.heads() * part.s; ++e) {
          differences += lse_part.data_as<float>()[batch * part.heads() * part.s + e] !=
                         lse.data_as<float>()[(batch * full.heads() + 2) * full.s + e];
        }
      }
      EXPECT_EQ(differences, 0);
      // And the offset matters: the same part with row_offset 0 draws the mask of heads [0, 2).
      Tensor out_unshifted = make.poisoned(t, {part.s, part.b, part.heads(), part.d});
      ops::attention_forward(ctx, out_unshifted, lse_part, qkv_part, 0.3f, mask);
      EXPECT_GT(relative_error(out_unshifted, values(out_part)), 1e-2);
    }
  }
}

}  // namespace
}  // namespace gpt
