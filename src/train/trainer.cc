#include "train/trainer.h"

#include <array>

#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/stream_copy.h"
#include "core/timer.h"
#include "kernels/ops.h"
#include "optim/grad_clip.h"
#include "optim/log_norms.h"
#include "parallel/comm/mpi_runtime.h"
#include "train/rank_agreement.h"
#include "train/report/log_line.h"
#include "train/resilience/fault_injection.h"

namespace gpt {

int64_t Trainer::scheduler_samples_implied() const {
  return batches_.is_constant() ? updates_done() * args_.global_batch_size : consumed_samples_;
}

void Trainer::begin_batch() {
  global_batch_size_ = batches_.batch_size_at(consumed_samples_);
  const int64_t per_microbatch = args_.micro_batch_size * data_parallel_size_;
  // A batch that does not divide is refused before any step trains it (run():
  // check_batch_sizes_reached); compute_gradients checks that none gets there.
  if (global_batch_size_ % per_microbatch != 0) return;
  microbatches_ = global_batch_size_ / per_microbatch;
  forward_backward_->set_train_microbatches(microbatches_);
}

void Trainer::set_scheduler(const LrScheduleConfig& schedule, const LrScheduleConfig& decoupled_schedule,
                            double weight_decay) {
  schedule_ = schedule;
  decoupled_schedule_ = decoupled_schedule;
  optimizer_->set_weight_decay(static_cast<float>(weight_decay));
}

void Trainer::report_non_finite_gradient() {
  const Param* bad = first_non_finite_gradient(ctx_, *params_, norm_scratch_, optimizer_->owned());
  // The lowest world rank that holds one names it: a max-reduction of (world size - rank).
  const float mine = bad ? static_cast<float>(grid_.world_size() - grid_.world_rank()) : 0.0f;
  copy_to_device(ctx_, norm_scratch_, &mine);
  grid_.world().all_reduce(ctx_, norm_scratch_, ReduceOp::kMax);
  float first = 0.0f;
  copy_to_host(ctx_, &first, norm_scratch_);
  ctx_.synchronize();
  if (bad && first == mine) {
    GPT_LOG_WARNING() << "iteration " << iteration_ + 1 << ": the gradient norm is not finite; the first non-finite "
                      << "gradient is " << bad->name() << "; the update is skipped on every rank";
  }
}

double Trainer::mean_token_loss(int64_t microbatches, int64_t ranks) const {
  float total = 0.0f;
  copy_to_host(ctx_, &total, loss_sum_);
  ctx_.synchronize();  // this stream only: the loss is the last thing the step queued
  const double tokens = static_cast<double>(args_.seq_length * args_.micro_batch_size * microbatches) *
                        static_cast<double>(ranks);
  return static_cast<double>(total) / tokens;
}

double Trainer::read_and_reduce_loss(int64_t microbatches) {
  // The context-parallel ranks of a replica each summed the losses of their chunks' tokens.
  if (grid_.data_context().size() > 1) grid_.data_context().all_reduce(ctx_, loss_sum_, ReduceOp::kSum);
  // ZB-V computes the loss on the first pipeline rank; the logging rank (Megatron's last) and the
  // finiteness check of every stage take it from the pipeline group, whose other ranks add zero.
  if (loss_on_first_stage_ && grid_.pipeline().size() > 1) grid_.pipeline().all_reduce(ctx_, loss_sum_, ReduceOp::kSum);
  return mean_token_loss(microbatches, data_parallel_size_);
}

void Trainer::set_data_position(const DataPosition& position, int64_t iteration) {
  consumed_samples_ = position.consumed_train_samples;
  consumed_valid_samples_ = position.consumed_valid_samples;
  iteration_ = iteration;
  scheduler_position_->set(scheduler_samples_implied());
  begin_batch();
}

double Trainer::evaluate(Split split, bool verbose) {
  const SampleSource* source = split == Split::kTest ? test_data_.get() : valid_data_.get();
  GPT_CHECK(source != nullptr) << "evaluation without a validation/test split";
  int64_t consumed = split == Split::kTest ? 0 : consumed_valid_samples_;
  // Megatron's progress lines (print_rank_0) for the evaluations after training.
  const bool progress = verbose && grid_.world_rank() == 0;
  if (progress) std::printf("Evaluating on %lld samples\n", static_cast<long long>(args_.eval_iters * args_.global_batch_size));
  collect_phase_timers();  // evaluation is not timed (as in Megatron): training's phases so far
  ops::zero(ctx_, loss_sum_);
  for (int64_t iteration = 0; iteration < args_.eval_iters; ++iteration) {
    if (progress) {
      std::printf("Evaluating iter %lld/%lld\n", static_cast<long long>(iteration + 1),
                  static_cast<long long>(args_.eval_iters));
      std::fflush(stdout);
    }
    feed_->start(*source, consumed, {loss_sum_, std::nullopt});
    forward_backward_->run(ctx_, grid_.pipeline(), Pass::kEvaluate);
    consumed += args_.global_batch_size;
  }
  phase_timer::take();  // the evaluation's own phases, dropped
  if (split == Split::kValid) consumed_valid_samples_ = consumed;
  return read_and_reduce_loss(eval_microbatches_ * args_.eval_iters);
}

void Trainer::print_evaluation(const std::string& where, double loss) const {
  if (!grid_.is_logging_rank()) return;
  const std::string line = format_validation_line(where, loss);
  const std::string rule(line.size() + 1, '-');
  std::printf("%s\n%s\n%s\n", rule.c_str(), line.c_str(), rule.c_str());
  std::fflush(stdout);
}

absl::Status Trainer::check_finite(const StepResult& step) {
  // An overflow the loss scaler skipped is not an error (Megatron's check is of the loss, and of
  // gradients before scaling takes them over).
  const bool loss_bad = !std::isfinite(step.loss), norm_bad = !step.overflow && !std::isfinite(step.grad_norm);
  const int size = grid_.world_size(), rank = grid_.world_rank();
  // The lowest rank that saw it, as a maximum: size - rank (0: none did). The norm is the same on
  // every rank, and so is the loss within a pipeline stage (reduced over data-parallel ranks,
  // equal over tensor-parallel ones): only the stages before the last need to hear of it, from
  // their pipeline group, which holds one last-stage rank. No collective at all without PP.
  float lowest = loss_bad || norm_bad ? static_cast<float>(size - rank) : 0.0f;
  if (grid_.pipeline().size() > 1) {
    const Tensor scratch = timing_scratch_.flat_range(0, 1);
    copy_to_device(ctx_, scratch, std::span<const float>(&lowest, 1));
    grid_.pipeline().all_reduce(ctx_, scratch, ReduceOp::kMax);
    copy_to_host(ctx_, &lowest, scratch);
    ctx_.synchronize();
  }
  if (lowest == 0.0f) return absl::OkStatus();
  if (!loss_bad && !norm_bad) return peer_failure("training", size - static_cast<int>(lowest));
  return absl::FailedPreconditionError(absl::StrCat(
      "iteration ", iteration_, ": ", loss_bad ? "the loss is " : "the gradient norm is ",
      loss_bad ? absl::StrCat(step.loss) : absl::StrCat(step.grad_norm),
      " (Megatron's --check-for-nan-in-loss-and-grad, on by default, stops the run; "
      "--no-check-for-nan-in-loss-and-grad skips the updates of such iterations instead and counts them)"));
}

StepResult Trainer::train_step() {
  compute_gradients();
  if (rerun_ == nullptr) return apply_update();
  const bool holds_loss = grid_.coordinates().pipeline == grid_.shape().pipeline - 1;
  const RerunHooks hooks{
      .rerun_forward_backward = [this] { compute_gradients(); },
      .local_loss = [&]() -> std::optional<double> {
        return holds_loss ? std::optional<double>(mean_token_loss(microbatches_, 1)) : std::nullopt;
      },
      .corrupt_local_loss =
          [this](float factor_or_nan) {
            float sum = 0.0f;
            copy_to_host(ctx_, &sum, loss_sum_);
            ctx_.synchronize();
            sum = std::isnan(factor_or_nan) ? factor_or_nan : sum * factor_or_nan;
            copy_to_device(ctx_, loss_sum_, std::span<const float>(&sum, 1));
          },
      .microbatches = microbatches_};
  const RerunDecision decision = rerun_->check(iteration_ + 1, consumed_samples_, global_batch_size_, hooks);
  if (decision.next != RerunDecision::Next::kSaveAndExit) {
    return apply_update(decision.next == RerunDecision::Next::kSkipUpdate);
  }
  StepResult stopped;  // no update: the checkpoint holds the state before this iteration
  stopped.exit_code = decision.exit_code;
  stopped.exit_reason = decision.reason;
  stopped.exit_saves = decision.save;
  return stopped;
}

double Trainer::evaluate_microbatch(int64_t microbatch) {
  GPT_CHECK(chunks_.size() == 1 && grid_.shape().pipeline == 1) << "evaluate_microbatch needs a single-stage model";
  ops::zero(ctx_, loss_sum_);
  feed_->start(*train_data_, consumed_samples_, {loss_sum_, std::nullopt});
  feed_->load(ctx_, *chunks_[0], 0, microbatch);
  chunks_[0]->set_position(0, feed_->position(microbatch));
  chunks_[0]->forward(ctx_, 0, std::nullopt, feed_->loss());
  return mean_token_loss(1, 1);  // this rank's microbatch alone
}

void Trainer::compute_gradients() {
  begin_batch();
  GPT_CHECK_EQ(global_batch_size_, microbatches_ * args_.micro_batch_size * data_parallel_size_)
      << "global batch size at " << consumed_samples_ << " consumed samples (run() refuses one that does not divide)";
  params_->zero_grads(ctx_);
  for (auto& chunk : chunks_) chunk->restart_moe_iteration();
  ops::zero(ctx_, loss_sum_);
  const int64_t tokens_per_microbatch = args_.seq_length * args_.micro_batch_size;
  // Gradient of the mean token loss over the whole global batch, times the loss scale (Megatron
  // multiplies the loss by it before backward; the main gradients are unscaled in apply_update).
  const float grad_scale =
      1.0f / static_cast<float>(tokens_per_microbatch * microbatches_ * data_parallel_size_) * loss_scale();
  // Dropout masks are keyed by the iteration being trained (1-based, as logged).
  feed_->start(*train_data_, consumed_samples_, {loss_sum_, grad_scale}, /*training_iteration=*/iteration_ + 1);
  data_parallel_->start_iteration(ctx_);
  if (fp8_) fp8_->begin_step();
  Stopwatch phase;
  forward_backward_->run(ctx_, grid_.pipeline(), Pass::kTrain);
  // Delayed FP8 scaling: this step's amaxes into the history, the next step's scales (collective).
  if (fp8_) fp8_->end_step(ctx_, grid_.world());
  maybe_inject_delay(grid_.world_rank());
  end_phase(phase, phases_.forward_backward);
  data_parallel_->finish_gradients(ctx_);
  end_phase(phase, phases_.all_grads_sync);
}

void Trainer::end_phase(Stopwatch& since, double& total) {
  if (!phase_clock_) return;
  ctx_.synchronize();
  total += since.elapsed_seconds();
  since.restart();
}

void Trainer::collect_phase_timers() {
  const std::array<double, phase_timer::kPhases> ms = phase_timer::take();
  for (int p = 0; p < phase_timer::kPhases; ++p) phases_.fine_ms[p] += ms[p];
}

std::vector<PhaseTiming> Trainer::phase_timings(int64_t iterations, bool reset) {
  using phase_timer::Phase;
  collect_phase_timers();
  // Megatron's order: forward-backward, its parts (level 2), all-grads-sync, params-all-gather
  // (level 2), optimizer. Milliseconds per iteration.
  const double n = static_cast<double>(std::max<int64_t>(1, iterations));
  std::vector<std::pair<std::string, double>> mine = {{"forward-backward", phases_.forward_backward * 1e3 / n}};
  auto fine_phase = [&](Phase p) { mine.push_back({phase_timer::name(p), phases_.fine_ms[static_cast<int>(p)] / n}); };
  if (args_.timing_log_level >= 2) {
    for (Phase p : {Phase::kForwardCompute, Phase::kBackwardCompute, Phase::kBatchGenerator, Phase::kPipelineSendRecv,
                    Phase::kTensorParallelComm}) {
      fine_phase(p);
    }
  }
  mine.push_back({"all-grads-sync", phases_.all_grads_sync * 1e3 / n});
  if (args_.timing_log_level >= 2) fine_phase(Phase::kParamsAllGather);
  mine.push_back({"optimizer", phases_.optimizer * 1e3 / n});
  // (min, max) over the world: one max-reduction of (t, -t).
  const size_t count = mine.size();
  std::vector<float> values(2 * count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = static_cast<float>(mine[i].second);
    values[count + i] = -static_cast<float>(mine[i].second);
  }
  const Tensor scratch = timing_scratch_.flat_range(0, static_cast<int64_t>(2 * count));
  copy_to_device(ctx_, scratch, std::span<const float>(values));
  grid_.world().all_reduce(ctx_, scratch, ReduceOp::kMax);
  copy_to_host(ctx_, values.data(), scratch);
  ctx_.synchronize();
  if (reset) phases_ = {};
  std::vector<PhaseTiming> out;
  for (size_t i = 0; i < count; ++i) out.push_back({mine[i].first, -values[count + i], values[i]});
  return out;
}

NormGroups Trainer::norm_groups() {
  // With sharded gradients each data-parallel rank holds the sums of its shards only; each
  // distributed-optimizer instance holds every shard once (and every instance the same sums).
  // Expert parameters apart (EP-DESIGN.md): each expert once over 'tp-ep-pp', its shards over the
  // expert data-parallel group.
  NormGroups groups{.dense = {&grid_.model_parallel()}};
  if (data_parallel_->distributed_optimizer()) groups.dense.push_back(&grid_.optimizer_instance());
  if (params_->plan().experts_apart()) {
    groups.expert = {&grid_.expert_tensor_model_pipeline()};
    if (data_parallel_->distributed_optimizer()) groups.expert.push_back(&grid_.expert_data());
  }
  return groups;
}

std::vector<Communicator*> Trainer::overflow_groups() {
  if (params_->plan().experts_apart()) return {&grid_.world()};
  return norm_groups().dense;
}

double Trainer::params_norm() { return domain_params_norm(ctx_, *params_, *optimizer_, norm_scratch_, norm_groups()); }

int64_t Trainer::zero_gradients() {
  return domain_zero_gradients(ctx_, *params_, optimizer_->owned(), zeros_scratch_, norm_groups());
}

void Trainer::maybe_inject_gradient_fault() {
  if (!gradient_fault_at(iteration_ + 1, grid_.world_rank())) return;
  // The first element this rank's optimizer reads (its owned gradients), so that the check sees it
  // here whatever the sharding.
  const std::span<const Range> owned = optimizer_->owned();
  const int64_t at = owned.empty() ? 0 : owned.front().begin;
  const float infinity = INFINITY;
  copy_to_device(ctx_, params_->flat_grads().flat_range(at, 1), &infinity);
  ctx_.synchronize();
  GPT_LOG_WARNING() << "GPT_GRADIENT_FAULT: an infinite gradient on rank " << grid_.world_rank() << " at iteration "
                    << iteration_ + 1;
}

StepResult Trainer::apply_update(bool skip_update) {
  StepResult result;
  Stopwatch phase;
  maybe_inject_gradient_fault();
  result.learning_rate = learning_rate_at(schedule_, scheduler_position_->samples());
  // Megatron's finalize_model_grads moves the expert bias before the optimizer, skipped step or not.
  if (config_.moe.enabled()) finish_moe_iteration(result);
  // Megatron's mixed-precision step: unscale the main gradients and check them over every rank
  // that holds gradients; an overflow anywhere skips the update everywhere, before the norm.
  result.overflow = loss_scaling_ && loss_scaling_->unscale_and_check(ctx_, *params_, optimizer_->owned(),
                                                                      zeros_scratch_, norm_scratch_, overflow_groups());
  result.grad_norm =
      result.overflow ? NAN : domain_grad_norm(ctx_, *params_, norm_scratch_, norm_groups(), optimizer_->owned());
  if (result.overflow || skip_update) {
    result.skipped = true;
  } else if (std::isfinite(result.grad_norm)) {
    // Both rates follow one scheduler position (Megatron's param groups share its num_steps).
    const double decoupled_learning_rate = learning_rate_at(decoupled_schedule_, scheduler_position_->samples());
    optimizer_->step(ctx_, static_cast<float>(result.learning_rate), static_cast<float>(decoupled_learning_rate),
                     clip_coefficient(result.grad_norm, args_.clip_grad));
    data_parallel_->after_step(ctx_);
    end_phase(phase, phases_.optimizer);
  } else {
    // Every rank sees the same norm and skips; the first rank holding a non-finite gradient names it.
    result.skipped = true;
    report_non_finite_gradient();
  }
  result.loss = read_and_reduce_loss(microbatches_);
  ++iteration_;
  consumed_samples_ += global_batch_size_;
  // Megatron's scheduler steps by the iteration's samples after an update (not after an overflow).
  if (!result.overflow) scheduler_position_->advance(global_batch_size_);
  return result;
}

void Trainer::finish_moe_iteration(StepResult& result) {
  // Per layer, over this rank's MoE layers and microbatches: the four losses and the tokens per
  // expert, at [layer (4 + E)], then summed over every rank: each TP rank holds the whole value
  // (it routes every row), CP (and, for global_aux_loss, DP) ranks hold parts of it, PP stages hold
  // other layers.
  const int64_t layers = config_.num_layers, experts = config_.moe.num_experts, width = 4 + experts;
  std::vector<float> sums(static_cast<size_t>(layers * width), 0.0f);
  for (auto& chunk : chunks_) {
    chunk->finish_moe_iteration(ctx_, grid_.data_context());
    for (const MoeLayerMetrics& layer : chunk->take_moe_metrics()) {
      float* row = &sums[static_cast<size_t>(layer.layer * width)];
      row[0] = static_cast<float>(layer.load_balancing_loss);
      row[1] = static_cast<float>(layer.seq_load_balancing_loss);
      row[2] = static_cast<float>(layer.z_loss);
      row[3] = static_cast<float>(layer.global_load_balancing_loss);
      for (int64_t e = 0; e < experts; ++e) row[4 + e] = static_cast<float>(layer.tokens_per_expert[static_cast<size_t>(e)]);
    }
  }
  copy_to_device(ctx_, moe_scratch_, std::span<const float>(sums));
  grid_.world().all_reduce(ctx_, moe_scratch_, ReduceOp::kSum);
  copy_to_host(ctx_, sums.data(), moe_scratch_);
  ctx_.synchronize();
  // Megatron's scaling: summed over TP x CP, averaged over DP (global_aux_loss: summed over DP too,
  // its ranks' shares making the global batch's loss) and the microbatches; the log line's value
  // averaged over the MoE layers.
  const double tp = static_cast<double>(grid_.shape().tensor);
  const double per_layer = tp * static_cast<double>(data_parallel_size_) * static_cast<double>(microbatches_);
  const double per_layer_global = tp * static_cast<double>(microbatches_);
  const double moe_layers = static_cast<double>(config_.moe.moe_layer_count());
  struct Tracked {
    const char* name;
    int index;
    double divisor;
  };
  std::vector<Tracked> tracked;
  for (const MoeLoss& loss : config_.moe.losses) {
    if (loss.coefficient <= 0) continue;
    if (loss.type == LoadBalancing::kSeqAuxLoss) {
      tracked.push_back({"seq_load_balancing_loss", 1, per_layer});
    } else if (loss.type == LoadBalancing::kGlobalAuxLoss) {
      tracked.push_back({"global_load_balancing_loss", 3, per_layer_global});
    } else {
      tracked.push_back({"load_balancing_loss", 0, per_layer});
    }
  }
  if (config_.moe.z_loss_coeff > 0) tracked.push_back({"z_loss", 2, per_layer});
  for (const Tracked& t : tracked) {
    double sum = 0.0;
    for (int64_t l = 0; l < layers; ++l) sum += sums[static_cast<size_t>(l * width + t.index)];
    result.moe_losses.emplace_back(t.name, sum / (t.divisor * moe_layers));
    if (!config_.moe.per_layer_logging) continue;
    for (int64_t l = 0; l < layers; ++l) {
      result.moe_layer_losses.emplace_back(absl::StrCat("moe/", t.name, "_layer_", l),
                                           sums[static_cast<size_t>(l * width + t.index)] / t.divisor);
    }
  }
  for (int64_t l = 0; l < layers; ++l) {
    if (!config_.moe.is_moe_layer(l)) continue;
    std::vector<double> tokens(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) tokens[static_cast<size_t>(e)] = sums[static_cast<size_t>(l * width + 4 + e)] / tp;
    result.moe_tokens_per_expert.emplace_back(l, std::move(tokens));
  }
}

}  // namespace gpt
