// perf_calibrate: measures the machine it runs on and writes a cluster file for perf_model
// (docs/PERFORMANCE_MODEL.md, "Calibration from measurements"). Under mpirun with one rank per
// compute slot (per GPU; per core on the CPU backend), every rank runs the same microbenchmarks at
// once, as training ranks share the node:
//   - GEMMs (the op the trainer runs, kernels/ops.h matmul) over the shapes of the given model's
//     layers at TP 1, 2, 4, ... and square ones, in the training dtype;
//   - the attention core forward and backward (the trainer's attention ops) on the model's shape;
//   - the memory-bound ops (a copy, LayerNorm, GELU, AdamW) on tensors past the caches;
//   - all-reduce, all-gather and reduce-scatter on the trainer's MPI communicators (NCCL is not
//     used here), on groups of 2, 4, ... ranks and the whole world, at sizes from 4 KiB.
// Rank 0 writes the cluster file (--out) and every sample (--json).
//
//   mpirun -np 2 build-cpu/bin/perf_calibrate --out cpu-measured.conf --json cpu-measured.json [--reduced]
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/context.h"
#include "core/host_staging.h"
#include "core/memory.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/comm/mpi_runtime.h"
#include "perf_calibrate_trainer.h"
#include "perf_model/calibration.h"
#include "perf_model/cluster.h"
#include "train/args/numeric_flags.h"

namespace gpt {
namespace {

struct Options {
  std::string out, json, name = "measured", device = "cpu";
  bool reduced = false, bf16 = false, no_trainer_probes = false;
  double peak_tflops = 0, memory_gib = 0;
  int repeats = 5;
  // The model whose GEMM shapes are timed (defaults: docs/SCALING.md's CPU sweep model).
  int64_t hidden = 128, ffn = 0, heads = 4, seq = 64, micro_batch = 2, vocab = 1024, max_tp = 8;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The slowest rank's value: every rank times the same work at once.
double max_over_ranks(double value) {
  double result = value;
  MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return result;
}

// Seconds per call of `work`: the median of `repeats` samples, each a loop of enough calls to last
// >= 20 ms, so that a moment the rank is descheduled (other processes on a shared machine) does not
// decide a sample of a sub-millisecond op. Every rank calls it at the same point (the benchmarks
// run on all ranks at once, collectives included): the loop length is agreed over MPI, so a
// collective's loop has the same count on every rank.
template <typename Work>
double median_seconds(Context& ctx, int repeats, Work&& work) {
  work();  // warm-up: first-touch pages, BLAS/cuBLAS set-up
  ctx.synchronize();
  const auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const auto first = std::chrono::steady_clock::now();
  work();
  ctx.synchronize();
  const double once = std::max(seconds_since(first), 1e-9);
  int calls = static_cast<int>(std::clamp(std::ceil(0.02 / once), 1.0, 10000.0));
  MPI_Allreduce(MPI_IN_PLACE, &calls, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) work();
    ctx.synchronize();
    times.push_back(seconds_since(start) / calls);
  }
  return median_of(times);
}

// A tensor of `dtype` filled with values in [-1, 1) (zeros would flatter a GPU's clocks).
struct Filled {
  Buffer buffer;
  Tensor tensor;
};
Filled random_tensor(Context& ctx, DType dtype, Shape shape, int64_t elements, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> host(static_cast<size_t>(elements));
  for (float& x : host) x = uniform(generator);
  Buffer staging(ctx.device(), host.size() * sizeof(float));
  copy_bytes(ctx.device(), staging.data(), Device::kCpu, host.data(), host.size() * sizeof(float));
  Filled f{Buffer(ctx.device(), static_cast<size_t>(elements) * dtype_size(dtype)), {}};
  f.tensor = f.buffer.as_tensor(dtype, shape);
  ops::cast(ctx, f.tensor, staging.as_tensor(DType::kFloat32, shape));
  ctx.synchronize();
  return f;
}

perf::GemmSample time_gemm(Context& ctx, const Options& o, DType dtype, const std::string& what, int64_t m, int64_t n,
                           int64_t k) {
  Filled a = random_tensor(ctx, dtype, {m, k}, m * k, 1);
  Filled b = random_tensor(ctx, dtype, {k, n}, k * n, 2);
  Buffer out_buffer(ctx.device(), static_cast<size_t>(m * n) * dtype_size(dtype));
  const Tensor out = out_buffer.as_tensor(dtype, {m, n});
  const double seconds = median_seconds(ctx, o.repeats, [&] { ops::matmul(ctx, out, a.tensor, b.tensor); });
  return {what, m, n, k, max_over_ranks(seconds)};
}

std::vector<perf::GemmSample> time_gemms(Context& ctx, const Options& o, DType dtype) {
  std::vector<perf::GemmSample> samples;
  const int64_t rows = o.seq * o.micro_batch, h = o.hidden, ffn = o.ffn > 0 ? o.ffn : 4 * o.hidden;
  for (int64_t tp = 1; tp <= o.max_tp && h % tp == 0 && ffn % tp == 0 && o.heads % tp == 0; tp *= 2) {
    const std::string t = absl::StrCat(" tp", tp);
    samples.push_back(time_gemm(ctx, o, dtype, "qkv" + t, rows, 3 * h / tp, h));
    samples.push_back(time_gemm(ctx, o, dtype, "proj" + t, rows, h, h / tp));
    samples.push_back(time_gemm(ctx, o, dtype, "fc1" + t, rows, ffn / tp, h));
    samples.push_back(time_gemm(ctx, o, dtype, "fc2" + t, rows, h, ffn / tp));
    if (o.vocab % tp == 0) samples.push_back(time_gemm(ctx, o, dtype, "lm_head" + t, rows, o.vocab / tp, h));
  }
  for (int64_t n = 64; n <= (o.reduced ? 256 : 1024); n *= 2) {
    samples.push_back(time_gemm(ctx, o, dtype, absl::StrCat("square ", n), n, n, n));
  }
  return samples;
}

// The causal attention core on [s, b, heads, 3d]; efficiencies on the FLOPs the model charges
// (compute_cost.cc: forward 0.5 x 4 b s^2 heads d, backward 2.5 times that).
void time_attention(Context& ctx, const Options& o, DType dtype, perf::CalibrationResult& result) {
  const int64_t s = o.seq, b = o.micro_batch, heads = o.heads, d = o.hidden / o.heads;
  Filled qkv = random_tensor(ctx, dtype, {s, b, heads, 3 * d}, s * b * heads * 3 * d, 3);
  Filled dout = random_tensor(ctx, dtype, {s, b, heads, d}, s * b * heads * d, 4);
  Buffer out_buffer(ctx.device(), static_cast<size_t>(s * b * heads * d) * dtype_size(dtype));
  Buffer lse_buffer(ctx.device(), static_cast<size_t>(b * heads * s) * sizeof(float));
  Buffer dqkv_buffer(ctx.device(), static_cast<size_t>(s * b * heads * 3 * d) * dtype_size(dtype));
  const Tensor out = out_buffer.as_tensor(dtype, {s, b, heads, d});
  const Tensor lse = lse_buffer.as_tensor(DType::kFloat32, {b, heads, s});
  const Tensor dqkv = dqkv_buffer.as_tensor(dtype, {s, b, heads, 3 * d});
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const ops::DropoutMask none;
  const double forward = max_over_ranks(
      median_seconds(ctx, o.repeats, [&] { ops::attention_forward(ctx, out, lse, qkv.tensor, scale, none); }));
  const double backward = max_over_ranks(median_seconds(
      ctx, o.repeats, [&] { ops::attention_backward(ctx, dqkv, dout.tensor, qkv.tensor, out, lse, scale, none); }));
  const double flops = 0.5 * 4 * static_cast<double>(b) * s * s * heads * d;
  result.attention_forward_efficiency = flops / forward / result.peak_flops;
  result.attention_backward_efficiency = 2.5 * flops / backward / result.peak_flops;
  result.attention_shape = absl::StrFormat("s %d, b %d, %d heads of %d: forward %.3f ms, backward %.3f ms", s, b,
                                           heads, d, forward * 1e3, backward * 1e3);
}

// The memory-bound ops the model charges by bytes (compute_cost.cc's elementwise pieces and the
// optimizer): a copy, LayerNorm and GELU (read + write), AdamW (32 bytes per FP32 parameter), on
// [rows, hidden] tensors well past the caches. The cluster's bandwidth is their median.
void time_memory_bound(Context& ctx, const Options& o, DType dtype, perf::CalibrationResult& result) {
  const int64_t h = o.hidden, rows = std::max<int64_t>(1, ((o.reduced ? 4 : 32) << 20) / h), n = rows * h;
  const double element = static_cast<double>(dtype_size(dtype));
  Filled x = random_tensor(ctx, dtype, {rows, h}, n, 5);
  Filled weight = random_tensor(ctx, dtype, {h}, h, 8);
  Filled bias = random_tensor(ctx, dtype, {h}, h, 9);
  Buffer y_buffer(ctx.device(), static_cast<size_t>(n) * dtype_size(dtype));
  Buffer stats(ctx.device(), static_cast<size_t>(2 * rows) * sizeof(float));
  const Tensor y = y_buffer.as_tensor(dtype, {rows, h});
  const Tensor mean = stats.as_tensor(DType::kFloat32, {2, rows});
  const auto rate = [&](const char* op, double bytes, auto&& work) {
    result.memory_kernels.emplace_back(op, bytes / max_over_ranks(median_seconds(ctx, o.repeats, work)));
  };
  rate("copy", 2 * element * n, [&] { ops::copy(ctx, y, x.tensor); });
  const Tensor mean_half = Tensor(mean.data(), DType::kFloat32, {rows}, ctx.device());
  const Tensor rstd_half =
      Tensor(static_cast<char*>(mean.data()) + rows * sizeof(float), DType::kFloat32, {rows}, ctx.device());
  rate("layernorm_forward", 2 * element * n,
       [&] { ops::layernorm_forward(ctx, y, mean_half, rstd_half, x.tensor, weight.tensor, bias.tensor, 1e-5f, 0.0f); });
  rate("gelu_forward", 2 * element * n, [&] { ops::gelu_forward(ctx, y, x.tensor); });
  Filled master = random_tensor(ctx, DType::kFloat32, {n}, n, 10);
  Filled grad = random_tensor(ctx, DType::kFloat32, {n}, n, 11);
  Filled exp_avg = random_tensor(ctx, DType::kFloat32, {n}, n, 12);
  Filled exp_avg_sq = random_tensor(ctx, DType::kFloat32, {n}, n, 13);
  ops::scale(ctx, exp_avg_sq.tensor, 0.0f);  // a second moment must not be negative
  ops::AdamWStep step;
  step.learning_rate = 1e-4f;
  rate("adamw_update (fp32)", 32.0 * n, [&] {
    ops::adamw_update(ctx, step, master.tensor, grad.tensor, exp_avg.tensor, exp_avg_sq.tensor, Tensor());
  });
  std::vector<double> rates;
  for (const auto& [op, bandwidth] : result.memory_kernels) rates.push_back(bandwidth);
  result.memory_bandwidth_Bps = median_of(rates);
}

// The host side of optimizer offload (--optimizer-cpu-offload): the trainer's adamw_update on host
// memory with this rank's share of the cores (every rank at once, as the offloaded steps run), and
// the device's link to host memory: a page-locked host buffer copied to the device and back (on the
// CPU backend, where the offload's copies are host memcpys, a host-to-host copy).
void time_host(Context& ctx, const Options& o, int threads, perf::CalibrationResult& result) {
  Context host = Context::cpu(threads);
  const int64_t n = (o.reduced ? 1 : 8) << 20;
  Filled master = random_tensor(host, DType::kFloat32, {n}, n, 20);
  Filled grad = random_tensor(host, DType::kFloat32, {n}, n, 21);
  Filled exp_avg = random_tensor(host, DType::kFloat32, {n}, n, 22);
  Filled exp_avg_sq = random_tensor(host, DType::kFloat32, {n}, n, 23);
  ops::scale(host, exp_avg_sq.tensor, 0.0f);
  ops::AdamWStep step;
  step.learning_rate = 1e-4f;
  result.host_adamw_Bps = 32.0 * static_cast<double>(n) / max_over_ranks(median_seconds(host, o.repeats, [&] {
    ops::adamw_update(host, step, master.tensor, grad.tensor, exp_avg.tensor, exp_avg_sq.tensor, Tensor());
  }));
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  HostStaging pinned;
  void* staged = pinned.reserve(bytes);
  std::memset(staged, 1, bytes);
  Buffer device(ctx.device(), bytes);
  const double to_device = max_over_ranks(median_seconds(ctx, o.repeats, [&] {
    copy_bytes(ctx.device(), device.data(), Device::kCpu, staged, bytes);
  }));
  const double to_host = max_over_ranks(median_seconds(ctx, o.repeats, [&] {
    copy_bytes(Device::kCpu, staged, ctx.device(), device.data(), bytes);
  }));
  result.host_link_Bps = 2.0 * static_cast<double>(bytes) / (to_device + to_host);
  result.host_link_note = absl::StrFormat("%s, %.0f MiB: to the device %.2f GB/s, back %.2f GB/s",
                                          ctx.device() == Device::kCpu ? "host memcpy (CPU backend)" : "page-locked",
                                          static_cast<double>(bytes) / (1 << 20), bytes / to_device / 1e9,
                                          bytes / to_host / 1e9);
}

// What an op costs beyond its bytes and FLOPs (dispatch, thread-pool wake-up; a kernel launch on a
// GPU): the trainer's gelu_forward on a [1, 64] tensor.
void time_op_overhead(Context& ctx, const Options& o, DType dtype, perf::CalibrationResult& result) {
  Filled x = random_tensor(ctx, dtype, {1, 64}, 64, 30);
  Buffer y_buffer(ctx.device(), 64 * dtype_size(dtype));
  const Tensor y = y_buffer.as_tensor(dtype, {1, 64});
  result.op_overhead_s =
      max_over_ranks(median_seconds(ctx, o.repeats, [&] { ops::gelu_forward(ctx, y, x.tensor); }));
}

// Each collective on groups of `span` consecutive ranks (every group at once, as DP or TP groups
// run), FP32 tensors of `bytes` in all.
void time_collectives(Context& ctx, const Options& o, int world_rank, int world_size,
                      std::vector<perf::CollectiveSample>& samples) {
  std::vector<int> spans;
  for (int span = 2; span < world_size; span *= 2) {
    if (world_size % span == 0) spans.push_back(span);
  }
  if (world_size >= 2) spans.push_back(world_size);
  const int64_t largest = o.reduced ? (1 << 20) : (16 << 20);
  for (int span : spans) {
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank / span, world_rank, &comm);
    MpiCommunicator group(comm, absl::StrCat("calibration-", span), 300.0);
    for (int64_t bytes = 4096; bytes <= largest; bytes *= 4) {
      const int64_t count = std::max<int64_t>(span, bytes / 4 / span * span);
      Filled full = random_tensor(ctx, DType::kFloat32, {count}, count, 6);
      Filled part = random_tensor(ctx, DType::kFloat32, {count / span}, count / span, 7);
      const double actual = 4.0 * count;
      for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
        const std::string name = op;
        group.barrier(ctx);
        const double seconds = median_seconds(ctx, o.repeats, [&] {
          if (name == "all_reduce") group.all_reduce(ctx, full.tensor, ReduceOp::kSum);
          else if (name == "all_gather") group.all_gather(ctx, full.tensor, part.tensor);
          else group.reduce_scatter(ctx, part.tensor, full.tensor, ReduceOp::kSum);
        });
        samples.push_back({name, span, actual, max_over_ranks(seconds)});
      }
    }
  }
}

std::string json_text(const perf::CalibrationResult& r, const perf::LatencyBandwidth& link) {
  std::string out = absl::StrCat("{\"name\": \"", r.name, "\", \"device\": \"", r.device, "\", ",
                                 absl::StrFormat("\"peak_tflops\": %.6g, \"peak_measured\": %s, ", r.peak_flops / 1e12,
                                                 r.peak_measured ? "true" : "false"),
                                 absl::StrFormat("\"memory_bandwidth_GBps\": %.6g, ", r.memory_bandwidth_Bps / 1e9),
                                 absl::StrFormat("\"host_adamw_GBps\": %.6g, \"host_link_bandwidth_GBps\": %.6g, ",
                                                 r.host_adamw_Bps / 1e9, r.host_link_Bps / 1e9),
                                 absl::StrFormat("\"attention_forward_efficiency\": %.6g, "
                                                 "\"attention_backward_efficiency\": %.6g, ",
                                                 r.attention_forward_efficiency, r.attention_backward_efficiency),
                                 absl::StrFormat("\"link_fit\": {\"latency_us\": %.6g, \"bandwidth_GBps\": %.6g, "
                                                 "\"rms_relative_error\": %.4g}, ",
                                                 link.latency_s * 1e6, link.bandwidth_Bps / 1e9,
                                                 link.rms_relative_error),
                                 absl::StrFormat("\"host_overhead\": {\"per_op_us\": %.6g, \"per_pass_us\": %.6g, "
                                                 "\"per_collective_us\": %.6g, \"per_iteration_ms\": %.6g, "
                                                 "\"rms_relative_error\": %.4g, \"rms_relative_error_before\": %.4g}, ",
                                                 r.overhead.per_op_s * 1e6, r.overhead.per_pass_s * 1e6,
                                                 r.overhead.per_collective_s * 1e6, r.overhead.per_iteration_s * 1e3,
                                                 r.overhead.rms_relative_error, r.overhead.rms_relative_error_before),
                                 "\"trainer_probes\": [");
  for (size_t i = 0; i < r.probes.size(); ++i) {
    const perf::OverheadSample& p = r.probes[i];
    absl::StrAppend(&out, i ? ", " : "",
                    absl::StrFormat("{\"name\": \"%s\", \"measured_s\": %.6g, \"predicted_s\": %.6g, \"ops\": %.0f, "
                                    "\"passes\": %.0f, \"collectives\": %.0f}",
                                    p.name, p.measured_s, p.predicted_s, p.ops, p.passes, p.collectives));
  }
  absl::StrAppend(&out, "],\n \"gemm_efficiency\": [");
  const auto curve = perf::gemm_efficiency_curve(r.gemms, r.peak_flops);
  for (size_t i = 0; i < curve.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", absl::StrFormat("[%.6g, %.6g]", curve[i].first, curve[i].second));
  }
  absl::StrAppend(&out, "],\n \"memory_kernels_GBps\": {");
  for (size_t i = 0; i < r.memory_kernels.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "",
                    absl::StrFormat("\"%s\": %.6g", r.memory_kernels[i].first, r.memory_kernels[i].second / 1e9));
  }
  absl::StrAppend(&out, "},\n \"gemms\": [");
  for (size_t i = 0; i < r.gemms.size(); ++i) {
    const perf::GemmSample& g = r.gemms[i];
    absl::StrAppend(&out, i ? ",\n  " : "\n  ",
                    absl::StrFormat("{\"what\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"seconds\": %.6g, "
                                    "\"efficiency\": %.6g}",
                                    g.what, g.m, g.n, g.k, g.seconds, g.flops() / g.seconds / r.peak_flops));
  }
  absl::StrAppend(&out, "],\n \"collectives\": [");
  for (size_t i = 0; i < r.collectives.size(); ++i) {
    const perf::CollectiveSample& c = r.collectives[i];
    absl::StrAppend(&out, i ? ",\n  " : "\n  ",
                    absl::StrFormat("{\"op\": \"%s\", \"span\": %d, \"bytes\": %.0f, \"seconds\": %.6g}", c.op, c.span,
                                    c.bytes, c.seconds));
  }
  absl::StrAppend(&out, "]}\n");
  return out;
}

int run(const Options& o, const MpiRuntime& mpi) {
  const bool gpu = o.device == "gpu";
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, cores / local_world_size());
  Context ctx = gpu ? Context::gpu(local_rank()) : Context::cpu(threads);
  const DType dtype = o.bf16 ? DType::kBFloat16 : DType::kFloat32;

  perf::CalibrationResult result;
  result.name = o.name;
  result.device = gpu ? absl::StrCat("gpu: ", local_world_size(), " ranks, one GPU each, ",
                                     o.bf16 ? "BF16" : "FP32")
                      : absl::StrCat("cpu: ", cores, " cores, ", mpi.world_size(), " ranks of ", threads,
                                     " BLAS thread(s), ", o.bf16 ? "BF16" : "FP32");
  // On the CPU every rank is on this node and ranks beyond the cores time-share them (cpu.conf).
  result.gpus_per_node = gpu ? local_world_size() : std::max(64, mpi.world_size());
  result.compute_slots_per_node = gpu ? local_world_size() : cores;
  result.memory_gib = o.memory_gib > 0 ? o.memory_gib
                                       : static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) /
                                             (1024.0 * 1024 * 1024);
  result.gemms = time_gemms(ctx, o, dtype);
  double best = 0;
  for (const perf::GemmSample& g : result.gemms) best = std::max(best, g.flops() / g.seconds);
  result.peak_measured = o.peak_tflops <= 0;
  result.peak_flops = result.peak_measured ? best : o.peak_tflops * 1e12;
  time_attention(ctx, o, dtype, result);
  time_memory_bound(ctx, o, dtype, result);
  time_host(ctx, o, threads, result);
  time_op_overhead(ctx, o, dtype, result);
  time_collectives(ctx, o, mpi.world_rank(), mpi.world_size(), result.collectives);

  // Every rank holds the same (slowest-rank) figures, so the same file.
  std::string error;
  std::string text = perf::cluster_file_text(result, &error);
  if (text.empty()) {
    if (mpi.world_rank() == 0) std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  if (!o.no_trainer_probes) {
    // The trainer's own steps against the model priced by the microbenchmarks alone (overheads 0).
    absl::StatusOr<perf::Cluster> priced = perf::parse_cluster(text, "the microbenchmarks");
    absl::StatusOr<std::vector<perf::OverheadSample>> probes =
        priced.ok() ? time_trainer_probes({.hidden = o.hidden, .heads = o.heads, .seq = o.seq,
                                           .micro_batch = o.micro_batch, .vocab = o.vocab, .bf16 = o.bf16,
                                           .gpu = gpu, .passes = o.reduced ? 1 : 3, .warmup_steps = 2,
                                           .timed_steps = o.reduced ? 4 : 6},
                                          mpi.world_size(), *priced)
                    : absl::StatusOr<std::vector<perf::OverheadSample>>(priced.status());
    if (!probes.ok()) {
      if (mpi.world_rank() == 0) {
        std::fprintf(stderr, "error: trainer probes: %s\n", std::string(probes.status().message()).c_str());
      }
      return 1;
    }
    result.probes = *probes;
    result.overhead = perf::fit_overheads(result.probes);
    text = perf::cluster_file_text(result, &error);
  }
  if (mpi.world_rank() != 0) return 0;
  const auto write = [](const std::string& path, const std::string& content) {
    std::ofstream file(path);
    file << content;
    file.close();
    if (!file) std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
    return static_cast<bool>(file);
  };
  if (!o.out.empty() && !write(o.out, text)) return 1;
  if (!o.json.empty() && !write(o.json, json_text(result, perf::fit_ring_collectives(result.collectives)))) return 1;
  if (o.out.empty()) std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  gpt::MpiRuntime mpi(&argc, &argv);
  gpt::Options o;
  CLI::App app{"Measures this machine (GEMMs, attention, memory bandwidth, MPI collectives) and writes a "
               "perf_model cluster file. Run under mpirun with one rank per GPU (per core on the CPU)."};
  app.add_option("--out", o.out, "cluster file to write (default: standard output)");
  app.add_option("--json", o.json, "every sample and fit, as JSON");
  app.add_option("--name", o.name, "the cluster's name");
  app.add_option("--device", o.device, "cpu or gpu")->check(CLI::IsMember({"cpu", "gpu"}));
  app.add_flag("--bf16", o.bf16, "time GEMMs and attention in BF16 (FP32 otherwise)");
  app.add_flag("--reduced", o.reduced, "a small set (CI): smaller squares, collectives up to 1 MiB");
  app.add_flag("--no-trainer-probes", o.no_trainer_probes,
               "skip the trainer runs that fit the host-overhead terms (they are then written 0)");
  // Every number checked as it is parsed (train/args/numeric_flags.h): decimal, finite, in its range;
  // an option left out keeps its default (a typed 0 is refused, never read as "the default").
  const auto positive = gpt::decimal_integer(1, int64_t{1} << 40);
  app.add_option("--repeats", o.repeats, "timed calls per measurement, 1 to 1000 (the median is kept)")
      ->transform(gpt::decimal_integer(1, 1000));
  // Lower bounds as the cluster file's reader takes them (perf_model/cluster.cc: a positive value at
  // least 1e-9), so that what is written is read back.
  app.add_option("--peak-tflops", o.peak_tflops,
                 "the datasheet peak, from 1e-9 to 1e6 (default: the best GEMM measured)")
      ->transform(gpt::number_in(gpt::NumberRange::from_to(1e-9, 1e6)));
  app.add_option("--memory-gib", o.memory_gib, "memory per device, from 1e-9 to 1048576 (default: this host's RAM)")
      ->transform(gpt::number_in(gpt::NumberRange::from_to(1e-9, 1048576)));
  app.add_option("--hidden-size", o.hidden, "model whose GEMMs are timed")->transform(positive);
  app.add_option("--ffn-hidden-size", o.ffn, "default 4 x hidden")->transform(positive);
  app.add_option("--num-attention-heads", o.heads)->transform(positive);
  app.add_option("--seq-length", o.seq)->transform(positive);
  app.add_option("--micro-batch-size", o.micro_batch)->transform(positive);
  app.add_option("--vocab-size", o.vocab)->transform(positive);
  app.add_option("--max-tp", o.max_tp, "GEMM shapes at TP 1, 2, 4, ... up to this")->transform(positive);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    if (mpi.world_rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (o.hidden % o.heads != 0) {
    if (mpi.world_rank() == 0) {
      std::fprintf(stderr, "error: --hidden-size must be a multiple of --num-attention-heads\n");
    }
    return 1;
  }
  if (mpi.world_size() < 2) {
    std::fprintf(stderr, "error: perf_calibrate times collectives: run it under mpirun with at least 2 ranks "
                         "(one per GPU, or per core on the CPU)\n");
    return 1;
  }
  return gpt::run(o, mpi);
}
