#include "perf_model/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gpt::perf {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double value) { return absl::StrFormat("%.6g", value); }

std::string prediction_json(const Prediction& p, const Cluster& cluster) {
  auto field = [](std::string_view key, const std::string& value) { return absl::StrCat(json_string(key), ": ", value); };
  auto number = [&](std::string_view key, double value) { return field(key, json_number(value)); };
  auto boolean = [&](std::string_view key, bool value) { return field(key, value ? "true" : "false"); };
  const std::vector<std::string> layout = {
      number("world_size", p.world), number("tensor_model_parallel_size", p.tensor),
      number("pipeline_model_parallel_size", p.pipeline), number("data_parallel_size", p.data),
      number("virtual_stages", p.virtual_stages), number("micro_batch_size", p.micro_batch),
      number("global_batch_size", p.global_batch), number("microbatches", p.microbatches),
      boolean("sequence_parallel", p.sequence_parallel), boolean("distributed_optimizer", p.distributed_optimizer),
      field("recompute", json_string(p.recompute)), field("schedule", json_string(p.schedule))};
  const std::vector<std::string> time = {
      number("pipeline", p.pipeline_time), number("compute_busiest_rank", p.compute_time),
      number("pipeline_bubble_fraction", p.pipeline_bubble), number("tp_comm_exposed", p.tp_comm_time),
      number("recompute", p.recompute_time), number("p2p_per_transfer", p.p2p_time),
      number("dp_comm_total", p.dp_comm_time), number("dp_comm_exposed", p.dp_exposed_time),
      number("embedding_grad_sync", p.embedding_sync_time), number("optimizer", p.optimizer_time),
      number("overhead", p.overhead_time)};
  auto pass = [&](const PassCost& c) {
    return absl::StrCat("{", number("gemm", c.gemm), ", ", number("attention", c.attention), ", ",
                        number("elementwise", c.elementwise), ", ", number("tp_comm", c.tp_comm), ", ",
                        number("overhead", c.overhead), "}");
  };
  const std::vector<std::string> layer = {field("forward", pass(p.layer.forward)),
                                          field("backward", pass(p.layer.backward)),
                                          number("recompute_full", p.layer.recompute_full),
                                          number("recompute_selective", p.layer.recompute_selective)};
  const std::vector<std::string> memory = {
      number("parameters", p.memory.parameters / kGiB), number("gradients", p.memory.gradients / kGiB),
      number("optimizer_state", p.memory.optimizer_state / kGiB), number("activations", p.memory.activations / kGiB),
      number("available", p.memory_available / kGiB)};
  const std::vector<std::string> top = {
      field("cluster", json_string(cluster.name)),
      number("iteration_time_s", p.iteration_time),
      number("tflops_per_gpu", p.tflops_per_gpu),
      number("mfu", p.mfu),
      number("tokens_per_s_per_gpu", p.tokens_per_s_per_gpu),
      number("model_flops_per_iteration", p.model_flops),
      number("memory_gib_per_gpu", p.memory.total() / kGiB),
      boolean("fits_in_memory", p.fits),
      field("layout", absl::StrCat("{", absl::StrJoin(layout, ", "), "}")),
      field("time_breakdown_s", absl::StrCat("{", absl::StrJoin(time, ", "), "}")),
      field("layer_microbatch_s", absl::StrCat("{", absl::StrJoin(layer, ", "), "}")),
      field("memory_breakdown_gib", absl::StrCat("{", absl::StrJoin(memory, ", "), "}"))};
  return absl::StrCat("{", absl::StrJoin(top, ", "), "}");
}

std::string pass_text(const char* name, const PassCost& c) {
  return absl::StrFormat("  %-9s %9.3f ms  (GEMM %.3f, attention %.3f, elementwise %.3f, TP comm %.3f, overhead %.3f)\n",
                         name, c.total() * 1e3, c.gemm * 1e3, c.attention * 1e3, c.elementwise * 1e3, c.tp_comm * 1e3,
                         c.overhead * 1e3);
}

}  // namespace

std::string layout_text(const Prediction& p) {
  return absl::StrCat("TP ", p.tensor, " x PP ", p.pipeline, " x DP ", p.data, ", v ", p.virtual_stages, ", mbs ",
                      p.micro_batch, p.sequence_parallel ? ", SP" : "", p.distributed_optimizer ? ", dist-opt" : "",
                      ", recompute ", p.recompute);
}

std::string text_report(const Prediction& p, const Cluster& cluster) {
  std::string out = absl::StrFormat("Performance model: %s (%s)\n", cluster.name, cluster.source);
  absl::StrAppendFormat(&out, "Layout: %s; %d GPUs, %d microbatches of %d per iteration, schedule %s\n",
                        layout_text(p), p.world, p.microbatches, p.micro_batch, p.schedule);
  absl::StrAppendFormat(&out, "\nIteration time      %10.4f s\n", p.iteration_time);
  absl::StrAppendFormat(&out, "TFLOP/s per GPU     %10.1f   (model FLOPs %.4g per iteration)\n", p.tflops_per_gpu,
                        p.model_flops);
  absl::StrAppendFormat(&out, "MFU                 %10.1f %%  (of %.0f TFLOP/s)\n", p.mfu * 100, cluster.peak_flops / 1e12);
  absl::StrAppendFormat(&out, "Tokens/s per GPU    %10.0f\n", p.tokens_per_s_per_gpu);
  absl::StrAppendFormat(&out, "\nWhere the time goes (s per iteration)\n");
  absl::StrAppendFormat(&out, "  pipeline (forward-backward)   %9.4f  (busiest rank computes %.4f; bubble %.1f %%)\n",
                        p.pipeline_time, p.compute_time, p.pipeline_bubble * 100);
  absl::StrAppendFormat(&out, "    of which TP comm exposed    %9.4f\n", p.tp_comm_time);
  absl::StrAppendFormat(&out, "    of which recompute          %9.4f\n", p.recompute_time);
  absl::StrAppendFormat(&out, "  data-parallel comm exposed    %9.4f  (of %.4f)\n", p.dp_exposed_time, p.dp_comm_time);
  absl::StrAppendFormat(&out, "  embedding gradient sync       %9.4f\n", p.embedding_sync_time);
  absl::StrAppendFormat(&out, "  optimizer                     %9.4f\n", p.optimizer_time);
  absl::StrAppendFormat(&out, "  fixed overhead                %9.4f\n", p.overhead_time);
  absl::StrAppendFormat(&out, "\nOne layer, one microbatch\n");
  out += pass_text("forward", p.layer.forward);
  out += pass_text("backward", p.layer.backward);
  if (p.pipeline > 1) absl::StrAppendFormat(&out, "  p2p transfer %.3f ms\n", p.p2p_time * 1e3);
  absl::StrAppendFormat(&out, "\nMemory per GPU (largest rank) %8.2f GiB of %.2f GiB available%s\n",
                        p.memory.total() / kGiB, p.memory_available / kGiB, p.fits ? "" : "  -- DOES NOT FIT");
  absl::StrAppendFormat(&out, "  parameters %.2f, gradients %.2f, optimizer state %.2f, activations %.2f GiB\n",
                        p.memory.parameters / kGiB, p.memory.gradients / kGiB, p.memory.optimizer_state / kGiB,
                        p.memory.activations / kGiB);
  return out;
}

std::string json_report(const Prediction& p, const Cluster& cluster) { return prediction_json(p, cluster) + "\n"; }

std::string search_table(const std::vector<Prediction>& ranked, const Cluster& cluster, int evaluated, int fitting) {
  std::string out = absl::StrFormat(
      "Search on %s: %d valid layouts, %d fit in %.1f GiB per GPU; the best %d by predicted throughput\n\n", cluster.name,
      evaluated, fitting, (cluster.memory_bytes - cluster.memory_reserved_bytes) / kGiB, ranked.size());
  absl::StrAppendFormat(&out, "%4s  %-68s %10s %9s %6s %9s\n", "rank", "layout", "iter (s)", "TFLOP/s", "MFU", "GiB/GPU");
  for (size_t i = 0; i < ranked.size(); ++i) {
    const Prediction& p = ranked[i];
    absl::StrAppendFormat(&out, "%4d  %-68s %10.4f %9.1f %5.1f%% %9.2f\n", i + 1, layout_text(p), p.iteration_time,
                          p.tflops_per_gpu, p.mfu * 100, p.memory.total() / kGiB);
  }
  return out;
}

std::string search_json(const std::vector<Prediction>& ranked, const Cluster& cluster, int evaluated, int fitting) {
  std::vector<std::string> items;
  for (const Prediction& p : ranked) items.push_back(prediction_json(p, cluster));
  return absl::StrCat("{\"cluster\": ", json_string(cluster.name), ", \"evaluated\": ", evaluated,
                      ", \"fitting\": ", fitting, ", \"ranked\": [", absl::StrJoin(items, ", "), "]}\n");
}

}  // namespace gpt::perf
