// A naive double-precision reference of the mixture-of-experts ops (kernels/op_list.inc, section
// "Mixture of experts"), written from the contracts' words with plain loops and sharing no code
// with src/kernels/cpu/moe.cc. One router row at a time: logits [E] of one token.
#pragma once

#include <cstdint>
#include <vector>

#include "unit/kernels/reference.h"

namespace gpt::reference::moe {

struct Router {
  int64_t k = 1;
  bool sigmoid = false;
  bool pre_softmax = false;
  int64_t groups = 0, group_topk = 0;  // group-limited selection when both > 0
  double scaling = 1.0;
};

// The k largest of v among `allowed` (all when empty), by repeated argmax: each pass takes the
// first (lowest index) of the largest remaining values.
std::vector<int64_t> top_k(const Vec& v, int64_t k, const std::vector<bool>& allowed = {});

Vec softmax(const Vec& v);
double sigmoid(double x);
double logsumexp(const Vec& v);

// The selection of one token: indices (descending selection score, ties to the lower expert).
// bias: empty or [E] (sigmoid only).
std::vector<int64_t> route_indices(const Vec& logits, const Vec& bias, const Router& r);
// The combine weights of one token for a given selection, as a function of its logits (the
// selection held fixed, which is what the gradient differentiates).
Vec route_weights(const Vec& logits, const std::vector<int64_t>& indices, const Router& r);

// The load-balancing losses' scores of one token: softmax over all E, or sigmoid normalised by its
// sum over E (+ 1e-20).
Vec aux_scores(const Vec& logits, bool sigmoid);

// Megatron's moe_utils.sinkhorn of logits [rows, E] (row-major), as it is written there: the cost
// exp(logits), the row and column scalings d0 [rows], d1 [E] alternated until the mean change of d1
// is at most 1e-4; returns d1_e cost_te d0_t [rows, E].
Vec sinkhorn(const Vec& logits, int64_t rows, int64_t experts);

// y [T, h] = sum_j weights[t, j] rows[destination[t, j]] (weights empty: 1; negative destinations
// skipped).
Vec combine(const Vec& rows, const std::vector<int32_t>& destination, const Vec& weights, int64_t tokens, int64_t k,
            int64_t h);

}  // namespace gpt::reference::moe
