// generate: text from a checkpoint (docs/GENERATION.md). Loads any pretrain_gpt checkpoint (any
// saving layout, FP32 or BF16, both model families) on one process or split over tensor-parallel
// ranks (mpirun -np T ... --tensor-model-parallel-size T), encodes the prompts, runs the
// prompts through the model once (prefill, every prompt of the batch together) and then one token
// per step with a KV cache, picks each token greedily or by sampling, and stops at the
// end-of-document token or after --max-new-tokens.
//
//   generate CHECKPOINT --prompt "Once upon a time" --max-new-tokens 40 --temperature 0.8 --top-k 40
//   generate CHECKPOINT --prompt-file prompts.txt --greedy      one prompt per line ("-": stdin)
//   echo "Hello" | generate CHECKPOINT                          no --prompt: prompts from stdin
//
// With GPT2BPETokenizer checkpoints prompts are text and output is decoded text; with mock data or
// NullTokenizer prompts are token ids separated by spaces and output is ids. Rank 0 reads the
// prompts and prints; every rank computes the same tokens (the logits are gathered in full on each).
// Errors: one line on stderr from one rank, exit 1 on every rank.
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
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli_parse.h"
#include "core/cuda_runtime.h"
#include "core/memory.h"
#include "data/text_tokenizer.h"
#include "generate/checkpoint_model.h"
#include "generate/inference_model.h"
#include "generate/sampler.h"
#include "parallel/comm/mpi_runtime.h"
#include "parallel/comm/world_agreement.h"
#include "parallel/mpi_grid.h"

namespace gpt {
namespace {

struct Options {
  std::string checkpoint;
  std::optional<int64_t> iteration, vocab_size;
  std::vector<std::string> prompts;
  std::string prompt_file;
  int64_t max_new_tokens = 32;
  SamplingOptions sampling;
  std::string vocab_file, merge_file, tokenizer_model;
  int threads = 0;
  bool print_ids = false;
  bool check_uncached = false;
  bool ignore_eod = false;
  bool prompt_ids = false;
  std::string logits_file;
  std::optional<int32_t> eod_id;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  std::string device = "cpu";
};

// A failure another rank reported; this rank stays silent.
bool is_peer_failure(const absl::Status& status) {
  return absl::IsAborted(status) && absl::StartsWith(status.message(), "generate: stopped");
}

// Every rank's status agreed over the world: OK when every rank's is; otherwise the lowest failing
// rank keeps its own error (the one line printed) and every other rank gets a peer failure.
absl::Status agree(const absl::Status& status) {
  const int rank = world::rank(), size = world::size();
  const int64_t lowest = world::all_reduce(status.ok() ? size : rank, world::Combine::kMin, "generate's outcome");
  if (lowest == size) return absl::OkStatus();
  if (lowest == rank) return status;
  return absl::AbortedError(absl::StrCat("generate: stopped, rank ", lowest, " failed"));
}

int report(const absl::Status& status) {
  if (status.ok()) return 0;
  if (is_peer_failure(status)) return 1;
  std::string message(status.message());
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

// Rank 0's prompts on every rank (only rank 0 reads stdin under mpirun): length-prefixed texts.
void broadcast_prompts(std::vector<std::string>& prompts) {
  if (world::size() == 1) return;
  std::string packed;
  for (const std::string& p : prompts) absl::StrAppend(&packed, p.size(), ":", p);
  world::broadcast_from_rank0(packed, "the prompts");
  prompts.clear();
  for (size_t at = 0; at < packed.size();) {
    const size_t colon = packed.find(':', at);
    const size_t length = std::stoull(packed.substr(at, colon - at));
    prompts.push_back(packed.substr(colon + 1, length));
    at = colon + 1 + length;
  }
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

// The layout: a world of one, or a world of exactly --tensor-model-parallel-size ranks.
absl::Status check_layout(const Options& o) {
  if (o.pipeline_parallel != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pipeline-model-parallel-size ", o.pipeline_parallel,
        ": generate runs without pipeline parallelism (decoding is one token per step, so all but one stage would "
        "wait at every step; split a model with --tensor-model-parallel-size instead)"));
  }
  if (o.tensor_parallel < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tensor-model-parallel-size ", o.tensor_parallel, " is not positive"));
  }
  if (world::size() != o.tensor_parallel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tensor-model-parallel-size ", o.tensor_parallel, " needs ", o.tensor_parallel, " ranks, this job has ",
        world::size(), world::running() ? "" : " (no MPI launcher)", ": run mpirun -np ", o.tensor_parallel,
        " generate ... (generate has no data or pipeline parallelism)"));
  }
  return absl::OkStatus();
}

absl::Status run(const Options& o, const ProcessGrid& grid) {
  const bool printer = grid.world_rank() == 0;
  Communicator* tensor_group = grid.shape().tensor > 1 ? &grid.tensor() : nullptr;
  absl::StatusOr<CheckpointModel> loaded = load_checkpoint_model(
      o.checkpoint, o.iteration, o.vocab_size, TensorSlice{.rank = grid.coordinates().tensor, .size = grid.shape().tensor});
  GPT_RETURN_IF_ERROR(agree(loaded.status()));
  CheckpointModel model = *std::move(loaded);
  absl::StatusOr<std::vector<std::string>> read =
      printer ? read_prompts(o) : absl::StatusOr<std::vector<std::string>>(std::vector<std::string>{});
  GPT_RETURN_IF_ERROR(agree(read.status()));
  std::vector<std::string> texts = *std::move(read);
  broadcast_prompts(texts);
  // The same on every rank: the end-of-document id, the tokenizer, the encoded prompts.
  const ModelConfig& config = model.config;
  std::unique_ptr<TextTokenizer> tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  auto prepare = [&]() -> absl::Status {
    if (o.eod_id) {
      if (*o.eod_id < 0 || *o.eod_id >= model.config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("--eod-id ", *o.eod_id, " is not in [0, ", model.config.vocab_size, ")"));
      }
      model.eod_ids = {*o.eod_id};
    }
    // The tokenizer: the checkpoint's text tokenizer (its files as saved, or as given here),
    // token ids otherwise.
    auto saved = [&](const std::string& given, const char* flag) {
      return !given.empty() ? given : model.arguments.count(flag) ? model.arguments.at(flag) : "";
    };
    // Files the checkpoint's tokenizer does not read are refused rather than ignored.
    const bool reads_model = is_text_tokenizer_type(model.tokenizer_type) && model.tokenizer_type != "GPT2BPETokenizer";
    if (!o.tokenizer_model.empty() && !reads_model) {
      return absl::InvalidArgumentError(absl::StrCat("--tokenizer-model: the checkpoint's tokenizer (",
                                                     model.tokenizer_type.empty() ? "mock data" : model.tokenizer_type,
                                                     ") reads no tokenizer model"));
    }
    if ((!o.vocab_file.empty() || !o.merge_file.empty()) && model.tokenizer_type != "GPT2BPETokenizer") {
      return absl::InvalidArgumentError(absl::StrCat("--vocab-file and --merge-file: the checkpoint's tokenizer (",
                                                     model.tokenizer_type.empty() ? "mock data" : model.tokenizer_type,
                                                     ") is not GPT2BPETokenizer"));
    }
    if (model.tokenizer_type == "GPT2BPETokenizer") {
      const std::string vocab = saved(o.vocab_file, "--vocab-file"), merges = saved(o.merge_file, "--merge-file");
      if (vocab.empty() || merges.empty()) {
        return absl::InvalidArgumentError(
            "the checkpoint uses GPT-2's tokenizer but records no vocabulary files: give --vocab-file and --merge-file");
      }
      absl::StatusOr<std::unique_ptr<TextTokenizer>> bpe =
          load_text_tokenizer({.type = model.tokenizer_type, .vocab_file = vocab, .merge_file = merges});
      if (!bpe.ok()) {
        return absl::NotFoundError(absl::StrCat("GPT-2 tokenizer (", vocab, ", ", merges, "): ", bpe.status().message(),
                                                " (give --vocab-file and --merge-file)"));
      }
      tokenizer = *std::move(bpe);
    } else if (is_text_tokenizer_type(model.tokenizer_type)) {
      const std::string path = saved(o.tokenizer_model, "--tokenizer-model");
      if (path.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("the checkpoint uses ", model.tokenizer_type,
                                                       " but records no --tokenizer-model: give --tokenizer-model"));
      }
      absl::StatusOr<std::unique_ptr<TextTokenizer>> loaded =
          load_text_tokenizer({.type = model.tokenizer_type, .tokenizer_model = path});
      if (!loaded.ok()) {
        return absl::NotFoundError(absl::StrCat(model.tokenizer_type, ": ", loaded.status().message(), " (give --tokenizer-model)"));
      }
      tokenizer = *std::move(loaded);
      if (tokenizer->vocab_size() > model.config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(model.tokenizer_type, " ", path, " has ", tokenizer->vocab_size(),
                                                       " tokens, more than the checkpoint's vocabulary (", model.config.vocab_size, ")"));
      }
      // Megatron's eod of these tokenizers is the tokenizer's, not the vocabulary's last id.
      if (!o.eod_id && model.hf_eos_ids.empty()) model.eod_ids = {tokenizer->eod_id()};
      if (!model.hf_bos_id) model.start_id = model.eod_ids.front();
    }
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
      if (ids.empty()) ids.push_back(model.start_id);
      if (static_cast<int64_t>(ids.size()) > config.max_position_embeddings) {
        return absl::InvalidArgumentError(absl::StrCat("prompt ", i + 1, " has ", ids.size(),
                                                       " tokens, more than the model's ", config.max_position_embeddings,
                                                       " positions (--max-position-embeddings)"));
      }
      prompts.push_back(std::move(ids));
    }
    return absl::OkStatus();
  };
  GPT_RETURN_IF_ERROR(agree(prepare()));
  auto is_eod = [&](int32_t token) {
    return std::find(model.eod_ids.begin(), model.eod_ids.end(), token) != model.eod_ids.end();
  };
  const auto batch = static_cast<int64_t>(prompts.size());
  int64_t capacity = 0;
  for (const auto& p : prompts) capacity = std::max(capacity, static_cast<int64_t>(p.size()) + o.max_new_tokens);
  capacity = std::min(capacity, config.max_position_embeddings);

  // The node's cores shared among its ranks; on a GPU, the rank's node-local GPU among the visible
  // ones (as pretrain_gpt picks it).
  const int threads =
      o.threads > 0 ? o.threads
                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, local_world_size()));
  absl::Status device_status;
  if (o.device == "cuda" && !cuda_backend_built()) {
    device_status = absl::InvalidArgumentError("--device cuda: this build has no CUDA backend");
  } else if (o.device == "cuda" && cuda::device_count() == 0) {
    device_status = absl::InvalidArgumentError("--device cuda: no GPU is visible");
  }
  GPT_RETURN_IF_ERROR(agree(device_status));
  Context ctx = o.device == "cuda" ? Context::gpu(gpu_for_local_rank(local_rank(), cuda::device_count()))
                                   : Context::cpu(threads);
  InferenceModel inference(config, model.params, ctx, batch, capacity, tensor_group);
  Sampler sampler(o.sampling);
  if (printer) {
    std::fprintf(stderr, "generate: %s (iteration %lld), %lld layers, hidden %lld, heads %lld/%lld groups, %s, %s, vocabulary %lld; "
               "%lld prompt(s), %s, tensor parallel %d, KV cache %.1f MB per rank (host)\n",
               model.directory.c_str(), static_cast<long long>(model.iteration), static_cast<long long>(config.num_layers),
               static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_attention_heads),
               static_cast<long long>(config.query_groups()),
               config.position_embedding == PositionEmbedding::kRope ? "RoPE" : "learned positions",
               config.normalization == Normalization::kRMSNorm ? "RMSNorm" : "LayerNorm",
               static_cast<long long>(config.vocab_size), static_cast<long long>(batch), o.device.c_str(), grid.shape().tensor,
               static_cast<double>(inference.cache().bytes()) / 1e6);
  }

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
    if (is_eod(token) && !o.ignore_eod) {
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
  // --logits-file: every step's logits over the real vocabulary, FP32 rows in the order computed
  // (the prefill's row of each prompt's last token, then each decode step's row of each live
  // sequence), written by rank 0 (every rank has the same logits).
  std::FILE* logits_out = nullptr;
  bool logits_written = true;
  if (printer && !o.logits_file.empty()) {
    logits_out = std::fopen(o.logits_file.c_str(), "wb");
    logits_written = logits_out != nullptr;
  }
  auto write_logits = [&](int64_t rows) {
    for (int64_t i = 0; logits_out && logits_written && i < rows; ++i) {
      logits_written = std::fwrite(logits.data() + i * padded, sizeof(float), static_cast<size_t>(vocab), logits_out) ==
                       static_cast<size_t>(vocab);
    }
  };
  write_logits(batch);
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
    write_logits(static_cast<int64_t>(segments.size()));
    for (size_t r = 0; r < which.size(); ++r) {
      if (o.check_uncached) check(which[r], static_cast<int64_t>(r));
      pick(which[r], static_cast<int64_t>(r));
    }
  }
  if (logits_out && std::fclose(logits_out) != 0) logits_written = false;
  GPT_RETURN_IF_ERROR(agree(logits_written ? absl::OkStatus()
                                           : absl::PermissionDeniedError(absl::StrCat("cannot write ", o.logits_file))));
  if (!printer) return absl::OkStatus();
  for (int64_t i = 0; i < batch; ++i) {
    const auto& prompt = prompts[static_cast<size_t>(i)];
    const auto& g = generated[static_cast<size_t>(i)];
    std::printf("=== sample %lld: %zu prompt tokens, %zu new, stop: %s ===\n", static_cast<long long>(i), prompt.size(),
                g.size(), stop_reason[static_cast<size_t>(i)].c_str());
    std::vector<int32_t> shown = g;
    if (!shown.empty() && is_eod(shown.back()) && !o.ignore_eod) shown.pop_back();
    if (tokenizer) {
      std::string text = tokenizer->decode(prompt) + tokenizer->decode(shown);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::printf("\n");
    } else {
      std::printf("%s | %s\n", absl::StrJoin(prompt, " ").c_str(), absl::StrJoin(shown, " ").c_str());
    }
    if (o.print_ids) std::printf("ids: %s\n", absl::StrJoin(g, " ").c_str());
  }
  std::printf("prefill: %lld tokens in %.4f s (%.1f tokens/s); decode: %lld tokens in %.4f s (%.1f tokens/s), "
              "%s, %d threads x %d tensor-parallel ranks\n",
              static_cast<long long>(prefill_tokens), prefill_seconds,
              prefill_seconds > 0 ? static_cast<double>(prefill_tokens) / prefill_seconds : 0.0,
              static_cast<long long>(decode_tokens), decode_seconds,
              decode_seconds > 0 ? static_cast<double>(decode_tokens) / decode_seconds : 0.0, o.device.c_str(), threads,
              grid.shape().tensor);
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
  app.add_option("--tokenizer-model", o.tokenizer_model,
                 "SentencePiece model or Hugging Face tokenizer.json / directory (default: the checkpoint's)");
  app.add_option("--vocab-size", o.vocab_size, "Real (unpadded) vocabulary size, when the saved arguments do not tell it");
  app.add_option("--threads", o.threads, "BLAS threads (default: every core)");
  app.add_flag("--prompt-ids", o.prompt_ids, "Prompts are token ids separated by spaces, also with a text tokenizer");
  app.add_option("--logits-file", o.logits_file,
                 "Write every step's logits (real vocabulary, FP32): the prefill's row per prompt, then each decode "
                 "step's row per live sequence");
  app.add_flag("--print-ids", o.print_ids, "Also print the generated token ids");
  app.add_option("--eod-id", o.eod_id,
                 "Stop at this token instead (default: the tokenizer's end-of-document id; an imported model's eos_token_id)");
  app.add_flag("--ignore-eod", o.ignore_eod, "Do not stop at the end-of-document token");
  app.add_flag("--check-uncached", o.check_uncached,
               "At every step also run the whole sequence without the cache and report the largest logit difference");
  app.add_option("--tensor-model-parallel-size", o.tensor_parallel,
                 "Split the model over this many ranks (mpirun -np N; Megatron's column/row-parallel layers)");
  app.add_option("--pipeline-model-parallel-size", o.pipeline_parallel,
                 "Refused above 1: generate has no pipeline parallelism (see docs/GENERATION.md)");
  app.add_option("--device", o.device,
                 "cpu (default) or cuda: where the linears, norms and activations run (the KV cache stays on the host)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  gpt::MpiRuntime mpi(&argc, &argv);
  if (const std::optional<int> exit_status = gpt::parse_command_line(app, argc, argv, mpi.world_rank() == 0)) {
    return *exit_status;
  }
  absl::Status status = gpt::agree(gpt::check_layout(o));
  if (!status.ok()) return gpt::report(status);
  const std::unique_ptr<gpt::ProcessGrid> grid =
      mpi.active() ? gpt::build_mpi_grid(gpt::GridShape{.tensor = o.tensor_parallel}, gpt::world::timeout_seconds())
                   : gpt::ProcessGrid::single();
  return gpt::report(gpt::run(o, *grid));
}
