#include "gtest/gtest.h"
#include "train/report/flops.h"
#include "train/report/log_line.h"

namespace gpt {
namespace {

// A line printed by Megatron-LM (megatron/training/training.py, training_log), reproduced character for
// character.
TEST(LogLine, MatchesMegatronExactly) {
  IterationLog log;
  log.iteration = 2;
  log.train_iters = 250000000;
  log.consumed_samples = 8;
  log.elapsed_ms_per_iteration = 370.3;
  log.tflops_per_gpu = 0.6;
  log.learning_rate = 1e-5;
  log.global_batch_size = 4;
  log.lm_loss = 6.158036;
  log.grad_norm = 110.614;
  log.tokens_per_second_per_gpu = 5531.6;
  // With --log-throughput: Megatron's line plus this program's tokens field after the TFLOP/s one.
  EXPECT_EQ(format_log_line(log, "2025-02-20 11:18:37", {.throughput = true}),
            " [2025-02-20 11:18:37] iteration        2/250000000 | consumed samples:            8 | elapsed time "
            "per iteration (ms): 370.3 | throughput per GPU (TFLOP/s/GPU): 0.6 | tokens per GPU (tokens/s/GPU): "
            "5531.6 | learning rate: 1.000000E-05 | "
            "global batch size:     4 | lm loss: 6.158036E+00 | loss scale: 1.0 | grad norm: 110.614 | number of "
            "skipped iterations:   0 | number of nan iterations:   0 |");
  // Without it Megatron prints no throughput field.
  EXPECT_EQ(format_log_line(log, "2025-02-20 11:18:37", {}),
            " [2025-02-20 11:18:37] iteration        2/250000000 | consumed samples:            8 | elapsed time "
            "per iteration (ms): 370.3 | learning rate: 1.000000E-05 | "
            "global batch size:     4 | lm loss: 6.158036E+00 | loss scale: 1.0 | grad norm: 110.614 | number of "
            "skipped iterations:   0 | number of nan iterations:   0 |");
}

// --log-num-zeros-in-grad and --log-params-norm: Megatron's fields after the grad norm.
TEST(LogLine, OptionalNormFieldsInMegatronsPlace) {
  IterationLog log;
  log.iteration = 10;
  log.train_iters = 10;
  log.lm_loss = 1.0;
  log.grad_norm = 0.5;
  log.num_zeros_in_grad = 1234;
  log.params_norm = 17.25;
  const std::string line = format_log_line(log, "2025-02-20 11:18:37", {});
  EXPECT_NE(line.find("| grad norm: 0.500 | num zeros: 1234 | params norm: 17.250 | number of skipped"),
            std::string::npos)
      << line;
}

TEST(LogLine, TimestampAndValidationFormat) {
  EXPECT_EQ(current_timestamp().size(), 19u);
  EXPECT_EQ(format_validation_line("iteration 100", 2.0),
            " validation loss at iteration 100 | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 | ");
}

TEST(Flops, MegatronFormulaForGpt) {
  ModelConfig c;
  c.num_layers = 24;
  c.hidden_size = 2048;
  c.ffn_hidden_size = 4 * 2048;
  c.num_attention_heads = 16;
  c.kv_channels = 128;
  c.seq_length = 2048;
  c.padded_vocab_size = 50304;
  const double b = 8, s = 2048, l = 24, h = 2048, v = 50304;
  const double expected = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h));
  EXPECT_NEAR(model_flops_per_iteration(c, 8) / expected, 1.0, 1e-12);
}

TEST(Flops, MegatronFormulaForLlamaStyleBlocks) {
  // Llama-3-8B-like: GQA with 8 key/value heads of 32, SwiGLU with ffn 14336, untied head.
  ModelConfig c;
  c.num_layers = 32;
  c.hidden_size = 4096;
  c.ffn_hidden_size = 14336;
  c.num_attention_heads = 32;
  c.num_query_groups = 8;
  c.kv_channels = 128;
  c.seq_length = 8192;
  c.padded_vocab_size = 128256;
  c.swiglu = true;
  // Counted GEMM by GEMM, per token of one forward pass (2 FLOPs per multiply-add), then x3 for
  // forward + backward: QKV h -> (heads + 2 groups) d, the projection, scores and P V over the
  // whole sequence (Megatron does not halve them for the causal mask), fc1 h -> 2 ffn, fc2, logits.
  const double b = 2, s = 8192, l = 32, h = 4096, heads = 32, groups = 8, d = 128, f = 14336, v = 128256;
  const double per_layer = 2 * h * (heads + 2 * groups) * d + 2 * heads * d * h + 2 * 2 * s * heads * d +
                           2 * h * 2 * f + 2 * f * h;
  const double expected = 3 * b * s * (l * per_layer + 2 * h * v);
  EXPECT_NEAR(model_flops_per_iteration(c, 2) / expected, 1.0, 1e-12);
  // Without GQA and SwiGLU the same counting gives the GPT formula (checked above).
  c.num_query_groups = 0;
  c.swiglu = false;
  const double gpt_layer = 2 * h * 3 * heads * d + 2 * heads * d * h + 4 * s * heads * d + 2 * 2 * h * f;
  EXPECT_NEAR(model_flops_per_iteration(c, 2) / (3 * b * s * (l * gpt_layer + 2 * h * v)), 1.0, 1e-12);
}

}  // namespace
}  // namespace gpt
