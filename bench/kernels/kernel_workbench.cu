// Kernel workbench (the idea of llm.c's dev/cuda): times every memory-bound op of kernels/ops.h
// through the public ops:: API at GPT-2 124M and GPT 1.3B shapes (BF16 activations, FP32 optimizer
// state), and reports the bandwidth each achieves against the device's copy bandwidth, measured
// first in the same run.
//
//   kernel_workbench [--output FILE] [--runs N] [--warmup N] [--model 124m|1.3b|all] [--only TEXT]
//
// Prints a markdown table to stdout (and to FILE), one row per (model, op):
//   | model | op | shape | time (us) | min bytes (MB) | GB/s | % of copy |
// time: median of --runs (default 25, at least 20) calls after --warmup (default 3), each between
// two CUDA events on the context's stream. min bytes: every input read once and every output
// written once (the formula of each op is at its benchmark below; B = 2 bytes per bf16 element).
// GB/s = min bytes / time. % of copy: of the bandwidth of a 1 GiB cudaMemcpyAsync device to device,
// counted as bytes read + written. Inputs are uniform random, never zeros; every op's working set
// but the small ones (biases, norms) exceeds the 50 MB L2 at these shapes, so nothing is rotated.
// Without a visible GPU it prints "no GPU: skipped" and exits 0 (ctest label gpu).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"
#include "core/cuda_runtime.h"
#include "core/memory.h"
#include "kernels/ops.h"

namespace gpt {
namespace {

struct Options {
  std::string output;
  int runs = 25;
  int warmup = 3;
  std::string model = "all";
  std::string only;
};

struct ModelShape {
  const char* name;
  const char* flag;  // --model value
  int64_t batch, seq, hidden, ffn, layers, vocab, vocab_valid;
};
constexpr ModelShape kModels[] = {
    {"gpt2-124m", "124m", 16, 1024, 768, 3072, 12, 50304, 50257},
    {"gpt-1.3b", "1.3b", 4, 2048, 2048, 8192, 24, 50304, 50257},
};
constexpr int64_t kBf16 = 2;  // B: bytes per activation element
constexpr int64_t kF32 = 4;

// ---- Random device data ---------------------------------------------------------------------

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Uniform in [low, high), from a counter-based hash of (seed, index).
template <typename T>
__global__ void fill_uniform_kernel(T* data, int64_t n, uint64_t seed, float low, float high) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float unit = static_cast<float>(splitmix64(seed * 0x100000001b3ull + static_cast<uint64_t>(i)) >> 40) *
                       (1.0f / 16777216.0f);
    data[i] = from_float<T>(low + (high - low) * unit);
  }
}

// Device tensors of one benchmark group, freed together.
class Pool {
 public:
  explicit Pool(Context& ctx) : ctx_(ctx) {}
  Tensor uniform(DType dtype, Shape shape, float low, float high) {
    buffers_.emplace_back(Device::kCuda, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
    Tensor t = buffers_.back().as_tensor(dtype, shape);
    const int64_t n = t.numel();
    const unsigned int blocks = static_cast<unsigned int>(std::min<int64_t>((n + 255) / 256, 65535));
    const uint64_t seed = ++seed_;
    if (dtype == DType::kFloat32) {
      fill_uniform_kernel<<<blocks, 256, 0, ctx_.cuda().stream()>>>(t.data_as<float>(), n, seed, low, high);
    } else {
      fill_uniform_kernel<<<blocks, 256, 0, ctx_.cuda().stream()>>>(static_cast<__nv_bfloat16*>(t.data()), n, seed,
                                                                    low, high);
    }
    GPT_CUDA_CHECK_LAUNCH();
    return t;
  }
  Tensor ints(const std::vector<int32_t>& values) {
    buffers_.emplace_back(Device::kCuda, values.size() * sizeof(int32_t));
    Tensor t = buffers_.back().as_tensor(DType::kInt32, {static_cast<int64_t>(values.size())});
    copy_bytes(Device::kCuda, t.data(), Device::kCpu, values.data(), values.size() * sizeof(int32_t));
    return t;
  }

 private:
  Context& ctx_;
  std::vector<Buffer> buffers_;
  uint64_t seed_ = 0;
};

std::vector<int32_t> random_ids(int64_t n, int64_t high, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> uniform(0, static_cast<int32_t>(high - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = uniform(rng);
  return ids;
}
int64_t distinct(const std::vector<int32_t>& ids, int64_t high) {
  std::vector<bool> seen(static_cast<size_t>(high), false);
  int64_t count = 0;
  for (int32_t id : ids) {
    if (!seen[id]) count += 1;
    seen[id] = true;
  }
  return count;
}

// ---- Timing ----------------------------------------------------------------------------------------

// Median device time of fn() in microseconds: warm-up calls, then each timed call between two
// events on the context's stream (the host launches ahead, so launch gaps are hidden when the
// kernels are long enough to matter).
double median_us(Context& ctx, const Options& o, const std::function<void()>& fn) {
  cudaStream_t stream = ctx.cuda().stream();
  for (int i = 0; i < o.warmup; ++i) fn();
  std::vector<cudaEvent_t> events(2 * static_cast<size_t>(o.runs));
  for (cudaEvent_t& e : events) GPT_CUDA_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < o.runs; ++r) {
    GPT_CUDA_CHECK(cudaEventRecord(events[2 * r], stream));
    fn();
    GPT_CUDA_CHECK(cudaEventRecord(events[2 * r + 1], stream));
  }
  GPT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> times;
  for (int r = 0; r < o.runs; ++r) {
    float ms = 0.0f;
    GPT_CUDA_CHECK(cudaEventElapsedTime(&ms, events[2 * r], events[2 * r + 1]));
    times.push_back(1000.0 * ms);
  }
  for (cudaEvent_t& e : events) GPT_CUDA_CHECK(cudaEventDestroy(e));
  std::sort(times.begin(), times.end());
  const size_t middle = times.size() / 2;
  return times.size() % 2 ? times[middle] : 0.5 * (times[middle - 1] + times[middle]);
}

struct Row {
  std::string model, op, shape;
  double us, bytes;
};

class Bench {
 public:
  Bench(Context& ctx, const Options& o, double copy_gbps) : ctx_(ctx), o_(o), copy_gbps_(copy_gbps) {}

  // Times fn unless --only filters the op out; `bytes` is the op's minimum traffic.
  void run(const ModelShape& m, const std::string& op, const std::string& shape, double bytes,
           const std::function<void()>& fn) {
    if (!o_.only.empty() && op.find(o_.only) == std::string::npos) return;
    const double us = median_us(ctx_, o_, fn);
    rows_.push_back({m.name, op, shape, us, bytes});
    std::cerr << m.name << " " << op << ": " << us << " us\n";
  }
  // Whether --only keeps any of these ops (groups skip their allocations otherwise).
  bool wants(std::initializer_list<const char*> ops) const {
    if (o_.only.empty()) return true;
    for (const char* op : ops) {
      if (std::string(op).find(o_.only) != std::string::npos) return true;
    }
    return false;
  }

  std::string table(const std::string& device, double copy_size) const {
    std::ostringstream out;
    char line[512];
    out << "# Kernel workbench\n\n";
    out << "device: " << device << "; median of " << o_.runs << " timed calls after " << o_.warmup
        << " warm-up calls; BF16 activations, FP32 optimizer state\n\n";
    std::snprintf(line, sizeof(line),
                  "copy bandwidth (cudaMemcpyAsync device to device, %.0f MiB, bytes read + written): %.1f GB/s\n\n",
                  copy_size / (1 << 20), copy_gbps_);
    out << line;
    out << "| model | op | shape | time (us) | min bytes (MB) | GB/s | % of copy |\n";
    out << "|---|---|---|---:|---:|---:|---:|\n";
    for (const Row& r : rows_) {
      const double gbps = r.bytes / (r.us * 1e3);
      std::snprintf(line, sizeof(line), "| %s | %s | %s | %.1f | %.1f | %.1f | %.1f |\n", r.model.c_str(),
                    r.op.c_str(), r.shape.c_str(), r.us, r.bytes / 1e6, gbps, 100.0 * gbps / copy_gbps_);
      out << line;
    }
    return out.str();
  }

 private:
  Context& ctx_;
  const Options& o_;
  double copy_gbps_;
  std::vector<Row> rows_;
};

std::string dims(std::initializer_list<int64_t> d) {
  std::string s = "[";
  for (int64_t v : d) s += (s.size() > 1 ? ", " : "") + std::to_string(v);
  return s + "]";
}

// ---- The benchmarks --------------------------------------------------------------------------------

void norms_and_activations(Context& ctx, Bench& bench, const ModelShape& m) {
  const int64_t R = m.batch * m.seq, H = m.hidden, F = m.ffn;
  const double rh = static_cast<double>(R * H), rf = static_cast<double>(R * F);
  Pool pool(ctx);
  const Tensor x = pool.uniform(DType::kBFloat16, {R, H}, -2.0f, 2.0f);
  const Tensor delta = pool.uniform(DType::kBFloat16, {R, H}, -1.0f, 1.0f);
  const Tensor delta_bias = pool.uniform(DType::kBFloat16, {H}, -0.1f, 0.1f);
  const Tensor weight = pool.uniform(DType::kBFloat16, {H}, 0.5f, 1.5f);
  const Tensor bias = pool.uniform(DType::kBFloat16, {H}, -0.1f, 0.1f);
  const Tensor y = pool.uniform(DType::kBFloat16, {R, H}, -1.0f, 1.0f);
  const Tensor residual = pool.uniform(DType::kBFloat16, {R, H}, -1.0f, 1.0f);
  const Tensor mean = pool.uniform(DType::kFloat32, {R}, -0.1f, 0.1f);
  const Tensor rstd = pool.uniform(DType::kFloat32, {R}, 0.5f, 1.5f);
  const std::string rows_h = dims({R, H});

  // x, y: R*H*B each; weight, bias: H*B each; mean, rstd: R*4 each.
  bench.run(m, "layernorm_forward", rows_h, 2 * rh * kBf16 + 2.0 * H * kBf16 + 2.0 * R * kF32,
            [&] { ops::layernorm_forward(ctx, y, mean, rstd, x, weight, bias, 1e-5f, 0.0f); });
  // x, delta in; residual, y out: 4*R*H*B; delta_bias, weight, bias: 3*H*B; mean, rstd: 2*R*4.
  bench.run(m, "residual_layernorm_forward", rows_h, 4 * rh * kBf16 + 3.0 * H * kBf16 + 2.0 * R * kF32, [&] {
    ops::residual_layernorm_forward(ctx, residual, y, mean, rstd, x, delta, delta_bias, weight, bias, 1e-5f, 0.0f);
  });
  {
    const Tensor dy = pool.uniform(DType::kBFloat16, {R, H}, -1.0f, 1.0f);
    const Tensor dx = pool.uniform(DType::kBFloat16, {R, H}, -1.0f, 1.0f);
    const Tensor dweight = pool.uniform(DType::kFloat32, {H}, -1.0f, 1.0f);
    const Tensor dbias = pool.uniform(DType::kFloat32, {H}, -1.0f, 1.0f);
    // dy, x in and dx out (the model does not accumulate): 3*R*H*B; mean, rstd: 2*R*4; weight:
    // H*B; dweight, dbias read and written: 4*H*4.
    bench.run(m, "layernorm_backward", rows_h, 3 * rh * kBf16 + 2.0 * R * kF32 + H * kBf16 + 4.0 * H * kF32,
              [&] { ops::layernorm_backward(ctx, dx, dweight, dbias, dy, x, mean, rstd, weight, false, 0.0f); });
    // x, delta in, out: 3*R*H*B; bias: H*B.
    bench.run(m, "residual_add", rows_h, 3 * rh * kBf16 + H * kBf16,
              [&] { ops::residual_add(ctx, y, x, delta, delta_bias); });
  }
  if (bench.wants({"gelu_forward", "gelu_backward", "bias_grad"})) {
    const Tensor pre = pool.uniform(DType::kBFloat16, {R, F}, -3.0f, 3.0f);
    const Tensor act = pool.uniform(DType::kBFloat16, {R, F}, -1.0f, 1.0f);
    const Tensor dbias = pool.uniform(DType::kFloat32, {F}, -1.0f, 1.0f);
    const std::string rows_f = dims({R, F});
    // x in, y out: 2*R*F*B.
    bench.run(m, "gelu_forward", rows_f, 2 * rf * kBf16, [&] { ops::gelu_forward(ctx, act, pre); });
    // dy, x in, dx out (dx over dy, as the model calls it): 3*R*F*B.
    bench.run(m, "gelu_backward", rows_f, 3 * rf * kBf16, [&] { ops::gelu_backward(ctx, act, act, pre); });
    // dy in: R*F*B; dbias read and written: 2*F*4 (the MLP's first bias, the largest).
    bench.run(m, "bias_grad", rows_f, rf * kBf16 + 2.0 * F * kF32, [&] { ops::bias_grad(ctx, dbias, act); });
  }
}

void embeddings(Context& ctx, Bench& bench, const ModelShape& m) {
  const int64_t R = m.batch * m.seq, H = m.hidden, V = m.vocab;
  const double rh = static_cast<double>(R * H);
  Pool pool(ctx);
  const std::vector<int32_t> ids = random_ids(R, m.vocab_valid, 11);
  const double touched_rows = static_cast<double>(distinct(ids, V));
  const Tensor tokens = pool.ints(ids);
  const Tensor table = pool.uniform(DType::kBFloat16, {V, H}, -0.1f, 0.1f);
  const Tensor out = pool.uniform(DType::kBFloat16, {R, H}, -1.0f, 1.0f);
  const Tensor dtable = pool.uniform(DType::kFloat32, {V, H}, -0.1f, 0.1f);
  const Tensor positions = pool.uniform(DType::kBFloat16, {m.seq, H}, -0.1f, 0.1f);
  const Tensor dpositions = pool.uniform(DType::kFloat32, {m.seq, H}, -0.1f, 0.1f);
  const std::string shape = dims({R, H});
  // tokens: R*4; the table rows of distinct tokens: D*H*B; out: R*H*B.
  bench.run(m, "embedding_forward", shape, R * 4.0 + touched_rows * H * kBf16 + rh * kBf16,
            [&] { ops::embedding_forward(ctx, out, tokens, table, 0); });
  // dout: R*H*B; tokens: R*4; dtable rows of distinct tokens read and written: 2*D*H*4.
  bench.run(m, "embedding_backward", shape, rh * kBf16 + R * 4.0 + 2.0 * touched_rows * H * kF32,
            [&] { ops::embedding_backward(ctx, dtable, out, tokens, 0); });
  // out read and written: 2*R*H*B; positions: S*H*B.
  bench.run(m, "position_embedding_forward", shape, 2 * rh * kBf16 + static_cast<double>(m.seq) * H * kBf16,
            [&] { ops::position_embedding_forward(ctx, out, positions, m.batch, 0); });
  // dout: R*H*B; dpositions read and written: 2*S*H*4.
  bench.run(m, "position_embedding_backward", shape, rh * kBf16 + 2.0 * m.seq * H * kF32,
            [&] { ops::position_embedding_backward(ctx, dpositions, out, m.batch, 0); });
}

void cross_entropy(Context& ctx, Bench& bench, const ModelShape& m) {
  if (!bench.wants({"cross_entropy_stats", "cross_entropy_backward"})) return;
  const int64_t R = m.batch * m.seq, V = m.vocab;
  const double rv = static_cast<double>(R * V);
  Pool pool(ctx);
  const Tensor logits = pool.uniform(DType::kBFloat16, {R, V}, -4.0f, 4.0f);
  const Tensor targets = pool.ints(random_ids(R, m.vocab_valid, 12));
  const Tensor row_max = pool.uniform(DType::kFloat32, {R}, 0.0f, 1.0f);
  const Tensor row_sumexp = pool.uniform(DType::kFloat32, {R}, 1.0f, 2.0f);
  const Tensor target_logit = pool.uniform(DType::kFloat32, {R}, 0.0f, 1.0f);
  const std::string shape = dims({R, V});
  // logits: R*V*B (the padded columns are not read, counted anyway); targets: R*4; 3 stats: 3*R*4.
  bench.run(m, "cross_entropy_stats", shape, rv * kBf16 + R * 4.0 + 3.0 * R * kF32, [&] {
    ops::cross_entropy_stats(ctx, row_max, row_sumexp, target_logit, logits, targets, 0, m.vocab_valid);
  });
  ops::cross_entropy_stats(ctx, row_max, row_sumexp, target_logit, logits, targets, 0, m.vocab_valid);
  // logits in, dlogits out (over the logits, as the model calls it): 2*R*V*B; targets, max, sum: 3*R*4.
  bench.run(m, "cross_entropy_backward", shape, 2 * rv * kBf16 + 3.0 * R * 4, [&] {
    ops::cross_entropy_backward(ctx, logits, logits, targets, row_max, row_sumexp, 1.0f / R, 0, m.vocab_valid);
  });
}

// The model's parameters as the optimizer sees them: one segment per tensor, weight decay on
// matrices (embeddings included), none on biases and norms.
std::vector<ops::AdamWSegment> parameter_segments(const ModelShape& m) {
  std::vector<ops::AdamWSegment> segments;
  int64_t offset = 0;
  auto add = [&](int64_t length, bool matrix) {
    segments.push_back({.offset = offset, .length = length, .weight_decay = matrix});
    offset += length;
  };
  const int64_t h = m.hidden;
  add(m.vocab * h, true);  // word embeddings
  add(m.seq * h, true);    // positions
  for (int64_t layer = 0; layer < m.layers; ++layer) {
    add(h, false), add(h, false);                 // LN1
    add(3 * h * h, true), add(3 * h, false);      // QKV
    add(h * h, true), add(h, false);              // attention projection
    add(h, false), add(h, false);                 // LN2
    add(m.ffn * h, true), add(m.ffn, false);      // MLP up
    add(h * m.ffn, true), add(h, false);          // MLP down
  }
  add(h, false), add(h, false);  // final LN
  return segments;
}

void optimizer(Context& ctx, Bench& bench, const ModelShape& m) {
  if (!bench.wants({"adamw_update_segments", "cast_fp32_to_bf16", "sum_of_squares"})) return;
  const std::vector<ops::AdamWSegment> segments = parameter_segments(m);
  const int64_t P = segments.back().offset + segments.back().length;
  const double p = static_cast<double>(P);
  Pool pool(ctx);
  const Tensor master = pool.uniform(DType::kFloat32, {P}, -0.1f, 0.1f);
  const Tensor grad = pool.uniform(DType::kFloat32, {P}, -0.01f, 0.01f);
  const Tensor exp_avg = pool.uniform(DType::kFloat32, {P}, -0.01f, 0.01f);
  const Tensor exp_avg_sq = pool.uniform(DType::kFloat32, {P}, 1e-6f, 1e-4f);
  const Tensor params = pool.uniform(DType::kBFloat16, {P}, -0.1f, 0.1f);
  const Tensor norm = pool.uniform(DType::kFloat32, {1}, 0.0f, 1.0f);
  const std::string shape = dims({P}) + ", " + std::to_string(segments.size()) + " tensors";
  const ops::AdamWStep step{.learning_rate = 1e-4f, .weight_decay = 0.1f, .step = 10, .grad_scale = 0.9f};
  // master, grad, exp_avg, exp_avg_sq in (16 B per parameter); master, exp_avg, exp_avg_sq and the
  // bf16 parameter out (14 B): 30*P.
  bench.run(m, "adamw_update_segments", shape, 30 * p, [&] {
    ops::adamw_update_segments(ctx, step, master, grad, exp_avg, exp_avg_sq, params, segments);
  });
  // fp32 in, bf16 out: 6*P.
  bench.run(m, "cast_fp32_to_bf16", dims({P}), 6 * p, [&] { ops::cast(ctx, params, master); });
  // fp32 in: 4*P (the scalar out is negligible).
  bench.run(m, "sum_of_squares", dims({P}), 4 * p, [&] { ops::sum_of_squares(ctx, norm, grad); });
}

// Bandwidth of a large device-to-device copy: bytes read + written per second, in GB/s.
double copy_bandwidth(Context& ctx, const Options& o, size_t bytes) {
  Buffer source(Device::kCuda, bytes), target(Device::kCuda, bytes);
  GPT_CUDA_CHECK(cudaMemsetAsync(source.data(), 1, bytes, ctx.cuda().stream()));
  const double us = median_us(ctx, o, [&] {
    GPT_CUDA_CHECK(cudaMemcpyAsync(target.data(), source.data(), bytes, cudaMemcpyDeviceToDevice, ctx.cuda().stream()));
  });
  return 2.0 * static_cast<double>(bytes) / (us * 1e3);
}

int usage(const char* error) {
  if (error) std::cerr << "kernel_workbench: " << error << "\n";
  std::cerr << "usage: kernel_workbench [--output FILE] [--runs N (>= 20)] [--warmup N] [--model 124m|1.3b|all] "
               "[--only TEXT]\n";
  return error ? 2 : 0;
}

int main_with(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return usage(nullptr);
    if (i + 1 >= argc) return usage(("missing value after " + arg).c_str());
    const std::string value = argv[++i];
    if (arg == "--output") o.output = value;
    else if (arg == "--runs") o.runs = std::atoi(value.c_str());
    else if (arg == "--warmup") o.warmup = std::atoi(value.c_str());
    else if (arg == "--model") o.model = value;
    else if (arg == "--only") o.only = value;
    else return usage(("unknown argument " + arg).c_str());
  }
  if (o.runs < 20) return usage("--runs must be at least 20 (the median of fewer is noisy)");
  if (o.warmup < 0) return usage("--warmup must be >= 0");
  if (o.model != "all" && o.model != "124m" && o.model != "1.3b") return usage("--model is 124m, 1.3b or all");
  if (cuda::device_count() == 0) {
    std::cout << "kernel_workbench: no GPU: skipped\n";
    return 0;
  }
  Context ctx = Context::gpu(0);
  cudaDeviceProp properties;
  GPT_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  int runtime = 0;
  GPT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::ostringstream device;
  device << properties.name << " (" << properties.multiProcessorCount << " SMs, "
         << properties.totalGlobalMem / (1 << 30) << " GiB), CUDA runtime " << runtime / 1000 << "."
         << (runtime % 1000) / 10;
  constexpr size_t kCopyBytes = size_t{1} << 30;
  const double copy_gbps = copy_bandwidth(ctx, o, kCopyBytes);
  std::cerr << "copy bandwidth: " << copy_gbps << " GB/s\n";
  Bench bench(ctx, o, copy_gbps);
  for (const ModelShape& m : kModels) {
    if (o.model != "all" && o.model != m.flag) continue;
    norms_and_activations(ctx, bench, m);
    embeddings(ctx, bench, m);
    cross_entropy(ctx, bench, m);
    optimizer(ctx, bench, m);
  }
  ctx.synchronize();
  const std::string table = bench.table(device.str(), static_cast<double>(kCopyBytes));
  std::cout << table;
  if (!o.output.empty()) {
    std::ofstream file(o.output);
    file << table;
    if (!file) {
      std::cerr << "kernel_workbench: cannot write " << o.output << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) { return gpt::main_with(argc, argv); }
