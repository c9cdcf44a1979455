#include "perf_model/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "train/report/metrics_file.h"

namespace gpt::perf {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

JsonObject prediction_json(const Prediction& p, const Cluster& cluster) {
  JsonObject layout;
  layout.add("world_size", p.world)
      .add("tensor_model_parallel_size", p.tensor)
      .add("pipeline_model_parallel_size", p.pipeline)
      .add("data_parallel_size", p.data)
      .add("virtual_stages", p.virtual_stages)
      .add("micro_batch_size", p.micro_batch)
      .add("global_batch_size", p.global_batch)
      .add("microbatches", p.microbatches)
      .add("sequence_parallel", p.sequence_parallel)
      .add("distributed_optimizer", p.distributed_optimizer)
      .add("zero_level", static_cast<int64_t>(p.zero_level))
      .add("recompute", p.recompute)
      .add("schedule", p.schedule);
  if (p.context > 1) layout.add("context_parallel_size", p.context).add("cp_comm_type", p.cp_comm_type);
  if (!p.dispatcher.empty()) {
    layout.add("expert_model_parallel_size", p.expert_model)
        .add("expert_tensor_parallel_size", p.expert_tensor)
        .add("expert_data_parallel_size", p.expert_data)
        .add("moe_token_dispatcher_type", p.dispatcher)
        .add("moe_imbalance", p.expert_imbalance);
  }
  if (p.first_stage_layers > 0) layout.add("decoder_first_pipeline_num_layers", p.first_stage_layers);
  if (p.last_stage_layers > 0) layout.add("decoder_last_pipeline_num_layers", p.last_stage_layers);
  JsonObject time;
  time.add("pipeline", p.pipeline_time)
      .add("compute_busiest_rank", p.compute_time)
      .add("pipeline_bubble_fraction", p.pipeline_bubble)
      .add("tp_comm_exposed", p.tp_comm_time)
      .add("recompute", p.recompute_time)
      .add("p2p_per_transfer", p.p2p_time)
      .add("dp_comm_total", p.dp_comm_time)
      .add("dp_comm_exposed", p.dp_exposed_time)
      .add("embedding_grad_sync", p.embedding_sync_time)
      .add("scalar_all_reduces", p.scalar_comm_time)
      .add("optimizer", p.optimizer_time)
      .add("overhead", p.overhead_time);
  if (p.context > 1) time.add("cp_comm_exposed", p.cp_comm_time);
  if (!p.dispatcher.empty()) time.add("ep_comm", p.ep_comm_time).add("expert_dp_comm_total", p.expert_dp_comm_time);
  if (p.zero_level == 3) time.add("zero3_comm_total", p.zero3_traffic_time).add("zero3_comm_exposed", p.zero3_exposed_time);
  if (p.offload_fraction > 0) {
    time.add("offload_copies", p.offload_copy_time).add("host_optimizer", p.host_optimizer_time);
  }
  auto pass = [](const PassCost& c) {
    JsonObject o;
    o.add("gemm", c.gemm)
        .add("attention", c.attention)
        .add("elementwise", c.elementwise)
        .add("tp_comm", c.tp_comm)
        .add("overhead", c.overhead);
    if (c.cp_comm > 0) o.add("cp_comm", c.cp_comm);
    if (c.dp_comm > 0) o.add("zero3_comm", c.dp_comm);
    if (c.ep_comm > 0) o.add("ep_comm", c.ep_comm);
    return o;
  };
  JsonObject layer;
  layer.add("forward", pass(p.layer.forward))
      .add("backward", pass(p.layer.backward))
      .add("recompute_full", p.layer.recompute_full)
      .add("recompute_selective", p.layer.recompute_selective);
  JsonObject memory;
  memory.add("parameters", p.memory.parameters / kGiB)
      .add("gradients", p.memory.gradients / kGiB)
      .add("optimizer_state", p.memory.optimizer_state / kGiB)
      .add("activations", p.memory.activations / kGiB)
      .add("data_parallel_buffers", p.memory.data_parallel_buffers / kGiB)
      .add("available", p.memory_available / kGiB);
  if (!p.dispatcher.empty()) memory.add("expert_parameter_elements", p.memory.expert_parameters);
  JsonObject top;
  top.add("cluster", cluster.name)
      .add("iteration_time_s", p.iteration_time)
      .add("tflops_per_gpu", p.tflops_per_gpu)
      .add("mfu", p.mfu)
      .add("tokens_per_s_per_gpu", p.tokens_per_s_per_gpu)
      .add("model_flops_per_iteration", p.model_flops)
      .add("memory_gib_per_gpu", p.memory.total() / kGiB)
      .add("fits_in_memory", p.fits)
      .add("layout", layout)
      .add("time_breakdown_s", time)
      .add("layer_microbatch_s", layer)
      .add("memory_breakdown_gib", memory);
  JsonObject calls;
  calls.add("ops", p.op_calls).add("passes", p.pass_calls).add("communication", p.collective_calls);
  top.add("host_calls_per_iteration", calls);
  return top;
}

std::string pass_text(const char* name, const PassCost& c) {
  std::string text =
      absl::StrFormat("  %-9s %9.3f ms  (GEMM %.3f, attention %.3f, elementwise %.3f, TP comm %.3f, overhead %.3f",
                      name, c.total() * 1e3, c.gemm * 1e3, c.attention * 1e3, c.elementwise * 1e3, c.tp_comm * 1e3,
                      c.overhead * 1e3);
  if (c.cp_comm > 0) absl::StrAppendFormat(&text, ", CP comm %.3f", c.cp_comm * 1e3);
  if (c.dp_comm > 0) absl::StrAppendFormat(&text, ", ZeRO-3 comm %.3f", c.dp_comm * 1e3);
  if (c.ep_comm > 0) absl::StrAppendFormat(&text, ", EP comm %.3f", c.ep_comm * 1e3);
  return text + ")\n";
}

}  // namespace

std::string layout_text(const Prediction& p) {
  const std::string context = p.context > 1 ? absl::StrCat(" x CP ", p.context, " (", p.cp_comm_type, ")") : "";
  // An uneven split: the first and last stages' layers (the others split the rest evenly).
  const std::string split = p.first_stage_layers > 0 || p.last_stage_layers > 0
                                ? absl::StrCat(" (layers first ", p.first_stage_layers, ", last ", p.last_stage_layers, ")")
                                : "";
  // MoE: the expert grid (ETP x EP x EDP) and the dispatcher.
  const std::string experts =
      p.dispatcher.empty() ? ""
                           : absl::StrCat(", experts ETP ", p.expert_tensor, " x EP ", p.expert_model, " x EDP ", p.expert_data,
                                          " ", p.dispatcher);
  return absl::StrCat("TP ", p.tensor, context, " x PP ", p.pipeline, split, " x DP ", p.data, experts, ", v ", p.virtual_stages, ", mbs ",
                      p.micro_batch, p.sequence_parallel ? ", SP" : "",
                      p.zero_level == 3   ? ", ZeRO-3"
                      : p.zero_level == 2 ? ", ZeRO-2"
                      : p.distributed_optimizer ? ", dist-opt"
                                                : "",
                      p.offload_fraction > 0 ? absl::StrFormat(", offload %.2g", p.offload_fraction) : "",
                      ", recompute ", p.recompute, p.pipeline > 1 ? ", " + p.schedule : "");
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
  if (p.context > 1) absl::StrAppendFormat(&out, "    of which CP comm exposed    %9.4f\n", p.cp_comm_time);
  if (!p.dispatcher.empty()) {
    absl::StrAppendFormat(&out, "    of which EP comm            %9.4f  (%s dispatcher, routing imbalance %.2f)\n",
                          p.ep_comm_time, p.dispatcher, p.expert_imbalance);
  }
  absl::StrAppendFormat(&out, "    of which recompute          %9.4f\n", p.recompute_time);
  if (p.zero_level == 3) {
    absl::StrAppendFormat(&out, "    of which ZeRO-3 comm exposed %8.4f  (of %.4f: every unit's gathers and reduce-scatter)\n",
                          p.zero3_exposed_time, p.zero3_traffic_time);
  } else {
    absl::StrAppendFormat(&out, "  data-parallel comm exposed    %9.4f  (of %.4f)\n", p.dp_exposed_time, p.dp_comm_time);
  }
  absl::StrAppendFormat(&out, "  embedding gradient sync       %9.4f\n", p.embedding_sync_time);
  absl::StrAppendFormat(&out, "  optimizer                     %9.4f\n", p.optimizer_time);
  if (p.offload_fraction > 0) {
    absl::StrAppendFormat(&out, "    offloaded %.2g: copies %.4f, host AdamW %.4f\n", p.offload_fraction,
                          p.offload_copy_time, p.host_optimizer_time);
  }
  absl::StrAppendFormat(&out, "  scalar all-reduces            %9.4f  (loss, gradient norm, finite check)\n",
                        p.scalar_comm_time);
  absl::StrAppendFormat(&out, "  host overhead per iteration   %9.4f  (and inside the passes: %.0f ops, %.0f passes, "
                        "%.0f communication calls per iteration)\n",
                        p.overhead_time, p.op_calls, p.pass_calls, p.collective_calls);
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

std::string memory_report(const Prediction& p) {
  std::string out = absl::StrFormat("Memory per GPU (largest rank) of %s on %d GPUs\n", layout_text(p), p.world);
  const MemoryEstimate& m = p.memory;
  absl::StrAppendFormat(&out, "  parameters            %10.4f GiB\n", m.parameters / kGiB);
  absl::StrAppendFormat(&out, "  gradients             %10.4f GiB\n", m.gradients / kGiB);
  absl::StrAppendFormat(&out, "  optimizer state       %10.4f GiB\n", m.optimizer_state / kGiB);
  absl::StrAppendFormat(&out, "  activations           %10.4f GiB\n", m.activations / kGiB);
  absl::StrAppendFormat(&out, "  data-parallel buffers %10.4f GiB\n", m.data_parallel_buffers / kGiB);
  absl::StrAppendFormat(&out, "  total                 %10.4f GiB (%.3f MiB) of %.2f GiB available%s\n",
                        m.total() / kGiB, m.total() / (1024.0 * 1024.0), p.memory_available / kGiB,
                        p.fits ? "" : "  -- DOES NOT FIT");
  if (!p.dispatcher.empty()) {
    absl::StrAppendFormat(&out, "  routed-expert parameters %.0f elements (ETP %d x EP %d; optimizer state over EDP %d)\n",
                          m.expert_parameters, p.expert_tensor, p.expert_model, p.expert_data);
  }
  return out;
}

std::string json_report(const Prediction& p, const Cluster& cluster) { return prediction_json(p, cluster).str() + "\n"; }

std::string search_margins(const std::vector<Prediction>& ranked, const Cluster& cluster) {
  const size_t best = std::min<size_t>(ranked.size(), 5);
  if (best < 2) return "";
  std::string out = absl::StrFormat("\nThe best %d, each against the next:", best);
  // Within the model's error of the best: an order the model cannot tell apart.
  size_t tied = 1;
  for (size_t i = 0; i + 1 < best; ++i) {
    const double margin = ranked[i + 1].iteration_time / ranked[i].iteration_time - 1;
    absl::StrAppendFormat(&out, "%s #%d %.1f%% faster than #%d", i == 0 ? "" : ";", i + 1, margin * 100, i + 2);
  }
  for (size_t i = 1; i < best; ++i) {
    if (ranked[i].iteration_time / ranked[0].iteration_time - 1 <= cluster.model_error) tied = i + 1;
  }
  out += ".\n";
  if (tied > 1) {
    absl::StrAppendFormat(&out,
                          "%s within the model's own error of #1 (%.0f%%, model_error_fraction of %s): it cannot "
                          "order them; measure them.\n",
                          tied > 2 ? absl::StrCat("#2 to #", tied, " are") : "#2 is", cluster.model_error * 100,
                          cluster.name);
  } else {
    absl::StrAppendFormat(&out, "#1 leads #2 by more than the model's own error (%.0f%%, model_error_fraction of %s).\n",
                          cluster.model_error * 100, cluster.name);
  }
  return out;
}

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
  return out + search_margins(ranked, cluster);
}

std::string search_json(const std::vector<Prediction>& ranked, const Cluster& cluster, int evaluated, int fitting) {
  std::vector<std::string> items;
  for (const Prediction& p : ranked) items.push_back(prediction_json(p, cluster).str());
  return absl::StrCat("{\"cluster\": ", json_string(cluster.name), ", \"evaluated\": ", evaluated,
                      ", \"fitting\": ", fitting, ", \"ranked\": [", absl::StrJoin(items, ", "), "]}\n");
}

}  // namespace gpt::perf
