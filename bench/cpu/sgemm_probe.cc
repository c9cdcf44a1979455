// OpenBLAS SGEMM rate on this machine, for the CPU step benchmark's "model FLOP/s vs SGEMM"
// column: cblas_sgemm (row-major, FP32) on a few shapes, `--threads` BLAS threads, median of
// `--repeats` timed calls after one warm-up. Prints one JSON line per shape and one with the best.
//
//   build-cpu/bin/sgemm_probe --threads 2 --repeats 9
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Shape {
  const char* name;
  int m, n, k;
  bool transpose_b;
};

double median_seconds(const Shape& s, int repeats) {
  std::vector<float> a(static_cast<size_t>(s.m) * s.k, 0.5f), b(static_cast<size_t>(s.k) * s.n, 0.25f),
      c(static_cast<size_t>(s.m) * s.n, 0.0f);
  std::vector<double> times;
  for (int r = 0; r <= repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, s.transpose_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f,
                a.data(), s.k, b.data(), s.transpose_b ? s.k : s.n, 0.0f, c.data(), s.n);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) times.push_back(seconds);  // the first call warms up
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--repeats N]\n", argv[0]);
      return 2;
    }
  }
  openblas_set_num_threads(threads);
  // The demo model's largest GEMM (LM head, 512 tokens x hidden 128 x vocabulary 50,304), an MLP
  // GEMM, and a square one (OpenBLAS's best case).
  const Shape shapes[] = {{"lm_head", 512, 50304, 128, true}, {"mlp", 512, 512, 128, false},
                          {"square_1024", 1024, 1024, 1024, false}};
  double best = 0.0;
  for (const Shape& s : shapes) {
    const double seconds = median_seconds(s, repeats);
    const double gflops = 2.0 * s.m * s.n * s.k / seconds / 1e9;
    best = std::max(best, gflops);
    std::printf("{\"shape\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"ms\": %.3f, \"gflops\": %.1f}\n", s.name, s.m,
                s.n, s.k, seconds * 1e3, gflops);
  }
  std::printf("{\"shape\": \"best\", \"gflops\": %.1f, \"threads\": %d}\n", best, threads);
  return 0;
}
