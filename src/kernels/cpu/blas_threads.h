// OpenBLAS's thread count, which is process-wide: set when an op asks for a different one than
// the last op did (matmul: the context's threads; attention: 1 per task, tasks over the pool).
#pragma once

namespace gpt::cpu {
void use_blas_threads(int threads);
}  // namespace gpt::cpu
