#include "kernels/cpu/attention_tasks.h"

#include <cblas.h>

#include <vector>

#include "core/check.h"

namespace gpt::cpu {

void check_attention_dropout(const ops::DropoutMask& dropout) {
  GPT_CHECK(dropout.probability >= 0.0f && dropout.probability < 1.0f)
      << "attention dropout probability must be in [0, 1), got " << dropout.probability;
}

float* thread_scratch(size_t count) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < count) scratch.resize(count);
  return scratch.data();
}

void head_backward(int m, int n, int d, float scale, float beta, const float* q, const float* k, const float* v,
                   const float* grad_o, const float* row_dot, const float* p, const float* keep, float* dp, float* dq,
                   float* dk, float* dv) {
  const int64_t scores = static_cast<int64_t>(m) * n;
  if (keep != nullptr) {
    for (int64_t e = 0; e < scores; ++e) dp[e] = p[e] * keep[e];  // the dropped P, briefly
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, d, m, 1.0f, keep != nullptr ? dp : p, n, grad_o, d, beta,
              dv, d);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, d, 1.0f, grad_o, d, v, d, 0.0f, dp, n);
  if (keep != nullptr) {
    for (int64_t e = 0; e < scores; ++e) dp[e] *= keep[e];
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) dp[i * n + j] = p[i * n + j] * (dp[i * n + j] - row_dot[i]);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, n, scale, dp, n, k, d, 0.0f, dq, d);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, d, m, scale, dp, n, q, d, beta, dk, d);
}

}  // namespace gpt::cpu
