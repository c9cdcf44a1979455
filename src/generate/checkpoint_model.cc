#include "generate/checkpoint_model.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "data/text_tokenizer.h"
#include "generate/checkpoint_moe.h"
#include "model/param_registry.h"

namespace gpt {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }


absl::StatusOr<double> argument_double(const std::map<std::string, std::string>& args, const std::string& flag,
                                       double fallback) {
  auto it = args.find(flag);
  if (it == args.end()) return fallback;
  double value = 0;
  if (!absl::SimpleAtod(it->second, &value)) {
    return absl::DataLossError(absl::StrCat("the checkpoint's saved arguments have a malformed ", flag));
  }
  return value;
}

bool argument_true(const std::map<std::string, std::string>& args, const std::string& flag) {
  auto it = args.find(flag);
  return it != args.end() && it->second == "true";
}

std::string argument_text(const std::map<std::string, std::string>& args, const std::string& flag,
                          const std::string& fallback) {
  auto it = args.find(flag);
  return it == args.end() ? fallback : it->second;
}

}  // namespace


absl::StatusOr<int64_t> saved_argument_int(const std::map<std::string, std::string>& args, const std::string& flag) {
  auto it = args.find(flag);
  int64_t value = 0;
  if (it == args.end() || !absl::SimpleAtoi(it->second, &value)) {
    return absl::DataLossError(absl::StrCat("the checkpoint's saved arguments lack a number for ", flag));
  }
  return value;
}

std::map<std::string, std::string> saved_arguments(const CheckpointReader& reader) {
  std::map<std::string, std::string> values = arguments_by_flag(reader.metadata().arguments);
  for (auto& [flag, value] : values) {
    if (value.size() >= 2 && value.front() == '\'' && value.back() == '\'') value = value.substr(1, value.size() - 2);
  }
  if (argument_true(values, kTokenizerInCheckpointArgument)) {
    for (const char* flag : {"--vocab-file", "--merge-file", "--tokenizer-model"}) {
      auto it = values.find(flag);
      if (it != values.end() && !it->second.empty() && std::filesystem::path(it->second).is_relative()) {
        it->second = (std::filesystem::path(reader.directory()) / it->second).string();
      }
    }
  }
  return values;
}

absl::StatusOr<int64_t> real_vocabulary_size(const std::map<std::string, std::string>& args, int64_t padded,
                                             int64_t tensor_parallel) {
  const std::string tokenizer = argument_text(args, "--tokenizer-type", "");
  const bool mock = argument_true(args, "--mock-data");
  int64_t vocab = 0;
  std::string how;
  if (args.count(kHfVocabSizeArgument)) {
    GPT_ASSIGN_OR_RETURN(vocab, saved_argument_int(args, kHfVocabSizeArgument));
    how = "the imported config.json's vocab_size";
  } else if (mock || tokenizer == "NullTokenizer") {
    GPT_ASSIGN_OR_RETURN(vocab, saved_argument_int(args, "--vocab-size"));
    if (!mock) ++vocab;
    how = mock ? "--mock-data --vocab-size" : "NullTokenizer --vocab-size + 1";
  } else if (tokenizer == "GPT2BPETokenizer") {
    vocab = kGpt2BpeVocabularySize;
    how = "GPT2BPETokenizer";
  } else if (is_text_tokenizer_type(tokenizer) && args.count("--tokenizer-model")) {
    // The SentencePiece and Hugging Face tokenizers: read the saved model for its size.
    const std::string path = argument_text(args, "--tokenizer-model", "");
    absl::StatusOr<std::unique_ptr<TextTokenizer>> loaded = load_text_tokenizer({.type = tokenizer, .tokenizer_model = path});
    if (!loaded.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("cannot tell the real vocabulary size: ", tokenizer, " ",
                                                        loaded.status().message(), "; give it with --vocab-size N"));
    }
    vocab = (*loaded)->vocab_size();
    how = absl::StrCat(tokenizer, " ", path);
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot tell the real vocabulary size from the saved arguments (tokenizer '", tokenizer,
                     "'): give it with --vocab-size N"));
  }
  GPT_ASSIGN_OR_RETURN(const int64_t divisible_by, saved_argument_int(args, "--make-vocab-size-divisible-by"));
  const int64_t multiple = divisible_by * tensor_parallel;
  const int64_t expected = multiple > 0 ? (vocab + multiple - 1) / multiple * multiple : vocab;
  if (expected != padded) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the vocabulary from the saved arguments (", how, ": ", vocab, ") pads to ", expected,
        " rows but the checkpoint's embedding has ", padded, ": give the real vocabulary size with --vocab-size N"));
  }
  return vocab;
}

absl::StatusOr<ModelConfig> checkpoint_model_config(const CheckpointReader& reader,
                                                    std::optional<int64_t> vocab_override) {
  const std::map<std::string, std::string> args = saved_arguments(reader);
  const std::string embedding = std::string("model/") + kWordEmbeddingName;
  if (!reader.contains(embedding)) {
    return absl::DataLossError(absl::StrCat("checkpoint ", reader.directory(), " has no tensor '", embedding, "'"));
  }
  ModelConfig c;
  c.padded_vocab_size = reader.global_shape(embedding).at(0);
  c.hidden_size = reader.global_shape(embedding).at(1);
  GPT_ASSIGN_OR_RETURN(c.num_layers, saved_argument_int(args, "--num-layers"));
  GPT_ASSIGN_OR_RETURN(c.num_attention_heads, saved_argument_int(args, "--num-attention-heads"));
  GPT_ASSIGN_OR_RETURN(c.kv_channels, saved_argument_int(args, "--kv-channels"));
  GPT_ASSIGN_OR_RETURN(c.ffn_hidden_size, saved_argument_int(args, "--ffn-hidden-size"));
  GPT_ASSIGN_OR_RETURN(c.max_position_embeddings, saved_argument_int(args, "--max-position-embeddings"));
  GPT_ASSIGN_OR_RETURN(c.seq_length, saved_argument_int(args, "--seq-length"));
  if (argument_true(args, "--group-query-attention")) {
    GPT_ASSIGN_OR_RETURN(c.num_query_groups, saved_argument_int(args, "--num-query-groups"));
  }
  c.untie_embeddings_and_output_weights = argument_true(args, "--untie-embeddings-and-output-weights");
  GPT_ASSIGN_OR_RETURN(const double epsilon, argument_double(args, "--norm-epsilon", 1e-5));
  c.layernorm_epsilon = static_cast<float>(epsilon);
  const std::string position = argument_text(args, "--position-embedding-type", "learned_absolute");
  if (position == "rope") {
    c.position_embedding = PositionEmbedding::kRope;
    GPT_ASSIGN_OR_RETURN(const double percent, argument_double(args, "--rotary-percent", 1.0));
    GPT_ASSIGN_OR_RETURN(const double base, argument_double(args, "--rotary-base", 10000.0));
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.kv_channels) * percent);
    c.rotary_base = static_cast<float>(base);
    c.rotary_interleaved = argument_true(args, "--rotary-interleaved");
    c.rope_scaling.enabled = argument_true(args, "--use-rope-scaling");
    GPT_ASSIGN_OR_RETURN(const double factor, argument_double(args, "--rope-scaling-factor", 8.0));
    c.rope_scaling.factor = static_cast<float>(factor);
  } else if (position == "learned_absolute" && !argument_true(args, "--no-position-embedding")) {
    c.position_embedding = PositionEmbedding::kLearnedAbsolute;
  } else {
    c.position_embedding = PositionEmbedding::kNone;
  }
  c.normalization =
      argument_text(args, "--normalization", "LayerNorm") == "RMSNorm" ? Normalization::kRMSNorm : Normalization::kLayerNorm;
  c.swiglu = argument_true(args, "--swiglu");
  c.add_bias_linear = !argument_true(args, "--disable-bias-linear");
  c.add_qkv_bias = argument_true(args, "--add-qkv-bias");
  c.squared_relu = argument_true(args, "--squared-relu");
  c.exact_gelu = !c.swiglu && !c.squared_relu && (!c.add_bias_linear || argument_true(args, "--no-bias-gelu-fusion"));
  c.layernorm_zero_centered_gamma = argument_true(args, "--apply-layernorm-1p");
  c.qk_layernorm = argument_true(args, "--qk-layernorm");
  c.dtype = DType::kFloat32;
  if (vocab_override) {
    c.vocab_size = *vocab_override;
  } else {
    GPT_ASSIGN_OR_RETURN(c.vocab_size, real_vocabulary_size(args, c.padded_vocab_size, reader.metadata().tensor_parallel));
  }
  if (c.vocab_size < 1 || c.vocab_size > c.padded_vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary size ", c.vocab_size, " is not in [1, ",
                                                   c.padded_vocab_size, "] (the checkpoint's padded embedding rows)"));
  }
  if (c.num_layers < 1 || c.num_attention_heads < 1 || c.kv_channels < 1 ||
      c.num_attention_heads % c.query_groups() != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", reader.directory(),
                                            ": inconsistent layers / heads / groups / kv_channels in its arguments"));
  }
  // The saved layer count sizes the parameter table built below: it is bounded by the tensors the
  // checkpoint holds (every layer stores several), so a saved --num-layers of a billion is refused
  // here, not by the allocator.
  const int64_t stored = static_cast<int64_t>(reader.tensors().size());
  if (c.num_layers > stored) {
    return absl::DataLossError(absl::StrCat("checkpoint ", reader.directory(), ": its saved arguments say ",
                                            c.num_layers, " layers, but it holds only ", stored, " tensors"));
  }
  // The MoE layers' pattern, sized by the layer count just bounded.
  GPT_ASSIGN_OR_RETURN(c.moe, saved_moe_config(args, c.num_layers, c.ffn_hidden_size));
  if (c.moe.num_experts > stored) {
    return absl::DataLossError(absl::StrCat("checkpoint ", reader.directory(), ": its saved arguments say ",
                                            c.moe.num_experts, " experts, but it holds only ", stored, " tensors"));
  }
  // Every parameter must be stored with its expected global shape.
  for (const auto& [name, shape] : model_parameter_shapes(c)) {
    const std::string key = "model/" + name;
    if (!reader.contains(key)) {
      return absl::DataLossError(absl::StrCat("checkpoint ", reader.directory(), " has no tensor '", key, "'"));
    }
    if (reader.global_shape(key) != shape) {
      return absl::DataLossError(absl::StrCat("checkpoint ", reader.directory(), ": tensor '", key, "' has shape ",
                                              shape_text(reader.global_shape(key)), ", the saved arguments say ",
                                              shape_text(shape)));
    }
  }
  return c;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> model_parameter_shapes(const ModelConfig& config) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const ParamSpec& spec : build_param_specs(config)) shapes.emplace_back(spec.name, spec.global_shape);
  return shapes;
}

absl::StatusOr<CheckpointModel> load_checkpoint_model(const std::string& given, std::optional<int64_t> iteration,
                                                      std::optional<int64_t> vocab_override, TensorSlice slice,
                                                      const SavedArgumentsCheck& check_arguments) {
  GPT_ASSIGN_OR_RETURN(const std::string directory, resolve_checkpoint_directory(given, iteration));
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::open(directory));
  if (check_arguments) {
    const absl::Status checked = check_arguments(reader->metadata().arguments);
    if (!checked.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint ", reader->directory(),
                                                        ": its saved arguments would not pass pretrain_gpt's checks: ",
                                                        checked.message()));
    }
  }
  CheckpointModel model;
  GPT_ASSIGN_OR_RETURN(model.config, checkpoint_model_config(*reader, vocab_override));
  model.arguments = saved_arguments(*reader);
  model.iteration = reader->metadata().iteration;
  model.directory = reader->directory();
  model.tokenizer_type = argument_true(model.arguments, "--mock-data") ? "" : argument_text(model.arguments, "--tokenizer-type", "");
  // Megatron's end-of-document ids: GPT-2's <|endoftext|> (50256), NullTokenizer's added id
  // (--vocab-size), mock data's last id (vocab - 1); an import's recorded Hugging Face ids instead.
  const int32_t megatron_eod = model.tokenizer_type == "GPT2BPETokenizer"
                                   ? static_cast<int32_t>(kGpt2BpeVocabularySize - 1)
                                   : static_cast<int32_t>(model.config.vocab_size - 1);
  auto recorded_id = [&](absl::string_view text, const char* flag) -> absl::StatusOr<int32_t> {
    int32_t id = -1;
    if (!absl::SimpleAtoi(text, &id) || id < 0 || id >= model.config.vocab_size) {
      return absl::DataLossError(absl::StrCat("checkpoint ", model.directory, ": saved ", flag, " '", text,
                                              "' is not a token id in [0, ", model.config.vocab_size, ")"));
    }
    return id;
  };
  if (auto it = model.arguments.find(kHfEosArgument); it != model.arguments.end()) {
    for (absl::string_view text : absl::StrSplit(it->second, ',')) {
      GPT_ASSIGN_OR_RETURN(const int32_t id, recorded_id(text, kHfEosArgument));
      model.hf_eos_ids.push_back(id);
    }
  }
  if (auto it = model.arguments.find(kHfBosArgument); it != model.arguments.end()) {
    GPT_ASSIGN_OR_RETURN(model.hf_bos_id, recorded_id(it->second, kHfBosArgument));
  }
  model.eod_ids = model.hf_eos_ids.empty() ? std::vector<int32_t>{megatron_eod} : model.hf_eos_ids;
  model.start_id = model.hf_bos_id.value_or(model.eod_ids.front());
  GPT_RETURN_IF_ERROR(check_tensor_parallel(model.config, slice.size));
  // This rank's slice of every parameter (all of it with one rank), read straight from the pieces
  // of whatever layout saved it.
  std::vector<CheckpointReader::ReadRequest> requests;
  for (const ParamSpec& spec : build_param_specs(model.config)) {
    const ParamSlice local = param_slice(spec, model.config, slice);
    std::vector<float>& values = model.params[spec.name];
    values.assign(static_cast<size_t>(local.local_numel()), 0.0f);
    for (const SliceBox& box : local.boxes) {
      requests.push_back({.key = "model/" + spec.name, .global_shape = spec.global_shape, .offsets = box.offsets,
                          .shape = box.shape, .dtype = DType::kFloat32, .out = values.data() + box.local_offset});
    }
  }
  GPT_RETURN_IF_ERROR(reader->read_many(requests));
  GPT_RETURN_IF_ERROR(read_expert_biases(*reader, model.config, model.params));
  return model;
}

}  // namespace gpt
