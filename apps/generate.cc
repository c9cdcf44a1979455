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
#include "train/args/numeric_flags.h"

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
  std::optional<int> threads;  // nullopt: the node's cores shared among its ranks
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

// The checkpoint's text tokenizer (its files as saved, or as given here), or none (prompts and
// output are token ids). Megatron's eod of SentencePiece and Hugging Face tokenizers is the
// tokenizer's: it replaces model's end-of-document and start ids unless given or imported.
absl::Status load_tokenizer(const Options& o, CheckpointModel& model, std::unique_ptr<TextTokenizer>& tokenizer) {
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
  return absl::OkStatus();
}

// Prompt i (0-based) as token ids: encoded text, or ids separated by spaces without a text
// tokenizer or with --prompt-ids.
absl::StatusOr<std::vector<int32_t>> encode_prompt(const Options& o, const std::string& text, size_t i,
                                                   TextTokenizer* tokenizer, const CheckpointModel& model) {
  const ModelConfig& config = model.config;
  std::vector<int32_t> ids;
  if (tokenizer && !o.prompt_ids) {
    tokenizer->encode(text, ids);
  } else {
    for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipWhitespace())) {
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
  return ids;
}

// The same on every rank: the end-of-document id, the tokenizer, the encoded prompts.
absl::Status prepare(const Options& o, const std::vector<std::string>& texts, CheckpointModel& model,
                     std::unique_ptr<TextTokenizer>& tokenizer, std::vector<std::vector<int32_t>>& prompts) {
  if (o.eod_id) {
    if (*o.eod_id < 0 || *o.eod_id >= model.config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("--eod-id ", *o.eod_id, " is not in [0, ", model.config.vocab_size, ")"));
    }
    model.eod_ids = {*o.eod_id};
  }
  GPT_RETURN_IF_ERROR(load_tokenizer(o, model, tokenizer));
  for (size_t i = 0; i < texts.size(); ++i) {
    GPT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, encode_prompt(o, texts[i], i, tokenizer.get(), model));
    prompts.push_back(std::move(ids));
  }
  return absl::OkStatus();
}

// The node's cores shared among its ranks.
int thread_count(const Options& o) {
  return o.threads ? *o.threads
                   : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, local_world_size()));
}

absl::Status check_device(const Options& o) {
  if (o.device == "cuda" && !cuda_backend_built()) {
    return absl::InvalidArgumentError("--device cuda: this build has no CUDA backend");
  } else if (o.device == "cuda" && cuda::device_count() == 0) {
    return absl::InvalidArgumentError("--device cuda: no GPU is visible");
  }
  return absl::OkStatus();
}

void print_banner(const Options& o, const CheckpointModel& model, int64_t batch, int tensor_parallel,
                  InferenceModel& inference) {
  const ModelConfig& config = model.config;
  std::fprintf(stderr, "generate: %s (iteration %lld), %lld layers, hidden %lld, heads %lld/%lld groups, %s, %s, vocabulary %lld; "
             "%lld prompt(s), %s, tensor parallel %d, KV cache %.1f MB per rank (host)\n",
             model.directory.c_str(), static_cast<long long>(model.iteration), static_cast<long long>(config.num_layers),
             static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_attention_heads),
             static_cast<long long>(config.query_groups()),
             config.position_embedding == PositionEmbedding::kRope ? "RoPE" : "learned positions",
             config.normalization == Normalization::kRMSNorm ? "RMSNorm" : "LayerNorm",
             static_cast<long long>(config.vocab_size), static_cast<long long>(batch), o.device.c_str(), tensor_parallel,
             static_cast<double>(inference.cache().bytes()) / 1e6);
}

// The batch's decoding: the prefill of every prompt, then one token per live sequence per step
// until each stops; each sequence's new tokens and why it stopped, the step's logits
// [rows, padded vocabulary], and with --check-uncached the largest difference from an uncached
// forward.
class Decoding {
 public:
  Decoding(const Options& o, const std::vector<std::vector<int32_t>>& prompts, const std::vector<int32_t>& eod_ids,
           int64_t capacity, InferenceModel& inference)
      : o_(o), prompts_(prompts), eod_ids_(eod_ids), capacity_(capacity), inference_(inference), sampler_(o.sampling),
        batch_(static_cast<int64_t>(prompts.size())), vocab_(inference.config().vocab_size),
        padded_(inference.config().padded_vocab_size), generated_(static_cast<size_t>(batch_)),
        stop_reason_(static_cast<size_t>(batch_), "max-new-tokens"),
        live_(static_cast<size_t>(batch_), o.max_new_tokens > 0) {}

  bool is_eod(int32_t token) const { return std::find(eod_ids_.begin(), eod_ids_.end(), token) != eod_ids_.end(); }

  // Prefill and decode; --logits-file written by the printer. False when the file could not be written.
  bool run(bool printer) {
    // Prefill: every prompt at once.
    std::vector<InferenceModel::Segment> segments;
    for (int64_t i = 0; i < batch_; ++i) {
      segments.push_back({.sequence = i, .tokens = prompts_[static_cast<size_t>(i)]});
      prefill_tokens += static_cast<int64_t>(prompts_[static_cast<size_t>(i)].size());
    }
    auto start = std::chrono::steady_clock::now();
    inference_.forward_cached(segments, logits_);
    prefill_seconds = seconds_since(start);
    if (o_.check_uncached) {
      for (int64_t i = 0; i < batch_; ++i) check(i, i);
    }
    // --logits-file: every step's logits over the real vocabulary, FP32 rows in the order computed
    // (the prefill's row of each prompt's last token, then each decode step's row of each live
    // sequence), written by rank 0 (every rank has the same logits).
    if (printer && !o_.logits_file.empty()) {
      logits_out_ = std::fopen(o_.logits_file.c_str(), "wb");
      logits_written_ = logits_out_ != nullptr;
    }
    write_logits(batch_);
    for (int64_t i = 0; i < batch_; ++i) {
      if (live_[static_cast<size_t>(i)]) pick(i, i);
    }
    decode();
    if (logits_out_ && std::fclose(logits_out_) != 0) logits_written_ = false;
    return logits_written_;
  }

  const std::vector<int32_t>& generated(int64_t i) const { return generated_[static_cast<size_t>(i)]; }
  const std::string& stop_reason(int64_t i) const { return stop_reason_[static_cast<size_t>(i)]; }

  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  double worst_relative = 0.0, worst_absolute = 0.0;
  int64_t checked = 0;

 private:
  // Decode: one token per live sequence per step.
  void decode() {
    std::vector<InferenceModel::Segment> segments;
    std::vector<int32_t> fed(static_cast<size_t>(batch_));
    for (;;) {
      segments.clear();
      std::vector<int64_t> which;
      for (int64_t i = 0; i < batch_; ++i) {
        if (!live_[static_cast<size_t>(i)]) continue;
        fed[static_cast<size_t>(i)] = generated_[static_cast<size_t>(i)].back();
        segments.push_back({.sequence = i, .tokens = std::span<const int32_t>(&fed[static_cast<size_t>(i)], 1)});
        which.push_back(i);
      }
      if (segments.empty()) break;
      const auto start = std::chrono::steady_clock::now();
      inference_.forward_cached(segments, logits_);
      decode_seconds += seconds_since(start);
      decode_tokens += static_cast<int64_t>(segments.size());
      write_logits(static_cast<int64_t>(segments.size()));
      for (size_t r = 0; r < which.size(); ++r) {
        if (o_.check_uncached) check(which[r], static_cast<int64_t>(r));
        pick(which[r], static_cast<int64_t>(r));
      }
    }
  }

  // Compares the cached logits of sequence i (row `row`) with an uncached forward of everything it has seen.
  void check(int64_t i, int64_t row) {
    std::vector<int32_t> all = prompts_[static_cast<size_t>(i)];
    const auto& g = generated_[static_cast<size_t>(i)];
    all.insert(all.end(), g.begin(), g.end());
    if (static_cast<int64_t>(all.size()) != inference_.cache().length(i)) all.pop_back();  // the token not fed yet
    inference_.forward_full(all, reference_);
    double difference = 0.0, norm = 0.0, largest = 0.0;
    for (int64_t v = 0; v < padded_; ++v) {
      const double a = logits_[static_cast<size_t>(row * padded_ + v)], b = reference_[static_cast<size_t>(v)];
      difference += (a - b) * (a - b);
      norm += b * b;
      largest = std::max(largest, std::abs(a - b));
    }
    worst_relative = std::max(worst_relative, std::sqrt(difference / std::max(norm, 1e-30)));
    worst_absolute = std::max(worst_absolute, largest);
    ++checked;
  }

  // Samples sequence i's next token from row `row` of the logits; stops the sequence at the
  // end-of-document token, after --max-new-tokens, or when its positions run out.
  void pick(int64_t i, int64_t row) {
    const std::span<const float> row_logits(logits_.data() + row * padded_, static_cast<size_t>(vocab_));
    auto& g = generated_[static_cast<size_t>(i)];
    const int32_t token = sampler_.next(row_logits, i, static_cast<int64_t>(g.size()));
    g.push_back(token);
    const int64_t length = static_cast<int64_t>(prompts_[static_cast<size_t>(i)].size() + g.size());
    if (is_eod(token) && !o_.ignore_eod) {
      live_[static_cast<size_t>(i)] = false;
      stop_reason_[static_cast<size_t>(i)] = "end-of-document";
    } else if (static_cast<int64_t>(g.size()) >= o_.max_new_tokens) {
      live_[static_cast<size_t>(i)] = false;
    } else if (length >= capacity_) {
      live_[static_cast<size_t>(i)] = false;
      stop_reason_[static_cast<size_t>(i)] = "position table full";
    }
  }

  void write_logits(int64_t rows) {
    for (int64_t i = 0; logits_out_ && logits_written_ && i < rows; ++i) {
      logits_written_ = std::fwrite(logits_.data() + i * padded_, sizeof(float), static_cast<size_t>(vocab_),
                                    logits_out_) == static_cast<size_t>(vocab_);
    }
  }

  const Options& o_;
  const std::vector<std::vector<int32_t>>& prompts_;
  const std::vector<int32_t>& eod_ids_;
  const int64_t capacity_;
  InferenceModel& inference_;
  Sampler sampler_;
  const int64_t batch_, vocab_, padded_;
  std::vector<std::vector<int32_t>> generated_;
  std::vector<std::string> stop_reason_;
  std::vector<bool> live_;
  std::vector<float> logits_, reference_;
  std::FILE* logits_out_ = nullptr;
  bool logits_written_ = true;
};

// Rank 0's output: each sample (decoded text, or ids), the throughput, the --check-uncached figures.
void print_results(const Options& o, const std::vector<std::vector<int32_t>>& prompts, TextTokenizer* tokenizer,
                   const Decoding& decoding, int threads, int tensor_parallel) {
  for (int64_t i = 0; i < static_cast<int64_t>(prompts.size()); ++i) {
    const auto& prompt = prompts[static_cast<size_t>(i)];
    const auto& g = decoding.generated(i);
    std::printf("=== sample %lld: %zu prompt tokens, %zu new, stop: %s ===\n", static_cast<long long>(i), prompt.size(),
                g.size(), decoding.stop_reason(i).c_str());
    std::vector<int32_t> shown = g;
    if (!shown.empty() && decoding.is_eod(shown.back()) && !o.ignore_eod) shown.pop_back();
    if (tokenizer) {
      std::string text = tokenizer->decode(prompt) + tokenizer->decode(shown);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::printf("\n");
    } else {
      std::printf("%s | %s\n", absl::StrJoin(prompt, " ").c_str(), absl::StrJoin(shown, " ").c_str());
    }
    if (o.print_ids) std::printf("ids: %s\n", absl::StrJoin(g, " ").c_str());
  }
  const double prefill_seconds = decoding.prefill_seconds, decode_seconds = decoding.decode_seconds;
  std::printf("prefill: %lld tokens in %.4f s (%.1f tokens/s); decode: %lld tokens in %.4f s (%.1f tokens/s), "
              "%s, %d threads x %d tensor-parallel ranks\n",
              static_cast<long long>(decoding.prefill_tokens), prefill_seconds,
              prefill_seconds > 0 ? static_cast<double>(decoding.prefill_tokens) / prefill_seconds : 0.0,
              static_cast<long long>(decoding.decode_tokens), decode_seconds,
              decode_seconds > 0 ? static_cast<double>(decoding.decode_tokens) / decode_seconds : 0.0, o.device.c_str(),
              threads, tensor_parallel);
  if (o.check_uncached) {
    std::printf("cached vs uncached logits: %lld steps checked, max relative difference %.3g, max absolute %.3g\n",
                static_cast<long long>(decoding.checked), decoding.worst_relative, decoding.worst_absolute);
  }
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
  std::unique_ptr<TextTokenizer> tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  GPT_RETURN_IF_ERROR(agree(prepare(o, texts, model, tokenizer, prompts)));
  const ModelConfig& config = model.config;
  const auto batch = static_cast<int64_t>(prompts.size());
  int64_t capacity = 0;
  for (const auto& p : prompts) capacity = std::max(capacity, static_cast<int64_t>(p.size()) + o.max_new_tokens);
  capacity = std::min(capacity, config.max_position_embeddings);

  // The node's cores shared among its ranks; on a GPU, the rank's node-local GPU among the visible
  // ones (as pretrain_gpt picks it).
  const int threads = thread_count(o);
  GPT_RETURN_IF_ERROR(agree(check_device(o)));
  Context ctx = o.device == "cuda" ? Context::gpu(gpu_for_local_rank(local_rank(), cuda::device_count()))
                                   : Context::cpu(threads);
  InferenceModel inference(config, model.params, ctx, batch, capacity, tensor_group);
  if (printer) print_banner(o, model, batch, grid.shape().tensor, inference);

  Decoding decoding(o, prompts, model.eod_ids, capacity, inference);
  const bool logits_written = decoding.run(printer);
  GPT_RETURN_IF_ERROR(agree(logits_written ? absl::OkStatus()
                                           : absl::PermissionDeniedError(absl::StrCat("cannot write ", o.logits_file))));
  if (printer) print_results(o, prompts, tokenizer.get(), decoding, threads, grid.shape().tensor);
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
  app.add_option("--iteration", o.iteration, "Iteration to open in a save directory (default: the tracker's)")
      ->transform(gpt::decimal_integer(0));
  app.add_option("--prompt", o.prompts, "A prompt (repeat for a batch); text, or token ids without a text tokenizer");
  app.add_option("--prompt-file", o.prompt_file, "Prompts, one per line ('-': stdin; the default without --prompt)");
  app.add_option("--max-new-tokens", o.max_new_tokens, "Tokens to generate per prompt (default 32)")
      ->transform(gpt::decimal_integer(0));
  app.add_flag("--greedy", o.sampling.greedy, "Argmax decoding (also --temperature 0)");
  app.add_option("--temperature", o.sampling.temperature, "Sampling temperature, from 0 to 1e30 (default 1; 0: greedy)")
      ->transform(gpt::number_in(gpt::NumberRange::from_to(0, 1e30)));
  app.add_option("--top-k", o.sampling.top_k, "Sample among the k most likely tokens (0: all)")
      ->transform(gpt::decimal_integer(0));
  app.add_option("--top-p", o.sampling.top_p,
                 "Nucleus sampling: the most likely tokens up to mass p, from 0 to 1 (1: all)")
      ->transform(gpt::number_in(gpt::NumberRange::from_to(0, 1)));
  app.add_option("--seed", o.sampling.seed, "Sampling seed, a decimal integer from 0 (same seed, same text; default 1234)")
      ->transform(gpt::decimal_integer(0));
  app.add_option("--vocab-file", o.vocab_file, "GPT-2 vocab.json / encoder.json (default: the checkpoint's)");
  app.add_option("--merge-file", o.merge_file, "GPT-2 merges.txt / vocab.bpe (default: the checkpoint's)");
  app.add_option("--tokenizer-model", o.tokenizer_model,
                 "SentencePiece model or Hugging Face tokenizer.json / directory (default: the checkpoint's)");
  app.add_option("--vocab-size", o.vocab_size, "Real (unpadded) vocabulary size, when the saved arguments do not tell it")
      ->transform(gpt::decimal_integer(1));
  app.add_option("--threads", o.threads, "BLAS threads, 1 to 4096 (default: the node's cores shared among its ranks)")
      ->transform(gpt::decimal_integer(1, 4096));
  app.add_flag("--prompt-ids", o.prompt_ids, "Prompts are token ids separated by spaces, also with a text tokenizer");
  app.add_option("--logits-file", o.logits_file,
                 "Write every step's logits (real vocabulary, FP32): the prefill's row per prompt, then each decode "
                 "step's row per live sequence");
  app.add_flag("--print-ids", o.print_ids, "Also print the generated token ids");
  app.add_option("--eod-id", o.eod_id,
                 "Stop at this token instead (default: the tokenizer's end-of-document id; an imported model's eos_token_id)")
      ->transform(gpt::decimal_integer(0, std::numeric_limits<int32_t>::max()));
  app.add_flag("--ignore-eod", o.ignore_eod, "Do not stop at the end-of-document token");
  app.add_flag("--check-uncached", o.check_uncached,
               "At every step also run the whole sequence without the cache and report the largest logit difference");
  app.add_option("--tensor-model-parallel-size", o.tensor_parallel,
                 "Split the model over this many ranks (mpirun -np N; Megatron's column/row-parallel layers)")
      ->transform(gpt::decimal_integer(1, std::numeric_limits<int>::max()));
  app.add_option("--pipeline-model-parallel-size", o.pipeline_parallel,
                 "Refused above 1: generate has no pipeline parallelism (see docs/GENERATION.md)")
      ->transform(gpt::decimal_integer(1, std::numeric_limits<int>::max()));
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
