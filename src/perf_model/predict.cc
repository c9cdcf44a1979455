#include "perf_model/predict.h"

#include <optional>

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/recompute_plan.h"
#include "parallel/pipeline/schedule.h"
#include "train/schedule_choice.h"
#include "parallel/pipeline/simulator.h"
#include "perf_model/collectives.h"
#include "perf_model/data_parallel_cost.h"
#include "perf_model/expert_layout.h"
#include "perf_model/megatron_memory.h"
#include "train/args/flag_enums.h"
#include "train/report/flops.h"
#include "train/memory_plan.h"
#include "train/pipeline_split.h"
#include "train/args/sharding_arguments.h"
#include "train/configs.h"

namespace gpt::perf {
namespace {

// AdamW per owned parameter: read the FP32 gradient (and again for the global norm), read and
// write the master weight and both moments, write the BF16 copy (none in FP32).
double optimizer_bytes_per_parameter(bool bf16) { return bf16 ? 4 + 4 + 3 * 8 + 2 : 4 + 4 + 3 * 8; }

std::string recompute_text(const Arguments& a) {
  if (a.recompute_granularity.empty()) return "none";
  if (recompute_granularity(a) == RecomputeGranularity::kSelective) return "selective";
  return absl::StrCat("full ", a.recompute_method, " ", a.recompute_num_layers);
}

// Layers of a chunk of `chunk_layers` whose forward runs again in backward (full recompute): the
// model's own recompute plan (model/recompute_plan.h), so the model and its cost agree.
int64_t fully_recomputed_layers(const ModelConfig& config, int64_t chunk_layers) {
  int64_t layers = 0;
  for (const LayerRecompute& layer : plan_recompute(config.recompute, chunk_layers).layers) {
    if (layer.stashing == LayerStashing::kGroupInput) ++layers;
  }
  return layers;
}

// A point-to-point link between two ranks `stride` apart: one NIC when they are on two nodes.
Link pair_link(const Cluster& cluster, int64_t stride) {
  if (!group_spans_nodes(0, static_cast<int>(std::min<int64_t>(stride, 1 << 30)), 2, cluster.gpus_per_node)) {
    return {cluster.intra_node_bandwidth * cluster.intra_node_efficiency, cluster.intra_node_latency, false};
  }
  return {cluster.inter_node_bandwidth * cluster.inter_node_efficiency, cluster.inter_node_latency, true};
}

// The data-parallel buckets of a rank holding `parameters` in `units` units (layers, embedding,
// output layer), as the trainer's shard plan lays them out (train/configs.cc): with
// --use-megatron-fsdp each unit is a bucket, consecutive ones merged up to
// --suggested-communication-unit-size; otherwise one bucket, or Megatron's --ddp-bucket-size ones
// with --overlap-grad-reduce; the tied word embedding alone when it spans pipeline stages.
double data_parallel_buckets(const Arguments& a, double parameters, double units, int64_t data_ranks,
                             bool tied_across_stages) {
  double buckets = 1;
  if (a.use_megatron_fsdp || a.use_torch_fsdp2) {
    const double size = a.use_torch_fsdp2 ? 0.0 : static_cast<double>(a.suggested_communication_unit_size);
    buckets = size > 0 ? std::clamp(std::ceil(parameters / size), 1.0, units) : units;
  } else if (a.overlap_grad_reduce) {
    const double size = static_cast<double>(ddp_bucket_elements(a, data_ranks));
    buckets = std::max(1.0, std::ceil(parameters / size));
  }
  return buckets + (tied_across_stages ? 1.0 : 0.0);
}

// The shape of one rank's ops for their costs (compute_cost.h).
RankShape rank_shape(const Prediction& p, bool all_to_all, bool unfused_attention, int64_t world_size,
                     const Cluster& cluster, const RunOptions& options) {
  RankShape shape;
  // MoE: the expert grid's groups (ranks etp + ETP (ep + EP edp) of a stage).
  shape.expert = {.expert_model = p.expert_model,
                  .expert_tensor = p.expert_tensor,
                  .all_to_all = p.dispatcher == "alltoall",
                  .imbalance = p.expert_imbalance,
                  .route_gathered_rows = options.implementation == Implementation::kTrainer};
  shape.expert_exchange_link = group_link(cluster, 1, static_cast<int>(p.expert_model * p.expert_tensor));
  shape.expert_tensor_link = group_link(cluster, 1, static_cast<int>(p.expert_tensor));
  shape.expert_model_stride = static_cast<int>(p.expert_tensor);
  shape.tensor_parallel = p.tensor;
  shape.sequence_parallel = p.sequence_parallel;
  shape.micro_batch = p.micro_batch;
  shape.tp_comm_overlap = options.tp_comm_overlap;
  shape.tensor_link = group_link(cluster, 1, static_cast<int>(p.tensor));
  shape.context_parallel = p.context;
  shape.context_all_to_all = all_to_all;
  shape.context_link = group_link(cluster, static_cast<int>(p.tensor), static_cast<int>(p.context));
  // This trainer and Megatron both gather the sequence-parallel norm outputs again in backward.
  shape.regather_sequence_parallel_input = true;
  // Megatron's unfused core materialises the scores (this trainer runs its fused core whatever the
  // backend says).
  shape.unfused_attention = options.implementation != Implementation::kTrainer && unfused_attention;
  const int64_t ranks_per_node = std::min<int64_t>(world_size, cluster.gpus_per_node);
  shape.compute_stretch =
      std::max(1.0, static_cast<double>(ranks_per_node) / static_cast<double>(cluster.compute_slots_per_node));
  return shape;
}

// A rank's costs per microbatch besides its layers' (Prediction::layer): the embedding's and the
// LM head's passes, and a chunk's recompute.
struct RankPasses {
  PassCost embed_f, embed_b, head_f, head_b;
  // Layers of each virtual stage s = c x p + r (train/pipeline_split.h: even, or Megatron's
  // --decoder-first/last-pipeline-num-layers), the largest of them and the busiest rank's sum.
  std::vector<int64_t> stage_layers;
  int64_t chunk_layers = 0;     // the largest virtual stage's layers
  int64_t rank_layers = 0;      // the busiest pipeline rank's layers (all its chunks)
  double recomputed = 0;        // of the largest stage's, fully recomputed in backward
  double chunk_recompute = 0;   // the largest stage's recompute time (full or selective)
  double rank_recompute = 0;    // the busiest rank's recompute time, all its chunks
  double chunk_first_wait = 0;  // ZeRO-3: the gather a chunk's first layer waits for
  // MoE with dense layers too (--moe-layer-freq): each virtual stage's MoE layers beyond its share
  // of the mean layer (p.layer), each costing an MoE layer's pass less a dense layer's.
  std::vector<double> stage_moe_excess;
  double moe_forward_excess = 0, moe_backward_excess = 0, moe_weight_excess = 0;
};

// A mixed model's stages: their MoE layers' counts against the mean layer's share.
void stage_moe_layers(const ModelConfig& config, const ModelConfig& local_config, const RankShape& shape,
                      const Cluster& cluster, RankPasses& r) {
  const int64_t moe = config.moe.enabled() ? config.moe.moe_layer_count() : 0;
  if (moe == 0 || moe == config.num_layers) return;
  const LayerCost dense = kind_layer_cost(local_config, shape, cluster, false);
  const LayerCost sparse = kind_layer_cost(local_config, shape, cluster, true);
  r.moe_forward_excess = sparse.forward.total() - dense.forward.total();
  r.moe_backward_excess = sparse.backward.total() - dense.backward.total();
  r.moe_weight_excess = sparse.weight_gradient_gemm - dense.weight_gradient_gemm;
  const double share = static_cast<double>(moe) / static_cast<double>(config.num_layers);
  int64_t layer = 0;
  for (const int64_t layers : r.stage_layers) {
    int64_t count = 0;
    for (int64_t i = 0; i < layers; ++i, ++layer) count += config.moe.is_moe_layer(layer) ? 1 : 0;
    r.stage_moe_excess.push_back(static_cast<double>(count) - share * static_cast<double>(layers));
  }
}

// The recompute of a virtual stage of `layers` layers (full: its recomputed layers' forward;
// selective: every layer's attention core).
double stage_recompute(const ModelConfig& config, const Prediction& p, int64_t layers) {
  if (layers == 0) return 0.0;  // the embedding or the loss took the stage's only layer
  const double selective = config.recompute.granularity == RecomputeGranularity::kSelective ? 1.0 : 0.0;
  return static_cast<double>(fully_recomputed_layers(config, layers)) * p.layer.recompute_full +
         selective * static_cast<double>(layers) * p.layer.recompute_selective;
}

// p.layer and the rest of a rank's passes, costed on `local_config` (the rank's S / CP rows).
RankPasses rank_passes(const Arguments& a, const ModelConfig& config, const ModelConfig& local_config,
                       const RankShape& shape, const Cluster& cluster, Prediction& p) {
  RankPasses r;
  p.layer = layer_cost(local_config, shape, cluster);
  r.embed_f = embedding_forward(local_config, shape, cluster);
  r.embed_b = embedding_backward(local_config, shape, cluster);
  r.head_f = head_forward(local_config, shape, cluster), r.head_b = head_backward(local_config, shape, cluster);
  r.stage_layers = virtual_stage_layers(a);
  r.chunk_layers = *std::max_element(r.stage_layers.begin(), r.stage_layers.end());
  stage_moe_layers(config, local_config, shape, cluster, r);
  r.recomputed = static_cast<double>(fully_recomputed_layers(config, r.chunk_layers));
  r.chunk_recompute = stage_recompute(config, p, r.chunk_layers);
  for (int64_t rank = 0; rank < p.pipeline; ++rank) {
    int64_t layers = 0;
    double recompute = 0;
    for (int64_t c = 0; c < p.virtual_stages; ++c) {
      const int64_t n = r.stage_layers[static_cast<size_t>(c * p.pipeline + rank)];
      layers += n;
      recompute += stage_recompute(config, p, n);
    }
    if (layers > r.rank_layers) r.rank_layers = layers, r.rank_recompute = recompute;
  }
  return r;
}

// ZeRO-3: every unit's gathers and reduce-scatter, per microbatch, inside its passes (their
// exposed parts into p.layer's and r's passes, their traffic into p.zero3_traffic_time).
void shard_units(const ModelConfig& config, const ModelConfig& local_config, const RankShape& shape,
                 const Cluster& cluster, const RunOptions& options, const UnitShardingInput& sharding,
                 RankPasses& r, Prediction& p) {
  const auto add_calls = [&](PassCost& pass, double calls) {
    pass.collective_calls += calls;
    pass.overhead += calls * cluster.collective_overhead * shape.compute_stretch;
  };
  // A unit: this trainer's (or Megatron-FSDP's) one gather of the whole unit, or DeepSpeed's
  // 2021 ZeRO-3 per tensor (deepspeed_unit_sharding). Its exposed parts go into its passes.
  const bool deepspeed = options.implementation == Implementation::kDeepSpeed;
  const auto shard = [&](const std::vector<double>& tensors, PassCost& forward, PassCost& backward,
                         double backward_compute, bool recomputed) {
    double forward_calls = 1, backward_calls = 2, elements = 0;
    for (double t : tensors) elements += t;
    const UnitSharding unit =
        deepspeed ? deepspeed_unit_sharding(tensors, forward.total(), backward_compute, recomputed, sharding,
                                            forward_calls, backward_calls)
                  : unit_sharding(elements, forward.total(), backward_compute, sharding);
    forward.dp_comm = unit.forward_exposed;
    backward.dp_comm = unit.backward_exposed;
    add_calls(forward, forward_calls);
    add_calls(backward, backward_calls);
    return unit;
  };
  // A unit is a layer: an MoE model's are priced as its majority kind's (an MoE layer's holds its
  // local experts' weights, E / EP split over ETP).
  const bool moe_units = config.moe.enabled() && 2 * config.moe.moe_layer_count() >= config.num_layers;
  const std::vector<double> layer_tensors =
      layer_parameter_tensors(local_config, layer_ops(local_config, shape, moe_units));
  const UnitSharding layer = shard(layer_tensors, p.layer.forward, p.layer.backward,
                                   p.layer.backward.total() + r.chunk_recompute / r.chunk_layers, r.recomputed > 0);
  r.chunk_first_wait = layer.first_unit_wait;
  const double h = static_cast<double>(config.hidden_size), vocab = static_cast<double>(config.padded_vocab_size);
  const double tp = static_cast<double>(p.tensor);
  std::vector<double> embedding_tensors = {vocab / tp * h};
  if (config.position_embedding == PositionEmbedding::kLearnedAbsolute) {
    embedding_tensors.push_back(static_cast<double>(config.max_position_embeddings) * h);
  }
  const UnitSharding embedding = shard(embedding_tensors, r.embed_f, r.embed_b, r.embed_b.total(), false);
  r.embed_f.dp_comm += embedding.first_unit_wait;
  const bool separate_head = config.untie_embeddings_and_output_weights || p.pipeline > 1;
  std::vector<double> head_tensors = {h, h};  // the final norm
  if (separate_head) head_tensors.push_back(vocab / tp * h);
  const UnitSharding head = shard(head_tensors, r.head_f, r.head_b, r.head_b.total(), false);
  // The traffic of every unit of the rank, per iteration.
  p.zero3_traffic_time = static_cast<double>(p.microbatches) *
                         (static_cast<double>(r.rank_layers) * layer.traffic + embedding.traffic + head.traffic);
}

// Every microbatch's forward and backward through the schedule `kind`: p's pipeline and compute
// times and their parts.
absl::Status time_pipeline(const Arguments& a, const ModelConfig& config, const ModelConfig& local_config,
                           const RankShape& shape, const Cluster& cluster, pipeline::ScheduleKind kind,
                           const Link& pipe_link, const RankPasses& r, Prediction& p) {
  const int pp = static_cast<int>(p.pipeline), v = static_cast<int>(p.virtual_stages);
  const int m = static_cast<int>(p.microbatches);
  // The host's work per chunk pass (a microbatch's forward, or its backward: the schedule's step,
  // the data feed, the stage's set-up), besides its ops'.
  const double pass_overhead = cluster.microbatch_overhead * shape.compute_stretch;
  // A virtual stage of `layers` layers: its forward and backward per microbatch.
  const auto chunk_forward = [&](int64_t layers) {
    return static_cast<double>(layers) * p.layer.forward.total() + r.chunk_first_wait + pass_overhead;
  };
  const auto chunk_backward = [&](int64_t layers) {
    return static_cast<double>(layers) * p.layer.backward.total() + stage_recompute(config, p, layers) + pass_overhead;
  };

  // Pipeline: per (rank, chunk) costs through the trainer's schedule.
  const double activation_bytes = static_cast<double>(local_config.seq_length * p.micro_batch * config.hidden_size) *
                                  (a.bf16 || a.fp16 ? 2.0 : 4.0) / (p.sequence_parallel ? static_cast<double>(p.tensor) : 1.0);
  p.p2p_time = pp > 1 ? p2p_time(activation_bytes, pipe_link) : 0.0;
  double busiest = 0;
  if (pp == 1) {
    const double forward = chunk_forward(r.chunk_layers) + r.embed_f.total() + r.head_f.total();
    const double backward = chunk_backward(r.chunk_layers) + r.embed_b.total() + r.head_b.total();
    busiest = m * (forward + backward);
    p.pipeline_time = busiest;
  } else {
    // Per virtual stage: its layers, the embedding on the first and the head on the last. Of a
    // backward, W is the weight-gradient GEMMs (layer_ops' weight_gradient ops) and the embedding's
    // gradient; B the rest (input-gradient GEMMs, attention, element-wise, recompute).
    StageCosts stages;
    for (int k = 0; k < pp * v; ++k) {
      const bool first = k == 0, last = k == pp * v - 1;
      const int64_t layers = r.stage_layers[static_cast<size_t>(k)];
      const double excess = r.stage_moe_excess.empty() ? 0.0 : r.stage_moe_excess[static_cast<size_t>(k)];
      const double chunk_weight =
          static_cast<double>(layers) * p.layer.weight_gradient_gemm + excess * r.moe_weight_excess;
      const double weight = chunk_weight + (first ? r.embed_b.total() : 0.0) + (last ? r.head_b.gemm / 2 : 0.0);
      const double backward = chunk_backward(layers) + excess * r.moe_backward_excess +
                              (first ? r.embed_b.total() : 0.0) + (last ? r.head_b.total() : 0.0);
      stages.forward.push_back(chunk_forward(layers) + excess * r.moe_forward_excess +
                               (first ? r.embed_f.total() : 0.0) + (last ? r.head_f.total() : 0.0));
      stages.backward_input.push_back(backward - weight);
      stages.weight.push_back(weight);
    }
    pipeline::Costs costs = placed_costs(stages, pipeline::schedule_placement(kind), pp, v);
    costs.p2p_latency = pipe_link.latency;
    costs.p2p_bytes = activation_bytes;
    costs.p2p_bandwidth = pipe_link.bandwidth;
    GPT_ASSIGN_OR_RETURN(const pipeline::Schedule schedule, pipeline::make_schedule(kind, pp, v, m));
    GPT_ASSIGN_OR_RETURN(const pipeline::SimulationReport report, pipeline::simulate(schedule, costs));
    p.pipeline_time = report.makespan;
    p.pipeline_bubble = report.bubble_fraction;
    busiest = report.ideal;
  }
  p.compute_time = busiest;
  const double rank_layers = static_cast<double>(r.rank_layers);
  p.tp_comm_time = m * rank_layers * (p.layer.forward.tp_comm + p.layer.backward.tp_comm);
  p.cp_comm_time = m * rank_layers * (p.layer.forward.cp_comm + p.layer.backward.cp_comm);
  p.ep_comm_time = m * rank_layers * (p.layer.forward.ep_comm + p.layer.backward.ep_comm);
  p.recompute_time = m * r.rank_recompute;
  p.zero3_exposed_time =
      m * (rank_layers * (p.layer.forward.dp_comm + p.layer.backward.dp_comm) + p.virtual_stages * r.chunk_first_wait);
  return absl::OkStatus();
}

// The data-parallel gradient sync and parameter gather of the largest stage's `parameters` over
// the `dp` (data x context) ranks, and the tied embedding's all-reduce: p's dp and embedding
// times. Returns the collective calls charged per iteration.
double time_data_parallel(const Arguments& a, const ModelConfig& config, const Cluster& cluster,
                          pipeline::ScheduleKind kind, double parameters, int dp, const Link& data_link,
                          int64_t rank_layers, Prediction& p) {
  const double element = a.bf16 || a.fp16 ? 2.0 : 4.0;
  const double gradient_element = a.bf16 && !a.accumulate_allreduce_grads_in_fp32 ? 2.0 : 4.0;
  const ZeroLevel level = zero_level(a);
  const int pp = static_cast<int>(p.pipeline);
  const double hidden = cluster.dp_comm_overlap_fraction;
  double gradient_sync = 0, parameter_gather = 0, dp_calls = 0;
  // Each bucket is its own collective (its own latency and call), of its share of the parameters.
  const bool tied_across_stages = pp > 1 && !config.untie_embeddings_and_output_weights &&
                                  pipeline::schedule_placement(kind) == pipeline::Placement::kLoop;
  const double rank_units = static_cast<double>(rank_layers) + 2.0 / static_cast<double>(pp);
  const double buckets = dp > 1 ? data_parallel_buckets(a, parameters, std::max(1.0, std::round(rank_units)), dp,
                                                        tied_across_stages)
                                : 0.0;
  if (level == ZeroLevel::kParameters) {
    // Inside the pipeline (above): nothing per iteration; the next forward gathers the updated shards.
    p.dp_comm_time = p.zero3_traffic_time;
  } else if (level >= ZeroLevel::kOptimizer && dp > 1) {
    // ZeRO-2 reduce-scatters every microbatch's gradients (no full-size accumulator). With
    // --num-distributed-optimizer-instances N (ZeRO-1 only) the reduce-scatter and the gather run
    // inside an instance of dp / N consecutive ranks, and each reduced shard is all-reduced across
    // the N instances (ranks dp / N apart).
    const double reductions = level >= ZeroLevel::kGradients ? static_cast<double>(p.microbatches) : 1.0;
    const int instance = static_cast<int>(optimizer_instance_size(a, dp));
    const int instances = dp / instance;
    const Link instance_link = group_link(cluster, static_cast<int>(p.tensor), instance);
    gradient_sync =
        reductions * buckets * reduce_scatter_time(instance, parameters * gradient_element / buckets, instance_link);
    parameter_gather = buckets * all_gather_time(instance, parameters * element / buckets, instance_link);
    dp_calls = (reductions + 1) * buckets;
    if (instances > 1) {
      gradient_sync += buckets * all_reduce_time(instances, parameters * gradient_element / instance / buckets,
                                                 group_link(cluster, static_cast<int>(p.tensor) * instance, instances));
      dp_calls += buckets;
    }
  } else if (dp > 1) {
    gradient_sync = buckets * all_reduce_time(dp, parameters * gradient_element / buckets, data_link);
    dp_calls = buckets;
  }
  if (level != ZeroLevel::kParameters) p.dp_comm_time = gradient_sync + parameter_gather;
  p.dp_exposed_time = gradient_sync * (a.overlap_grad_reduce ? 1 - hidden : 1) +
                      parameter_gather * (a.overlap_param_gather ? 1 - hidden : 1);
  if (pp > 1 && !config.untie_embeddings_and_output_weights && pipeline::schedule_placement(kind) == pipeline::Placement::kLoop) {
    const double embedding = static_cast<double>(config.padded_vocab_size / p.tensor * config.hidden_size);
    p.embedding_sync_time =
        all_reduce_time(2, embedding * gradient_element, pair_link(cluster, p.tensor * p.context * p.data * (p.pipeline - 1)));
  }
  return dp_calls;
}

// AdamW over the rank's owned parameters (of the largest stage's `parameters`, sharded over the
// optimizer instance's ranks with a distributed optimizer), on the device or partly offloaded: p's
// optimizer times.
absl::Status time_optimizer(const Arguments& a, double parameters, int dp, const RankShape& shape,
                            const Cluster& cluster, const RunOptions& options, Prediction& p) {
  const double element = a.bf16 || a.fp16 ? 2.0 : 4.0;
  const double owned =
      shards_optimizer(a) ? std::ceil(parameters / static_cast<double>(optimizer_instance_size(a, dp))) : parameters;
  GPT_ASSIGN_OR_RETURN(const OptimizerStep step,
                       optimizer_step({.owned_parameters = owned,
                                       .bytes_per_parameter = optimizer_bytes_per_parameter(a.bf16 || a.fp16),
                                       .parameter_bytes = element,
                                       .offload_fraction = offload_fraction(a),
                                       .overlap_offload_copies = options.overlap_offload_copies,
                                       .compute_stretch = shape.compute_stretch},
                                      cluster));
  p.optimizer_time = step.time;
  p.offload_copy_time = step.device_to_host + step.host_to_device;
  p.host_optimizer_time = step.host;
  p.offload_fraction = offload_fraction(a);
  return absl::OkStatus();
}

// The step's scalar all-reduces (train/trainer.cc): the loss over data x context, the gradient
// norm over the model-parallel group (and data x context when the optimizer is sharded), and
// the finite check over the pipeline: p.scalar_comm_time. Returns their calls.
double time_scalar_all_reduces(const Arguments& a, const RankShape& shape, int dp, const Link& data_link,
                               const Link& pipe_link, Prediction& p) {
  const int pp = static_cast<int>(p.pipeline);
  const Link model_link = pp > 1 ? pipe_link : shape.tensor_link;
  const int model_ranks = static_cast<int>(p.tensor * p.pipeline);
  double scalar_calls = 0;
  const auto scalar_all_reduce = [&](int ranks, const Link& link) {
    if (ranks <= 1) return;
    p.scalar_comm_time += all_reduce_time(ranks, 8.0, link);
    scalar_calls += 1;
  };
  scalar_all_reduce(dp, data_link);
  scalar_all_reduce(model_ranks, model_link);
  if (shards_optimizer(a)) scalar_all_reduce(dp, data_link);
  scalar_all_reduce(pp, pipe_link);
  return scalar_calls;
}

// What the overhead terms were charged for, per iteration on a rank (the embedding's and the
// output layer's shared over the stages): overhead_fit.h's features.
void count_calls(const RankPasses& r, double dp_calls, double scalar_calls, Prediction& p) {
  const int pp = static_cast<int>(p.pipeline);
  const int m = static_cast<int>(p.microbatches);
  const double rank_layers = static_cast<double>(r.rank_layers);
  const double recomputed_share = r.recomputed / static_cast<double>(std::max<int64_t>(r.chunk_layers, 1));
  const double per_layer_ops = p.layer.forward.op_calls * (1 + recomputed_share) + p.layer.backward.op_calls;
  const double layer_collectives =
      p.layer.forward.collective_calls * (1 + recomputed_share) + p.layer.backward.collective_calls;
  const double ends_ops = r.embed_f.op_calls + r.embed_b.op_calls + r.head_f.op_calls + r.head_b.op_calls;
  const double ends_collectives =
      r.embed_f.collective_calls + r.embed_b.collective_calls + r.head_f.collective_calls + r.head_b.collective_calls;
  p.op_calls = m * (rank_layers * per_layer_ops + ends_ops / pp);
  p.pass_calls = 2.0 * m * p.virtual_stages;
  p.collective_calls = m * (rank_layers * layer_collectives + ends_collectives / pp) + dp_calls + scalar_calls;
}
}  // namespace

absl::StatusOr<Arguments> parse_model_flags(std::vector<std::string> flags) {
  auto has = [&](std::string_view flag) {
    return std::any_of(flags.begin(), flags.end(), [&](const std::string& f) {
      return f == flag || (f.size() > flag.size() && f.starts_with(flag) && f[flag.size()] == '=');
    });
  };
  if (!has("--train-iters") && !has("--train-samples")) flags.insert(flags.end(), {"--train-iters", "1"});
  if (!has("--lr")) flags.insert(flags.end(), {"--lr", "1e-4"});
  if (!has("--mock-data") && !has("--data-path")) flags.push_back("--mock-data");
  flags.insert(flags.begin(), "perf_model");
  return parse_arguments(flags);
}

absl::StatusOr<Arguments> validate_layout(Arguments args, int64_t world_size) {
  if (world_size <= 0) return absl::InvalidArgumentError(absl::StrCat("--world-size must be positive (got ", world_size, ")"));
  // pretrain_gpt's checks of the layout without its expert grid (which the trainer may not run
  // yet), then Megatron's of the expert flags (expert_layout.h).
  Arguments checked = without_expert_grid(args);
  absl::Status valid = prepare_arguments(checked);
  if (valid.ok()) valid = prepare_for_world(checked, world_size);
  GPT_RETURN_IF_ERROR(valid);
  checked = with_expert_grid(std::move(checked), args);
  GPT_RETURN_IF_ERROR(check_expert_grid(checked, world_size));
  return checked;
}

namespace {

// A plan of the layout with EP 1 and ETP = TP (today's memory plan): move its routed experts to the expert grid
// (expert_layout.h). Each item keeps its bytes per element; a sharded item's expert part is
// sharded over EDP instead of DP x CP (optimizer state with ZeRO-1, gradients from ZeRO-2,
// parameters with ZeRO-3).
void apply_expert_grid(const Arguments& a, int64_t world, bool move_items, bool move_count, MemoryEstimate& m) {
  const ModelConfig config = model_config_from(a);
  const ExpertElements x = expert_elements(a, config, world);
  m.expert_parameters = x.actual;
  if (x.planned == x.actual || m.stage_parameters <= 0) return;
  const double elements = m.stage_parameters;
  if (move_count) m.stage_parameters = elements - x.planned + x.actual;
  if (!move_items) return;
  const ExpertGrid grid = expert_grid(a, world);
  const double dp = static_cast<double>(data_parallel_size(a, world) * a.context_parallel_size);
  const double spread = dp / static_cast<double>(grid.expert_data);  // expert shard / dense shard
  const ZeroLevel level = zero_level(a);
  const auto move = [&](double& bytes, bool sharded) {
    bytes += bytes / elements * (x.actual * (sharded ? spread : 1.0) - x.planned);
  };
  move(m.parameters, level >= ZeroLevel::kParameters);
  move(m.gradients, level >= ZeroLevel::kGradients);
  move(m.optimizer_state, level >= ZeroLevel::kOptimizer);
}

}  // namespace

absl::StatusOr<MemoryEstimate> estimate_memory(const Arguments& a, int64_t world_size,
                                               Implementation activations) {
  GPT_ASSIGN_OR_RETURN(const MemoryPlan plan, plan_memory(a, world_size, vocabulary_before_data(a)));
  // What the trainer allocates on its largest rank (the plan checked against the allocation at
  // every start, the schedule's stash slots included); the closed form's lower bounds for a layout
  // too large to enumerate.
  const RankMemory items = plan.allocated.value_or(RankMemory{.parameters = plan.parameters,
                                                                .gradients = plan.gradients,
                                                                .optimizer_state = plan.optimizer_state,
                                                                .activations = plan.activations});
  MemoryEstimate memory;
  memory.stage_parameters = static_cast<double>(plan.parameters) / (a.bf16 || a.fp16 ? 2.0 : 4.0);
  memory.parameters = static_cast<double>(items.parameters);
  memory.gradients = static_cast<double>(items.gradients);
  memory.optimizer_state = static_cast<double>(items.optimizer_state);
  memory.data_parallel_buffers = static_cast<double>(items.data_parallel_buffers);
  memory.activations = activations == Implementation::kTrainer
                           ? static_cast<double>(items.activations)
                           : megatron_activation_bytes(a, world_size);  // Megatron's model code (also under DeepSpeed)
  // The expert grid: moved onto the plan unless the plan already lays the experts out on it (a plan
  // that reads EP / ETP differs from the plan of the same layout without them), item by item: the
  // allocation's items, and the closed form's parameter count (the data-parallel traffic's).
  const ExpertGrid grid = expert_grid(a, world_size);
  bool items_on_grid = false, count_on_grid = false;
  if (grid.moe && (grid.expert_model > 1 || grid.expert_tensor != a.tensor_model_parallel_size)) {
    const Arguments flat = without_expert_grid(a);
    GPT_ASSIGN_OR_RETURN(const MemoryPlan without, plan_memory(flat, world_size, vocabulary_before_data(flat)));
    count_on_grid = without.parameters != plan.parameters;
    const RankMemory flat_items = without.allocated.value_or(RankMemory{.parameters = without.parameters,
                                                                          .gradients = without.gradients,
                                                                          .optimizer_state = without.optimizer_state,
                                                                          .activations = without.activations});
    items_on_grid = flat_items.parameters != items.parameters || flat_items.optimizer_state != items.optimizer_state;
  }
  apply_expert_grid(a, world_size, !items_on_grid, !count_on_grid, memory);
  return memory;
}

namespace {

absl::StatusOr<Prediction> predict_schedule(const Arguments& a, int64_t world_size, const Cluster& cluster,
                                            const RunOptions& options) {
  if (uses_cp_comm_type(a, ContextCommType::kAllToAllRing)) {
    return absl::InvalidArgumentError(
        "perf_model does not model --cp-comm-type a2a+p2p (the all-to-all over one level and the ring over the "
        "other): predict the layout with p2p or a2a");
  }
  const ModelConfig config = model_config_from(a);
  Prediction p;
  p.world = world_size;
  p.tensor = a.tensor_model_parallel_size;
  p.pipeline = a.pipeline_model_parallel_size;
  p.data = data_parallel_size(a, world_size);
  p.context = a.context_parallel_size;
  const bool all_to_all = uses_cp_comm_type(a, ContextCommType::kAllToAll);
  if (p.context > 1) p.cp_comm_type = enum_name(all_to_all ? ContextCommType::kAllToAll : ContextCommType::kRing);
  p.virtual_stages = virtual_pipeline_size(a);
  if (a.was_given("--decoder-first-pipeline-num-layers")) p.first_stage_layers = a.decoder_first_pipeline_num_layers;
  if (a.was_given("--decoder-last-pipeline-num-layers")) p.last_stage_layers = a.decoder_last_pipeline_num_layers;
  p.microbatches = num_microbatches(a, world_size);
  p.micro_batch = a.micro_batch_size;
  p.global_batch = a.global_batch_size;
  p.sequence_parallel = a.sequence_parallel && p.tensor > 1;
  p.distributed_optimizer = shards_optimizer(a);
  p.zero_level = static_cast<int>(zero_level(a));
  p.recompute = recompute_text(a);
  const ExpertGrid grid = expert_grid(a, world_size);
  if (grid.moe) {
    p.expert_model = grid.expert_model, p.expert_tensor = grid.expert_tensor, p.expert_data = grid.expert_data;
    p.dispatcher = a.moe_token_dispatcher_type;
    p.expert_imbalance = options.expert_imbalance;
  }
  const auto kind = pipeline_schedule_kind(a);
  p.schedule = pipeline::to_string(kind);

  const AttentionBackend backend = attention_backend(a);
  const bool unfused = backend == AttentionBackend::kUnfused || backend == AttentionBackend::kLocal;
  const RankShape shape = rank_shape(p, all_to_all, unfused, world_size, cluster, options);
  // The costs of one rank: S / CP rows of each sequence (model FLOPs stay the whole model's).
  ModelConfig local_config = config;
  local_config.seq_length = config.seq_length / p.context;
  RankPasses passes = rank_passes(a, config, local_config, shape, cluster, p);

  // Gradients are reduced (and ZeRO shards laid out) over the data x context group.
  const double element = a.bf16 || a.fp16 ? 2.0 : 4.0;
  const double gradient_element = a.bf16 && !a.accumulate_allreduce_grads_in_fp32 ? 2.0 : 4.0;
  const int dp = static_cast<int>(p.data * p.context);
  const Link data_link = group_link(cluster, static_cast<int>(p.tensor), dp);
  const ZeroLevel level = zero_level(a);
  if (level == ZeroLevel::kParameters && dp > 1) {
    const UnitShardingInput sharding{.data_ranks = dp, .data_link = data_link, .parameter_bytes = element,
                                     .gradient_bytes = gradient_element,
                                     .overlap_param_gather = a.overlap_param_gather,
                                     .overlap_grad_reduce = a.overlap_grad_reduce,
                                     .hidden_fraction = cluster.dp_comm_overlap_fraction};
    shard_units(config, local_config, shape, cluster, options, sharding, passes, p);
  }
  const Link pipe_link = pair_link(cluster, p.tensor * p.context * p.data);
  GPT_RETURN_IF_ERROR(time_pipeline(a, config, local_config, shape, cluster, kind, pipe_link, passes, p));

  // Memory, and the largest stage's parameters for the data-parallel traffic.
  GPT_ASSIGN_OR_RETURN(p.memory, estimate_memory(a, world_size, options.implementation));
  p.memory_available = cluster.memory_bytes - cluster.memory_reserved_bytes;
  p.fits = p.memory.total() <= p.memory_available;
  // The largest stage's parameters, unsharded (ZeRO-3's plan holds a shard: plan a ZeRO-2 copy).
  double parameters = p.memory.stage_parameters;
  if (level == ZeroLevel::kParameters) {
    Arguments unsharded = a;
    unsharded.data_parallel_sharding_strategy = "optim_grads";
    GPT_ASSIGN_OR_RETURN(const MemoryPlan plan, plan_memory(unsharded, world_size, vocabulary_before_data(a)));
    parameters = static_cast<double>(plan.parameters) / element;
  }
  double dp_calls = 0, optimized = parameters;
  const int edp = static_cast<int>(p.expert_data);
  if (p.memory.expert_parameters > 0 && level != ZeroLevel::kParameters) {
    // MoE: the dense parameters over DP x CP, the routed experts' over the expert DP group (EDP
    // ranks ETP x EP apart); the optimizer steps the owned shards of both.
    const double experts = p.memory.expert_parameters, dense = parameters - experts;
    Prediction expert_part = p;
    expert_part.tensor = p.expert_tensor * p.expert_model;  // the expert DP group's rank stride
    const Link expert_link = group_link(cluster, static_cast<int>(expert_part.tensor), edp);
    dp_calls = time_data_parallel(a, config, cluster, kind, dense, dp, data_link, passes.rank_layers, p);
    dp_calls += time_data_parallel(a, config, cluster, kind, experts, edp, expert_link, passes.rank_layers, expert_part);
    p.expert_dp_comm_time = expert_part.dp_comm_time;
    p.dp_comm_time += expert_part.dp_comm_time;
    p.dp_exposed_time += expert_part.dp_exposed_time;
    if (shards_optimizer(a)) {
      optimized = dense + experts * static_cast<double>(optimizer_instance_size(a, dp)) /
                              static_cast<double>(optimizer_instance_size(a, edp));
    }
  } else {
    dp_calls = time_data_parallel(a, config, cluster, kind, parameters, dp, data_link, passes.rank_layers, p);
  }
  GPT_RETURN_IF_ERROR(time_optimizer(a, optimized, dp, shape, cluster, options, p));
  const double scalar_calls = time_scalar_all_reduces(a, shape, dp, data_link, pipe_link, p);
  p.overhead_time = cluster.iteration_overhead + (dp_calls + scalar_calls) * cluster.collective_overhead * shape.compute_stretch;
  p.iteration_time = p.pipeline_time + p.dp_exposed_time + p.embedding_sync_time + p.scalar_comm_time +
                     p.optimizer_time + p.overhead_time;
  count_calls(passes, dp_calls, scalar_calls, p);

  p.model_flops = model_flops_per_iteration(config, a.global_batch_size);
  p.tflops_per_gpu = p.model_flops / p.iteration_time / static_cast<double>(world_size) / 1e12;
  p.mfu = p.tflops_per_gpu * 1e12 / cluster.peak_flops;
  p.tokens_per_s_per_gpu = static_cast<double>(a.global_batch_size * a.seq_length) / p.iteration_time /
                           static_cast<double>(world_size);
  return p;
}

}  // namespace

absl::StatusOr<Prediction> predict(const Arguments& a, int64_t world_size, const Cluster& cluster,
                                   const RunOptions& options) {
  if (a.pipeline_schedule != "auto") return predict_schedule(a, world_size, cluster, options);
  // pretrain_gpt's --pipeline-schedule auto: the fastest of the layout's schedules that fits, here
  // with the model's costs (the trainer chooses with FLOP counts or measured ones).
  std::optional<Prediction> best;
  const int p = static_cast<int>(a.pipeline_model_parallel_size), v = virtual_pipeline_size(a);
  for (pipeline::ScheduleKind kind : schedule_candidates(p, v, static_cast<int>(num_microbatches(a, world_size)))) {
    Arguments with_kind = a;
    with_kind.pipeline_schedule = pipeline::to_string(kind);
    GPT_ASSIGN_OR_RETURN(Prediction prediction, predict_schedule(with_kind, world_size, cluster, options));
    const bool better = !best || (prediction.fits && !best->fits) ||
                        (prediction.fits == best->fits && prediction.iteration_time < best->iteration_time);
    if (better) best = std::move(prediction);
  }
  if (!best) return absl::InvalidArgumentError("no pipeline schedule for this layout");
  return *best;
}

}  // namespace gpt::perf
