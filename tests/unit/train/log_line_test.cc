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

TEST(Flops, MegatronMoeFormulaCountsActiveExperts) {
  // Qwen3-30B-A3B-like: 48 layers, SwiGLU, GQA 32 heads / 4 groups of 128, 128 experts of 768 top-8,
  // every layer MoE; then a layer pattern with a shared expert (DeepSeek-like: the first layer dense).
  ModelConfig c;
  c.num_layers = 48;
  c.hidden_size = 2048;
  c.ffn_hidden_size = 6144;
  c.num_attention_heads = 32;
  c.num_query_groups = 4;
  c.kv_channels = 128;
  c.seq_length = 4096;
  c.padded_vocab_size = 151936;
  c.swiglu = true;
  c.moe.num_experts = 128;
  c.moe.topk = 8;
  c.moe.ffn_hidden_size = 768;
  c.moe.moe_layers.assign(48, true);
  // Per token of one forward pass: attention's GEMMs and scores, the k experts' fc1 (h -> 2 f_e)
  // and fc2 (f_e -> h) of an MoE layer (no router, permutation or combine: Megatron counts none),
  // a dense layer's fc1 and fc2, the shared expert's; x3 for forward + backward, plus the logits.
  const double b = 4, s = 4096, h = 2048, heads = 32, groups = 4, d = 128, v = 151936;
  const double attention = 2 * h * (heads + 2 * groups) * d + 2 * heads * d * h + 2 * 2 * s * heads * d;
  auto swiglu_mlp = [&](double f) { return 2 * h * 2 * f + 2 * f * h; };
  const double moe_layer = attention + 8 * swiglu_mlp(768);
  EXPECT_NEAR(model_flops_per_iteration(c, 4) / (3 * b * s * (48 * moe_layer + 2 * h * v)), 1.0, 1e-12);
  // Megatron's own expression (training.py transformer_flops), MLP per token 3*2*h*(F k f L_moe),
  // f = 3 with SwiGLU, beside the attention and logits terms.
  const double megatron_mlp = 3 * 2 * h * (768.0 * 8 * 3 * 48);
  EXPECT_NEAR(model_flops_per_iteration(c, 4) / (b * s * (megatron_mlp + 3 * (48 * attention + 2 * h * v))), 1.0,
              1e-12);

  c.moe.moe_layers[0] = false;  // --moe-layer-freq ([0]*1+[1]*47)
  c.moe.moe_layers[1] = false;  // and a second dense layer: 46 MoE layers
  c.moe.shared_expert_size = 1024;
  const double shared_layer = attention + 8 * swiglu_mlp(768) + swiglu_mlp(1024);
  const double dense_layer = attention + swiglu_mlp(6144);
  EXPECT_NEAR(model_flops_per_iteration(c, 4) / (3 * b * s * (46 * shared_layer + 2 * dense_layer + 2 * h * v)), 1.0,
              1e-12);
}

}  // namespace
}  // namespace gpt
