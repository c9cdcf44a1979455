// What the whole-sequence attention (attention.cc) and the context-parallel attention block
// (attention_block.cc) share on the CPU: the dropout probability check, each thread's FP32
// scratch, the task loop (one (batch, key/value group) per task, its K and V gathered once, then
// each of its query heads in order) and one head's backward through BLAS.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dropout_mask.h"

namespace gpt::cpu {

// Fatal unless 0 <= probability < 1.
void check_attention_dropout(const ops::DropoutMask& dropout);

// FP32 scratch of the calling thread, grown once to the largest size asked for (the pool's threads
// each have their own; Context::cpu_scratch is the caller's alone). Valid until the thread's next
// call.
float* thread_scratch(size_t count);

// For the tasks [first, last) of a parallel_for over b * groups: start(batch, group) once per task,
// head(batch, group, member, head) for each of the group's q query heads in order (head = group * q
// + member), then finish(batch, group).
struct NoTaskFinish {
  void operator()(int64_t, int64_t) const {}
};
template <typename Start, typename Head, typename Finish = NoTaskFinish>
void for_each_group_task(int64_t first, int64_t last, int64_t groups, int64_t q, Start&& start, Head&& head,
                         Finish&& finish = Finish{}) {
  for (int64_t task = first; task < last; ++task) {
    const int64_t batch = task / groups, group = task % groups;
    start(batch, group);
    for (int64_t member = 0; member < q; ++member) head(batch, group, member, group * q + member);
    finish(batch, group);
  }
}

// One query head's gradients from its probabilities, with M = keep / (1 - probability) (all ones
// when keep is null: no dropout), summed over the group's heads through beta (0 for its first head,
// 1 after):
//   dV = beta dV + (P M)^T dO;  dP = (dO V^T) M;  dS = P (dP - D);  dQ = scale dS K;
//   dK = beta dK + scale dS^T Q   (products elementwise except the matmuls).
// q, grad_o, dq [m, d]; k, v, dk, dv [n, d]; row_dot D [m]; p, dp, keep [m, n] (dp is scratch).
void head_backward(int m, int n, int d, float scale, float beta, const float* q, const float* k, const float* v,
                   const float* grad_o, const float* row_dot, const float* p, const float* keep, float* dp, float* dq,
                   float* dk, float* dv);

}  // namespace gpt::cpu
