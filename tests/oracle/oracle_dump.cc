// Runs the project's own trainer on one process and writes what the PyTorch oracle needs to an
// HDF5 file: the configuration, the initial global weights, the token batches of every step, the
// logits and loss of one microbatch, the gradients of the first step, and the loss, gradient norm
// and learning rate of every step.
//
//   oracle_dump --output FILE --steps N <pretrain_gpt flags>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint/hdf5_file.h"
#include "core/memory.h"
#include "data/microbatch.h"
#include "data/mock_dataset.h"
#include "kernels/ops.h"
#include "train/trainer.h"

namespace gpt {
namespace {

std::vector<float> to_float32(Context& ctx, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  Tensor host_view(host.data(), DType::kFloat32, Shape({t.numel()}), Device::kCpu);
  if (t.dtype() == DType::kFloat32) {
    copy_bytes(Device::kCpu, host.data(), t.device(), t.data(), t.bytes());
  } else {
    ops::cast(ctx, host_view, t.flat_range(0, t.numel()));
  }
  return host;
}

std::vector<int64_t> shape_of(const Tensor& t) {
  std::vector<int64_t> shape;
  for (int i = 0; i < t.rank(); ++i) shape.push_back(t.size(i));
  return shape;
}

absl::Status write_params(Hdf5File& file, Trainer& trainer, const std::string& group, bool gradients) {
  for (const Param& param : trainer.params().params()) {
    const Tensor& t = gradients ? param.grad : param.value;
    const std::vector<float> values = to_float32(trainer.context(), t);
    GPT_RETURN_IF_ERROR(file.write(group + "/" + param.name(), shape_of(t), values.data()));
  }
  return absl::OkStatus();
}

absl::Status run(int argc, char** argv) {
  std::string output;
  int64_t steps = 10;
  std::vector<std::string> forwarded = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--output" && i + 1 < argc) {
      output = argv[++i];
    } else if (arg == "--steps" && i + 1 < argc) {
      steps = std::stoll(argv[++i]);
    } else {
      forwarded.push_back(arg);
    }
  }
  if (output.empty()) return absl::InvalidArgumentError("oracle_dump needs --output FILE");
  GPT_ASSIGN_OR_RETURN(Arguments args, parse_arguments(forwarded));
  GPT_RETURN_IF_ERROR(validate_arguments(args));
  std::unique_ptr<ProcessGrid> grid = ProcessGrid::single();
  GPT_RETURN_IF_ERROR(validate_for_world(args, 1));
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::create(args, *grid));
  const ModelConfig& config = trainer->config();
  const int64_t microbatches = num_microbatches(args, 1);

  GPT_ASSIGN_OR_RETURN(Hdf5File file, Hdf5File::create(output));
  const std::pair<const char*, int64_t> ints[] = {
      {"num_layers", config.num_layers}, {"hidden_size", config.hidden_size},
      {"ffn_hidden_size", config.ffn_hidden_size}, {"num_attention_heads", config.num_attention_heads},
      {"kv_channels", config.kv_channels}, {"seq_length", config.seq_length},
      {"vocab_size", config.vocab_size}, {"padded_vocab_size", config.padded_vocab_size},
      {"micro_batch_size", args.micro_batch_size}, {"global_batch_size", args.global_batch_size},
      {"num_microbatches", microbatches}, {"lr_warmup_iters", args.lr_warmup_iters},
      {"lr_decay_iters", args.lr_decay_iters}, {"steps", steps},
      {"untie_embeddings_and_output_weights", config.untie_embeddings_and_output_weights ? 1 : 0},
      {"bf16", args.bf16 ? 1 : 0}};
  for (const auto& [name, value] : ints) GPT_RETURN_IF_ERROR(file.set_attribute(name, value));
  const std::pair<const char*, double> doubles[] = {
      {"lr", args.lr},           {"min_lr", args.min_lr},         {"weight_decay", args.weight_decay},
      {"clip_grad", args.clip_grad}, {"adam_beta1", args.adam_beta1}, {"adam_beta2", args.adam_beta2},
      {"adam_eps", args.adam_eps}, {"norm_epsilon", args.norm_epsilon}};
  for (const auto& [name, value] : doubles) GPT_RETURN_IF_ERROR(file.set_attribute(name, value));
  GPT_RETURN_IF_ERROR(file.set_attribute("lr_decay_style", args.lr_decay_style));
  GPT_RETURN_IF_ERROR(write_params(file, *trainer, "initial", /*gradients=*/false));

  // Every step's token batches, read exactly as the trainer reads them.
  MockDataset data(static_cast<uint64_t>(args.seed), args.vocab_size, args.seq_length);
  std::vector<int32_t> tokens, targets;
  Microbatch microbatch;
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t j = 0; j < microbatches; ++j) {
      load_microbatch(data, step * args.global_batch_size, j, args.micro_batch_size, 1, 0, microbatch);
      tokens.insert(tokens.end(), microbatch.tokens.begin(), microbatch.tokens.end());
      targets.insert(targets.end(), microbatch.targets.begin(), microbatch.targets.end());
    }
  }
  const std::vector<int64_t> batch_shape = {steps, microbatches, args.micro_batch_size, args.seq_length};
  GPT_RETURN_IF_ERROR(file.write("tokens", batch_shape, tokens.data()));
  GPT_RETURN_IF_ERROR(file.write("targets", batch_shape, targets.data()));

  // Forward only of the first microbatch: logits [s*b, V_padded] in [s, b] row order, and loss.
  const double loss0 = trainer->evaluate_microbatch(0);
  const Tensor& logits = trainer->model().output_layer()->logits(0);
  const std::vector<float> logits_host = to_float32(trainer->context(), logits);
  GPT_RETURN_IF_ERROR(file.write("logits0", shape_of(logits), logits_host.data()));
  const float loss0_value = static_cast<float>(loss0);
  GPT_RETURN_IF_ERROR(file.write("loss0", {}, &loss0_value));

  std::vector<float> losses, grad_norms, learning_rates;
  for (int64_t step = 0; step < steps; ++step) {
    trainer->compute_gradients();
    if (step == 0) GPT_RETURN_IF_ERROR(write_params(file, *trainer, "grads", /*gradients=*/true));
    const StepResult result = trainer->apply_update();
    losses.push_back(static_cast<float>(result.loss));
    grad_norms.push_back(static_cast<float>(result.grad_norm));
    learning_rates.push_back(static_cast<float>(result.learning_rate));
  }
  GPT_RETURN_IF_ERROR(file.write("losses", {steps}, losses.data()));
  GPT_RETURN_IF_ERROR(file.write("grad_norms", {steps}, grad_norms.data()));
  GPT_RETURN_IF_ERROR(file.write("learning_rates", {steps}, learning_rates.data()));
  GPT_RETURN_IF_ERROR(write_params(file, *trainer, "final", /*gradients=*/false));
  return absl::OkStatus();
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  const absl::Status status = gpt::run(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
