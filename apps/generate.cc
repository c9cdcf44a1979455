// generate: text from a checkpoint (docs/GENERATION.md). Loads any pretrain_gpt checkpoint (any
// saving layout, FP32 or BF16, both model families) on one process, encodes the prompts, runs the
// prompts through the model once (prefill, every prompt of the batch together) and then one token
// per step with a KV cache, picks each token greedily or by sampling, and stops at the
// end-of-document token or after --max-new-tokens.
//
//   generate CHECKPOINT --prompt "Once upon a time" --max-new-tokens 40 --temperature 0.8 --top-k 40
//   generate CHECKPOINT --prompt-file prompts.txt --greedy      one prompt per line ("-": stdin)
//   echo "Hello" | generate CHECKPOINT                          no --prompt: prompts from stdin
//
// With GPT2BPETokenizer checkpoints prompts are text and output is decoded text; with mock data or
// NullTokenizer prompts are token ids separated by spaces and output is ids. Errors: one line on
// stderr, exit 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli_parse.h"
#include "data/gpt2_tokenizer.h"
#include "generate/checkpoint_model.h"
#include "generate/inference_model.h"
#include "generate/sampler.h"

namespace gpt {
namespace {

struct Options {
  std::string checkpoint;
  std::optional<int64_t> iteration, vocab_size;
  std::vector<std::string> prompts;
  std::string prompt_file;
  int64_t max_new_tokens = 32;
  SamplingOptions sampling;
  std::string vocab_file, merge_file;
  int threads = 0;
  bool print_ids = false;
  bool check_uncached = false;
  bool ignore_eod = false;
  bool prompt_ids = false;
  std::string logits_file;
  std::optional<int32_t> eod_id;
};

int report(const absl::Status& status) {
  if (status.ok()) return 0;
  std::string message(status.message());
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

absl::StatusOr<std::vector<std::string>> read_prompts(const Options& o) {
  std::vector<std::string> prompts = o.prompts;
  if (!o.prompt_file.empty() || prompts.empty()) {
    const bool standard_input = o.prompt_file.empty() || o.prompt_file == "-";
    std::ifstream file;
    if (!standard_input) {
      file.open(o.prompt_file);
      if (!file) return absl::NotFoundError(absl::StrCat(o.prompt_file, ": cannot open the prompt file"));
    }
    std::istream& in = standard_input ? std::cin : file;
    std::string line;
    while (std::getline(in, line)) prompts.push_back(line);
  }
  if (prompts.empty()) return absl::InvalidArgumentError("no prompt (--prompt, --prompt-file or lines on stdin)");
  return prompts;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status run(const Options& o) {
  GPT_ASSIGN_OR_RETURN(CheckpointModel model, load_checkpoint_model(o.checkpoint, o.iteration, o.vocab_size));
  if (o.eod_id) {
    if (*o.eod_id < 0 || *o.eod_id >= model.config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("--eod-id ", *o.eod_id, " is not in [0, ", model.config.vocab_size, ")"));
    }
    model.eod_id = *o.eod_id;
  }
  const ModelConfig& config = model.config;
  // The tokenizer: GPT-2's BPE for GPT2BPETokenizer checkpoints, token ids otherwise.
  std::optional<Gpt2Tokenizer> tokenizer;
  if (model.tokenizer_type == "GPT2BPETokenizer") {
    const std::string vocab = !o.vocab_file.empty() ? o.vocab_file : model.arguments.count("--vocab-file") ? model.arguments.at("--vocab-file") : "";
    const std::string merges = !o.merge_file.empty() ? o.merge_file : model.arguments.count("--merge-file") ? model.arguments.at("--merge-file") : "";
    if (vocab.empty() || merges.empty()) {
      return absl::InvalidArgumentError(
          "the checkpoint uses GPT-2's tokenizer but records no vocabulary files: give --vocab-file and --merge-file");
    }
    absl::StatusOr<Gpt2Tokenizer> loaded = Gpt2Tokenizer::load(vocab, merges);
    if (!loaded.ok()) {
      return absl::NotFoundError(absl::StrCat("GPT-2 tokenizer (", vocab, ", ", merges, "): ", loaded.status().message(),
                                              " (give --vocab-file and --merge-file)"));
    }
    tokenizer = std::move(*loaded);
  }
  GPT_ASSIGN_OR_RETURN(const std::vector<std::string> texts, read_prompts(o));
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids;
    if (tokenizer && !o.prompt_ids) {
      tokenizer->encode(texts[i], ids);
    } else {
      for (absl::string_view word : absl::StrSplit(texts[i], ' ', absl::SkipWhitespace())) {
        int32_t id = 0;
        if (!absl::SimpleAtoi(word, &id) || id < 0 || id >= config.vocab_size) {
          return absl::InvalidArgumentError(absl::StrCat(
              "prompt ", i + 1, ": '", word, "' is not a token id in [0, ", config.vocab_size,
              ") (without a text tokenizer, or with --prompt-ids, prompts are token ids separated by spaces)"));
        }
        ids.push_back(id);
      }
    }
    // An empty prompt starts from the end-of-document token (a fresh document).
    if (ids.empty()) ids.push_back(model.eod_id);
    if (static_cast<int64_t>(ids.size()) > config.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("prompt ", i + 1, " has ", ids.size(),
                                                     " tokens, more than the model's ", config.max_position_embeddings,
                                                     " positions (--max-position-embeddings)"));
    }
    prompts.push_back(std::move(ids));
  }
  const auto batch = static_cast<int64_t>(prompts.size());
  int64_t capacity = 0;
  for (const auto& p : prompts) capacity = std::max(capacity, static_cast<int64_t>(p.size()) + o.max_new_tokens);
  capacity = std::min(capacity, config.max_position_embeddings);

  const int threads = o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  Context ctx = Context::cpu(threads);
  InferenceModel inference(config, model.params, ctx, batch, capacity);
  Sampler sampler(o.sampling);
  std::fprintf(stderr, "generate: %s (iteration %lld), %lld layers, hidden %lld, heads %lld/%lld groups, %s, %s, vocabulary %lld; "
               "%lld prompt(s), KV cache %.1f MB\n",
               model.directory.c_str(), static_cast<long long>(model.iteration), static_cast<long long>(config.num_layers),
               static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_attention_heads),
               static_cast<long long>(config.query_groups()),
               config.position_embedding == PositionEmbedding::kRope ? "RoPE" : "learned positions",
               config.normalization == Normalization::kRMSNorm ? "RMSNorm" : "LayerNorm",
               static_cast<long long>(config.vocab_size), static_cast<long long>(batch),
               static_cast<double>(inference.cache().bytes()) / 1e6);

  std::vector<std::vector<int32_t>> generated(static_cast<size_t>(batch));
  std::vector<std::string> stop_reason(static_cast<size_t>(batch), "max-new-tokens");
  std::vector<bool> live(static_cast<size_t>(batch), o.max_new_tokens > 0);
  std::vector<float> logits, reference;
  double worst_relative = 0.0, worst_absolute = 0.0;
  int64_t checked = 0;
  const int64_t vocab = config.vocab_size, padded = config.padded_vocab_size;

  // Compares the cached logits of sequence i (row `row`) with an uncached forward of everything it has seen.
  auto check = [&](int64_t i, int64_t row) {
    std::vector<int32_t> all = prompts[static_cast<size_t>(i)];
    const auto& g = generated[static_cast<size_t>(i)];
    all.insert(all.end(), g.begin(), g.end());
    if (static_cast<int64_t>(all.size()) != inference.cache().length(i)) all.pop_back();  // the token not fed yet
    inference.forward_full(all, reference);
    double difference = 0.0, norm = 0.0, largest = 0.0;
    for (int64_t v = 0; v < padded; ++v) {
      const double a = logits[static_cast<size_t>(row * padded + v)], b = reference[static_cast<size_t>(v)];
      difference += (a - b) * (a - b);
      norm += b * b;
      largest = std::max(largest, std::abs(a - b));
    }
    worst_relative = std::max(worst_relative, std::sqrt(difference / std::max(norm, 1e-30)));
    worst_absolute = std::max(worst_absolute, largest);
    ++checked;
  };
  auto pick = [&](int64_t i, int64_t row) {
    const std::span<const float> row_logits(logits.data() + row * padded, static_cast<size_t>(vocab));
    auto& g = generated[static_cast<size_t>(i)];
    const int32_t token = sampler.next(row_logits, i, static_cast<int64_t>(g.size()));
    g.push_back(token);
    const int64_t length = static_cast<int64_t>(prompts[static_cast<size_t>(i)].size() + g.size());
    if (token == model.eod_id && !o.ignore_eod) {
      live[static_cast<size_t>(i)] = false;
      stop_reason[static_cast<size_t>(i)] = "end-of-document";
    } else if (static_cast<int64_t>(g.size()) >= o.max_new_tokens) {
      live[static_cast<size_t>(i)] = false;
    } else if (length >= capacity) {
      live[static_cast<size_t>(i)] = false;
      stop_reason[static_cast<size_t>(i)] = "position table full";
    }
  };

  // Prefill: every prompt at once.
  int64_t prefill_tokens = 0;
  std::vector<InferenceModel::Segment> segments;
  for (int64_t i = 0; i < batch; ++i) {
    segments.push_back({.sequence = i, .tokens = prompts[static_cast<size_t>(i)]});
    prefill_tokens += static_cast<int64_t>(prompts[static_cast<size_t>(i)].size());
  }
  auto start = std::chrono::steady_clock::now();
  inference.forward_cached(segments, logits);
  const double prefill_seconds = seconds_since(start);
  if (o.check_uncached) {
    for (int64_t i = 0; i < batch; ++i) check(i, i);
  }
  if (!o.logits_file.empty()) {
    // The prefill's logits of each prompt's last token over the real vocabulary: [prompts, vocab] FP32.
    std::FILE* file = std::fopen(o.logits_file.c_str(), "wb");
    bool written = file != nullptr;
    for (int64_t i = 0; written && i < batch; ++i) {
      written = std::fwrite(logits.data() + i * padded, sizeof(float), static_cast<size_t>(vocab), file) ==
                static_cast<size_t>(vocab);
    }
    if (file && std::fclose(file) != 0) written = false;
    if (!written) return absl::PermissionDeniedError(absl::StrCat("cannot write ", o.logits_file));
  }
  for (int64_t i = 0; i < batch; ++i) {
    if (live[static_cast<size_t>(i)]) pick(i, i);
  }
  // Decode: one token per live sequence per step.
  double decode_seconds = 0.0;
  int64_t decode_tokens = 0;
  std::vector<int32_t> fed(static_cast<size_t>(batch));
  for (;;) {
    segments.clear();
    std::vector<int64_t> which;
    for (int64_t i = 0; i < batch; ++i) {
      if (!live[static_cast<size_t>(i)]) continue;
      fed[static_cast<size_t>(i)] = generated[static_cast<size_t>(i)].back();
      segments.push_back({.sequence = i, .tokens = std::span<const int32_t>(&fed[static_cast<size_t>(i)], 1)});
      which.push_back(i);
    }
    if (segments.empty()) break;
    start = std::chrono::steady_clock::now();
    inference.forward_cached(segments, logits);
    decode_seconds += seconds_since(start);
    decode_tokens += static_cast<int64_t>(segments.size());
    for (size_t r = 0; r < which.size(); ++r) {
      if (o.check_uncached) check(which[r], static_cast<int64_t>(r));
      pick(which[r], static_cast<int64_t>(r));
    }
  }

  for (int64_t i = 0; i < batch; ++i) {
    const auto& prompt = prompts[static_cast<size_t>(i)];
    const auto& g = generated[static_cast<size_t>(i)];
    std::printf("=== sample %lld: %zu prompt tokens, %zu new, stop: %s ===\n", static_cast<long long>(i), prompt.size(),
                g.size(), stop_reason[static_cast<size_t>(i)].c_str());
    std::vector<int32_t> shown = g;
    if (!shown.empty() && shown.back() == model.eod_id && !o.ignore_eod) shown.pop_back();
    if (tokenizer) {
      std::string text = tokenizer->decode(prompt) + tokenizer->decode(shown);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::printf("\n");
    } else {
      std::printf("%s | %s\n", absl::StrJoin(prompt, " ").c_str(), absl::StrJoin(shown, " ").c_str());
    }
    if (o.print_ids) std::printf("ids: %s\n", absl::StrJoin(g, " ").c_str());
  }
  std::printf("prefill: %lld tokens in %.4f s (%.1f tokens/s); decode: %lld tokens in %.4f s (%.1f tokens/s), %d threads\n",
              static_cast<long long>(prefill_tokens), prefill_seconds,
              prefill_seconds > 0 ? static_cast<double>(prefill_tokens) / prefill_seconds : 0.0,
              static_cast<long long>(decode_tokens), decode_seconds,
              decode_seconds > 0 ? static_cast<double>(decode_tokens) / decode_seconds : 0.0, threads);
  if (o.check_uncached) {
    std::printf("cached vs uncached logits: %lld steps checked, max relative difference %.3g, max absolute %.3g\n",
                static_cast<long long>(checked), worst_relative, worst_absolute);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  CLI::App app{"Generate text from a pretrain_gpt checkpoint (KV cache, greedy or sampled).\n"
               "CHECKPOINT is a --save directory (its tracker, or --iteration N) or one iter_<7 digits> directory.",
               "generate"};
  gpt::Options o;
  app.add_option("CHECKPOINT", o.checkpoint, "Save directory or iter_<7 digits> directory")->required();
  app.add_option("--iteration", o.iteration, "Iteration to open in a save directory (default: the tracker's)");
  app.add_option("--prompt", o.prompts, "A prompt (repeat for a batch); text, or token ids without a text tokenizer");
  app.add_option("--prompt-file", o.prompt_file, "Prompts, one per line ('-': stdin; the default without --prompt)");
  app.add_option("--max-new-tokens", o.max_new_tokens, "Tokens to generate per prompt (default 32)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--greedy", o.sampling.greedy, "Argmax decoding (also --temperature 0)");
  app.add_option("--temperature", o.sampling.temperature, "Sampling temperature (default 1; 0: greedy)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", o.sampling.top_k, "Sample among the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", o.sampling.top_p, "Nucleus sampling: the most likely tokens up to mass p (1: all)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", o.sampling.seed, "Sampling seed (same seed, same text; default 1234)");
  app.add_option("--vocab-file", o.vocab_file, "GPT-2 vocab.json / encoder.json (default: the checkpoint's)");
  app.add_option("--merge-file", o.merge_file, "GPT-2 merges.txt / vocab.bpe (default: the checkpoint's)");
  app.add_option("--vocab-size", o.vocab_size, "Real (unpadded) vocabulary size, when the saved arguments do not tell it");
  app.add_option("--threads", o.threads, "BLAS threads (default: every core)");
  app.add_flag("--prompt-ids", o.prompt_ids, "Prompts are token ids separated by spaces, also with a text tokenizer");
  app.add_option("--logits-file", o.logits_file,
                 "Write the logits of each prompt's last token (real vocabulary, FP32, [prompts, vocab]) to this file");
  app.add_flag("--print-ids", o.print_ids, "Also print the generated token ids");
  app.add_option("--eod-id", o.eod_id, "The end-of-document token (default: the tokenizer's; an imported Llama's eos id)");
  app.add_flag("--ignore-eod", o.ignore_eod, "Do not stop at the end-of-document token");
  app.add_flag("--check-uncached", o.check_uncached,
               "At every step also run the whole sequence without the cache and report the largest logit difference");
  if (const std::optional<int> exit_status = gpt::parse_command_line(app, argc, argv)) return *exit_status;
  return gpt::report(gpt::run(o));
}
