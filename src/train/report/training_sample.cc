#include "train/report/training_sample.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/float16.h"
#include "core/check.h"
#include "core/memory.h"
#include "generate/inference_model.h"
#include "generate/sampler.h"
#include "model/param_registry.h"
#include "parallel/comm/world_agreement.h"
#include "parallel/process_grid.h"

namespace gpt {
namespace {

constexpr int64_t kSampleTokens = 32;

bool uses_text_tokenizer(const Arguments& a) {
  return !a.mock_data && (is_text_tokenizer_type(a.tokenizer_type) || (a.tokenizer_type.empty() && !a.vocab_file.empty()));
}

// One piece as bytes: "key\tglobal\toffsets\tlocal\tdtype\tbytes\n" then the data.
void append_piece(std::string& out, const ShardedTensor& piece) {
  std::vector<unsigned char> bytes(piece.data.bytes());
  copy_bytes(Device::kCpu, bytes.data(), piece.data.device(), piece.data.data(), bytes.size());
  out += absl::StrCat(piece.key, "\t", absl::StrJoin(piece.global_shape, ","), "\t", absl::StrJoin(piece.offsets, ","),
                      "\t", absl::StrJoin(piece.local_shape, ","), "\t", static_cast<int>(piece.data.dtype()), "\t",
                      bytes.size(), "\n");
  out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<int64_t> numbers(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    GPT_CHECK(absl::SimpleAtoi(part, &v)) << "sample piece field " << part;
    out.push_back(v);
  }
  return out;
}

// Places the pieces of `blob` into the global FP32 tensors.
void place_pieces(const std::string& blob, std::map<std::string, std::vector<float>>& params) {
  size_t at = 0;
  while (at < blob.size()) {
    const size_t end = blob.find('\n', at);
    GPT_CHECK(end != std::string::npos) << "sample piece header";
    const std::vector<std::string> f = absl::StrSplit(blob.substr(at, end - at), '\t');
    GPT_CHECK_EQ(f.size(), 6u);
    const std::vector<int64_t> global = numbers(f[1]), offsets = numbers(f[2]), local = numbers(f[3]);
    int dtype = 0;
    size_t bytes = 0;
    GPT_CHECK(absl::SimpleAtoi(f[4], &dtype) && absl::SimpleAtoi(f[5], &bytes));
    const char* data = blob.data() + end + 1;
    at = end + 1 + bytes;
    GPT_CHECK(f[0].rfind("model/", 0) == 0);
    std::vector<float>& tensor = params[f[0].substr(6)];
    int64_t total = 1;
    for (int64_t d : global) total *= d;
    tensor.resize(static_cast<size_t>(total));
    const int64_t rows = local.empty() ? 1 : local[0], columns = local.size() > 1 ? local[1] : 1;
    const int64_t global_columns = global.size() > 1 ? global[1] : 1;
    const int64_t row0 = offsets.empty() ? 0 : offsets[0], column0 = offsets.size() > 1 ? offsets[1] : 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < columns; ++c) {
        const int64_t i = r * columns + c;
        float value;
        if (static_cast<DType>(dtype) == DType::kFloat32) {
          std::memcpy(&value, data + i * 4, 4);
        } else {
          uint16_t bits;
          std::memcpy(&bits, data + i * 2, 2);
          value = static_cast<DType>(dtype) == DType::kFloat16 ? fp16_bits_to_float(bits) : bf16_bits_to_float(bits);
        }
        tensor[static_cast<size_t>((row0 + r) * global_columns + column0 + c)] = value;
      }
    }
  }
}


}  // namespace

TrainingSampler::TrainingSampler(const Arguments& args, const ProcessGrid& grid) : args_(args), grid_(grid) {}

absl::Status TrainingSampler::after_iteration(const RankParameters& parameters, int64_t iteration) {
  if (args_.sample_interval <= 0 || iteration % args_.sample_interval != 0) return absl::OkStatus();
  // Sampled on world rank 0, printed by the logging rank (the last); a failure there (a bad
  // --sample-prompt) reaches every rank, which all stop with it.
  const absl::StatusOr<std::string> sampled = sample(parameters, iteration);
  std::string message = sampled.ok() ? absl::StrCat("+", *sampled) : absl::StrCat("-", sampled.status().message());
  world::broadcast_from_rank0(message, "training sample text");
  if (message.empty() || message[0] == '-') return absl::InvalidArgumentError(message.substr(message.empty() ? 0 : 1));
  const std::string text = message.substr(1);
  if (grid_.is_logging_rank()) {
    std::printf("sample at iteration %lld: %s\n", static_cast<long long>(iteration), text.c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TrainingSampler::sample(const RankParameters& parameters, int64_t iteration) {
  const bool sampling = world::rank() == 0;  // gathers the parameters and samples
  if (sampling && !tokenizer_ && uses_text_tokenizer(args_)) {
    GPT_ASSIGN_OR_RETURN(tokenizer_, load_text_tokenizer({.type = args_.tokenizer_type.empty() ? "GPT2BPETokenizer" : args_.tokenizer_type,
                                                          .vocab_file = args_.vocab_file,
                                                          .merge_file = args_.merge_file,
                                                          .tokenizer_model = args_.tokenizer_model}));
  }
  // This rank's share: the parameter pieces a checkpoint would take from it (every element once;
  // data-parallel replicas, and the context-parallel ranks that hold the same parameters, send only
  // from rank 0 of their data x context group; experts apart from rank 0 of their expert
  // data-parallel group).
  parameters.settle();
  parameters.ctx.synchronize();
  std::string mine;
  for (const ShardedTensor& piece : parameters.params.sharded_tensors()) {
    if (piece.replica_id != 0) continue;
    const Communicator& replicas = piece.expert_data_parallel ? grid_.expert_data() : grid_.data_context();
    if (piece.replicated_over_data_parallel && replicas.rank() != 0) continue;
    append_piece(mine, piece);
  }
  // Bounded by --distributed-timeout-minutes, like every agreement over the world.
  const std::vector<std::string> shares = world::gather_to_rank0(mine, "training sample parameters");
  if (!sampling) return std::string();
  std::string all;
  for (const std::string& share : shares) all += share;

  std::map<std::string, std::vector<float>> params;
  place_pieces(all, params);
  ModelConfig config = parameters.config;
  config.dtype = DType::kFloat32;
  config.hidden_dropout = config.attention_dropout = 0.0f;
  // The prompt: text with a text tokenizer, token ids otherwise; empty: the end-of-document token.
  const int32_t eod = tokenizer_ ? tokenizer_->eod_id() : static_cast<int32_t>(config.vocab_size - 1);
  std::vector<int32_t> prompt;
  if (tokenizer_) {
    tokenizer_->encode(args_.sample_prompt, prompt);
  } else {
    for (absl::string_view word : absl::StrSplit(args_.sample_prompt, ' ', absl::SkipWhitespace())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(word, &id) || id < 0 || id >= config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("--sample-prompt: '", word, "' is not a token id in [0, ",
                                                       config.vocab_size, ") (no text tokenizer)"));
      }
      prompt.push_back(id);
    }
  }
  if (prompt.empty()) prompt.push_back(eod);
  const int64_t capacity = std::min<int64_t>(static_cast<int64_t>(prompt.size()) + kSampleTokens,
                                             config.max_position_embeddings);
  if (static_cast<int64_t>(prompt.size()) >= capacity) {
    return absl::InvalidArgumentError("--sample-prompt is as long as the position table");
  }
  Context ctx = Context::cpu(1);
  InferenceModel model(config, params, ctx, 1, capacity);
  // A draw per (seed, iteration): the same text for the same weights in any layout.
  Sampler sampler({.temperature = 1.0f, .seed = static_cast<uint64_t>(args_.seed) * 1000003u +
                                                 static_cast<uint64_t>(iteration)});
  std::vector<float> logits;
  std::vector<int32_t> generated;
  std::vector<int32_t> fed = prompt;
  const InferenceModel::Segment first{.sequence = 0, .tokens = fed};
  model.forward_cached(std::span<const InferenceModel::Segment>(&first, 1), logits);
  for (;;) {
    const std::span<const float> row(logits.data(), static_cast<size_t>(config.vocab_size));
    // A token drawn from NaN or infinite logits is noise: the sample says so instead (training
    // goes on; its own NaN checks judge the run).
    if (!std::all_of(row.begin(), row.end(), [](float x) { return std::isfinite(x); })) {
      return absl::StrCat("(no sample: the model's logits are not finite after ", generated.size(), " tokens)");
    }
    const int32_t token = sampler.next(row, 0, static_cast<int64_t>(generated.size()));
    generated.push_back(token);
    if (token == eod || static_cast<int64_t>(generated.size()) >= kSampleTokens ||
        model.cache().length(0) + 1 >= capacity) {
      break;
    }
    const InferenceModel::Segment next{.sequence = 0, .tokens = std::span<const int32_t>(&generated.back(), 1)};
    model.forward_cached(std::span<const InferenceModel::Segment>(&next, 1), logits);
  }
  if (tokenizer_) {
    std::string text = tokenizer_->decode(prompt) + " | " + tokenizer_->decode(generated);
    for (char& c : text) {
      if (c == '\n') c = ' ';  // one line in the log
    }
    return text;
  }
  return absl::StrCat(absl::StrJoin(prompt, " "), " | ", absl::StrJoin(generated, " "));
}

}  // namespace gpt
