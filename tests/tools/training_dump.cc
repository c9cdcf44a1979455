// Runs the project's trainer (any layout, under mpirun or alone) and writes one HDF5 file per rank
// with what the PyTorch oracle and the layout-parity tests compare:
//   attributes     the configuration and this rank's grid coordinates
//   initial/<name> this rank's slice of every parameter before training (float32)
//   grads/<name>   its slice of the first step's gradient (before clipping; of step K + 1 with
//                  --gradients-step K, e.g. once delayed FP8 scaling has a history)
//   final/<name>   its slice after the last step
//   layout/<name>  [row_offset, column_offset, global_rows, global_columns, gated_half_rows] of the
//                  slice (gated_half_rows > 0: SwiGLU's fc1, two halves; model/param_store.h)
//   tokens, targets [steps, microbatches, b, s] of this DP rank; logits0, loss0 of microbatch 0
//   losses, grad_norms, learning_rates [steps]
//
//   [mpirun -np N] training_dump --output PREFIX --steps N [--gradients-step K] <pretrain_gpt flags>
// writes PREFIX_rank<r>.h5.
#include <algorithm>
#include <string>
#include <vector>

#include "checkpoint/hdf5_file.h"
#include "core/memory.h"
#include "data/microbatch.h"
#include "data/mock_dataset.h"
#include "kernels/ops.h"
#include "train/launcher.h"
#include "train/trainer.h"

namespace gpt {
namespace {

std::vector<float> to_float32(Context& ctx, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kFloat32) {
    copy_bytes(Device::kCpu, host.data(), t.device(), t.data(), t.bytes());
  } else {
    Tensor host_view(host.data(), DType::kFloat32, Shape({t.numel()}), Device::kCpu);
    ops::cast(ctx, host_view, t.flat_range(0, t.numel()));
  }
  return host;
}

std::vector<int64_t> shape_of(const Tensor& t) {
  std::vector<int64_t> shape;
  for (int i = 0; i < t.rank(); ++i) shape.push_back(t.size(i));
  return shape;
}

// With the distributed optimizer each data-parallel rank holds the reduced gradient of its shards
// only, and under ZeRO-3 the values of its shards only: the whole is the sum over the group (data x
// context; with several distributed-optimizer instances, this rank's instance, which holds each
// shard once; for expert parameters apart, the expert data-parallel group) of every rank's shards
// (zero elsewhere). Host copies, so the MPI group takes them as
// they are (the dumps run on the CPU backend).
std::vector<float> whole_from_shards(Trainer& trainer, ProcessGrid& grid, bool gradients) {
  const int64_t elements = trainer.params().plan().flat_elements();
  std::vector<float> whole(static_cast<size_t>(elements), 0.0f);
  for (const Range& range : trainer.optimizer().owned()) {
    const Tensor part = gradients ? trainer.params().grads_in(range) : trainer.params().values_in(range);
    const std::vector<float> mine = to_float32(trainer.context(), part);
    std::copy(mine.begin(), mine.end(), whole.begin() + range.begin);
  }
  // Expert parameters laid out apart (after every dense one) are sharded over the expert
  // data-parallel group instead.
  const ShardPlan& plan = trainer.params().plan();
  int64_t dense_end = elements;
  for (const BucketPlan& bucket : plan.buckets()) {
    if (bucket.domain == ParamDomain::kExpert) dense_end = std::min(dense_end, bucket.range.begin);
  }
  grid.optimizer_instance().all_reduce(
      trainer.context(), Tensor(whole.data(), DType::kFloat32, Shape({dense_end}), Device::kCpu), ReduceOp::kSum);
  if (dense_end < elements) {
    grid.expert_data().all_reduce(trainer.context(),
                                  Tensor(whole.data() + dense_end, DType::kFloat32, Shape({elements - dense_end}),
                                         Device::kCpu),
                                  ReduceOp::kSum);
  }
  return whole;
}

// Every parameter slice's values or (first step's) gradients under `group`.
absl::Status write_params(Hdf5File& file, Trainer& trainer, ProcessGrid& grid, const std::string& group,
                          bool gradients) {
  // (ZeRO-2/3 hold the shards alone: ParamStore::grads_in / values_in read them wherever they are.)
  const std::vector<Range>& owned = trainer.optimizer().owned();
  const bool sharded_optimizer = !(owned.size() == 1 && owned[0] == Range{0, trainer.params().plan().flat_elements()});
  const bool sharded = gradients ? sharded_optimizer : trainer.params().sharded_parameters();
  std::vector<float> whole;
  if (sharded) whole = whole_from_shards(trainer, grid, gradients);
  for (const Param& param : trainer.params().params()) {
    std::vector<int64_t> shape;
    for (int i = 0; i < param.local_shape.rank(); ++i) shape.push_back(param.local_shape[i]);
    if (sharded) {
      GPT_RETURN_IF_ERROR(file.write(group + "/" + param.name(), shape, whole.data() + param.flat_offset));
      continue;
    }
    const std::vector<float> values = to_float32(trainer.context(), gradients ? param.grad : param.value);
    GPT_RETURN_IF_ERROR(file.write(group + "/" + param.name(), shape, values.data()));
  }
  return absl::OkStatus();
}

absl::Status write_layout(Hdf5File& file, Trainer& trainer) {
  for (const Param& param : trainer.params().params()) {
    const auto& global = param.spec->global_shape;
    const int64_t layout[5] = {param.row_offset, param.column_offset, global[0], global.size() == 2 ? global[1] : 1,
                               param.placement->slice.gated_half_rows};
    GPT_RETURN_IF_ERROR(file.write("layout/" + param.name(), {5}, layout));
  }
  return absl::OkStatus();
}

absl::Status write_attributes(Hdf5File& file, const Arguments& args, const ModelConfig& config, const ProcessGrid& grid,
                              int64_t steps) {
  const std::pair<const char*, int64_t> ints[] = {
      {"num_layers", config.num_layers}, {"hidden_size", config.hidden_size},
      {"ffn_hidden_size", config.ffn_hidden_size}, {"num_attention_heads", config.num_attention_heads},
      {"kv_channels", config.kv_channels}, {"seq_length", config.seq_length},
      {"max_position_embeddings", config.max_position_embeddings},
      {"vocab_size", config.vocab_size}, {"padded_vocab_size", config.padded_vocab_size},
      {"micro_batch_size", args.micro_batch_size}, {"global_batch_size", args.global_batch_size},
      {"num_microbatches", num_microbatches(args, grid.world_size())}, {"lr_warmup_iters", args.lr_warmup_iters},
      {"lr_decay_iters", args.lr_decay_iters}, {"steps", steps},
      {"untie_embeddings_and_output_weights", config.untie_embeddings_and_output_weights ? 1 : 0},
      {"bf16", args.bf16 ? 1 : 0}, {"world_size", grid.world_size()}, {"world_rank", grid.world_rank()},
      {"tensor_rank", grid.coordinates().tensor}, {"pipeline_rank", grid.coordinates().pipeline},
      {"data_rank", grid.coordinates().data}, {"tensor_size", grid.shape().tensor},
      {"pipeline_size", grid.shape().pipeline}, {"data_size", grid.shape().data},
      // Model family (resolved: num_query_groups is the head count without GQA, rotary_dim 0
      // without RoPE).
      {"num_query_groups", config.query_groups()}, {"rotary_dim", config.rotary_dim},
      {"rotary_interleaved", config.rotary_interleaved ? 1 : 0},
      {"swiglu", config.swiglu ? 1 : 0}, {"disable_bias_linear", args.disable_bias_linear ? 1 : 0},
      {"exact_gelu", config.exact_gelu ? 1 : 0}, {"squared_relu", config.squared_relu ? 1 : 0},
      {"apply_layernorm_1p", config.layernorm_zero_centered_gamma ? 1 : 0},
      {"qk_layernorm", config.qk_layernorm ? 1 : 0},
      {"add_qkv_bias", config.has_qkv_bias() ? 1 : 0}, {"use_rope_scaling", config.rope_scaling.enabled ? 1 : 0},
      {"apply_wd_to_qk_layernorm", config.apply_wd_to_qk_layernorm ? 1 : 0},
      {"seed", args.seed}};
  for (const auto& [name, value] : ints) GPT_RETURN_IF_ERROR(file.set_attribute(name, value));
  const std::pair<const char*, double> doubles[] = {
      {"lr", args.lr},               {"min_lr", args.min_lr},         {"weight_decay", args.weight_decay},
      {"clip_grad", args.clip_grad}, {"adam_beta1", args.adam_beta1}, {"adam_beta2", args.adam_beta2},
      {"adam_eps", args.adam_eps},   {"norm_epsilon", args.norm_epsilon},
      {"rotary_percent", args.rotary_percent}, {"rotary_base", args.rotary_base},
      {"rope_scaling_factor", args.rope_scaling_factor},
      {"hidden_dropout", args.hidden_dropout}, {"attention_dropout", args.attention_dropout},
      {"decoupled_lr", args.decoupled_lr}, {"decoupled_min_lr", args.decoupled_min_lr}};
  for (const auto& [name, value] : doubles) GPT_RETURN_IF_ERROR(file.set_attribute(name, value));
  const std::pair<const char*, std::string> strings[] = {{"lr_decay_style", args.lr_decay_style},
                                                         {"position_embedding_type", args.position_embedding_type},
                                                         {"normalization", args.normalization}};
  for (const auto& [name, value] : strings) GPT_RETURN_IF_ERROR(file.set_attribute(name, value));
  return absl::OkStatus();
}

absl::Status dump(const Arguments& args, ProcessGrid& grid, const std::map<std::string, std::string>& own) {
  if (!own.count("--output")) return absl::InvalidArgumentError("training_dump needs --output PREFIX");
  const int64_t steps = own.count("--steps") ? std::stoll(own.at("--steps")) : 10;
  const int64_t gradients_step = own.count("--gradients-step") ? std::stoll(own.at("--gradients-step")) : 0;
  if (gradients_step < 0 || gradients_step >= steps) {
    return absl::InvalidArgumentError("training_dump: --gradients-step must be in [0, --steps)");
  }
  // The dump's token arrays are [steps, microbatches, ...]: one number of microbatches.
  if (!args.rampup_batch_size.empty() || args.was_given("--step-batch-size-schedule")) {
    return absl::InvalidArgumentError("training_dump: a constant --global-batch-size only (the batch_size_rampup "
                                      "test covers ramp-up and step schedules)");
  }
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::create(args, grid));
  const std::string path = own.at("--output") + "_rank" + std::to_string(grid.world_rank()) + ".h5";
  GPT_ASSIGN_OR_RETURN(Hdf5File file, Hdf5File::create(path));
  GPT_RETURN_IF_ERROR(write_attributes(file, args, trainer->config(), grid, steps));
  GPT_RETURN_IF_ERROR(write_layout(file, *trainer));
  GPT_RETURN_IF_ERROR(write_params(file, *trainer, grid, "initial", /*gradients=*/false));

  // This DP rank's token batches for every step, read exactly as the trainer reads them.
  const int64_t microbatches = num_microbatches(args, grid.world_size());
  MockDataset data(static_cast<uint64_t>(args.seed), args.vocab_size, args.seq_length);
  std::vector<int32_t> tokens, targets;
  Microbatch microbatch;
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t j = 0; j < microbatches; ++j) {
      load_microbatch(data, step * args.global_batch_size, j, args.micro_batch_size, grid.shape().data,
                      grid.coordinates().data, microbatch);
      tokens.insert(tokens.end(), microbatch.tokens.begin(), microbatch.tokens.end());
      targets.insert(targets.end(), microbatch.targets.begin(), microbatch.targets.end());
    }
  }
  const std::vector<int64_t> batch_shape = {steps, microbatches, args.micro_batch_size, args.seq_length};
  GPT_RETURN_IF_ERROR(file.write("tokens", batch_shape, tokens.data()));
  GPT_RETURN_IF_ERROR(file.write("targets", batch_shape, targets.data()));

  // Forward only of microbatch 0: this rank's logits [s*b, V_padded / TP] ([s, b] rows) and loss
  // (single-stage layouts; with pipeline stages the losses below are what is compared).
  if (grid.shape().pipeline == 1) {
    const float loss0 = static_cast<float>(trainer->evaluate_microbatch(0));
    const Tensor& logits = trainer->chunk(0).output_layer()->logits(0);
    const std::vector<float> logits_host = to_float32(trainer->context(), logits);
    GPT_RETURN_IF_ERROR(file.write("logits0", shape_of(logits), logits_host.data()));
    GPT_RETURN_IF_ERROR(file.write("loss0", {}, &loss0));
  }

  std::vector<float> losses, grad_norms, learning_rates;
  for (int64_t step = 0; step < steps; ++step) {
    trainer->compute_gradients();
    if (step == gradients_step) GPT_RETURN_IF_ERROR(write_params(file, *trainer, grid, "grads", /*gradients=*/true));
    const StepResult result = trainer->apply_update();
    losses.push_back(static_cast<float>(result.loss));
    grad_norms.push_back(static_cast<float>(result.grad_norm));
    learning_rates.push_back(static_cast<float>(result.learning_rate));
  }
  GPT_RETURN_IF_ERROR(file.write("losses", {steps}, losses.data()));
  GPT_RETURN_IF_ERROR(file.write("grad_norms", {steps}, grad_norms.data()));
  GPT_RETURN_IF_ERROR(file.write("learning_rates", {steps}, learning_rates.data()));
  trainer->synchronize_parameters();
  return write_params(file, *trainer, grid, "final", /*gradients=*/false);
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  return gpt::launch(argc, argv, {.own_flags_with_value = {"--output", "--steps", "--gradients-step"}, .print_layout = false}, gpt::dump);
}
