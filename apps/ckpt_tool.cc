// ckpt_tool: looks into, verifies and exports the sharded HDF5 checkpoints pretrain_gpt writes
// (docs/CHECKPOINTS.md, section "ckpt_tool").
//
//   ckpt_tool inspect DIR [--iteration N]     iteration, layout, run state, every tensor
//   ckpt_tool verify DIR [--iteration N]      the index's own checksums and iteration, every shard
//                                             against the index, coverage of every tensor, every
//                                             chunk's checksum
//   ckpt_tool export DIR --output model.safetensors [--iteration N] [--vocab-size N]
//                                             the model in Hugging Face GPT-2's safetensors layout
//
// DIR is a save directory (its tracker latest_checkpointed_iteration.txt picks the checkpoint, or
// --iteration N) or one checkpoint directory iter_<7 digits>. Errors: one line on stderr, exit 1.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "checkpoint/checkpoint_files.h"
#include "cli_parse.h"
#include "ckpt_tool_hf.h"
#include "generate/checkpoint_model.h"
#include "hf/safetensors.h"

namespace gpt {
namespace {


std::string shape_text(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

int64_t volume(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}


absl::StatusOr<std::unique_ptr<CheckpointReader>> open_checkpoint(const std::string& given,
                                                                  std::optional<int64_t> iteration) {
  GPT_ASSIGN_OR_RETURN(const std::string directory, resolve_checkpoint_directory(given, iteration));
  return CheckpointReader::open(directory);
}


// ---- inspect ---------------------------------------------------------------------------------

absl::Status inspect(const std::string& given, std::optional<int64_t> iteration) {
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, open_checkpoint(given, iteration));
  const CheckpointMetadata& m = reader->metadata();
  std::printf("checkpoint: %s\n", reader->directory().c_str());
  std::printf("iteration: %lld\n", static_cast<long long>(m.iteration));
  std::printf("layout: TP=%lld PP=%lld DP=%lld virtual stages=%lld distributed optimizer=%s params dtype=%s\n",
              static_cast<long long>(m.tensor_parallel), static_cast<long long>(m.pipeline_parallel),
              static_cast<long long>(m.data_parallel), static_cast<long long>(m.virtual_stages),
              m.distributed_optimizer ? "yes" : "no", m.params_dtype.c_str());
  std::printf("consumed train samples: %lld\n", static_cast<long long>(m.consumed_train_samples));
  std::printf("consumed valid samples: %lld\n", static_cast<long long>(m.consumed_valid_samples));
  std::printf("optimizer steps: %lld\n", static_cast<long long>(m.optimizer_steps));
  std::printf("seed: %lld\n", static_cast<long long>(m.seed));
  std::printf("shards: %zu (%s)\n", reader->shard_files().size(), absl::StrJoin(reader->shard_files(), ", ").c_str());
  int64_t bytes = 0;
  for (const auto& [key, tensor] : reader->tensors()) bytes += volume(tensor.global_shape) * static_cast<int64_t>(dtype_size(tensor.dtype));
  std::printf("tensors: %zu (%lld bytes)\n", reader->tensors().size(), static_cast<long long>(bytes));
  for (const auto& [key, tensor] : reader->tensors()) {
    std::printf("  %s %s %s pieces=%zu\n", key.c_str(), shape_text(tensor.global_shape).c_str(),
                std::string(dtype_name(tensor.dtype)).c_str(), tensor.pieces.size());
  }
  return absl::OkStatus();
}

// ---- verify ----------------------------------------------------------------------------------

absl::Status verify(const std::string& given, std::optional<int64_t> iteration) {
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, open_checkpoint(given, iteration));
  if (reader->metadata().legacy) {
    std::printf("note: format version 1 (saved before whole-checkpoint checksums): the shards' identity and the "
                "index's metadata cannot be verified, only the tensor chunks\n");
  }
  GPT_RETURN_IF_ERROR(reader->verify_shards());
  GPT_RETURN_IF_ERROR(reader->check_coverage());
  GPT_RETURN_IF_ERROR(reader->verify_all());
  int64_t bytes = 0;
  for (const auto& [key, tensor] : reader->tensors()) bytes += volume(tensor.global_shape) * static_cast<int64_t>(dtype_size(tensor.dtype));
  std::printf("OK: %zu tensors, %lld bytes verified (%s, %zu shards)\n", reader->tensors().size(),
              static_cast<long long>(bytes), reader->directory().c_str(), reader->shard_files().size());
  return absl::OkStatus();
}

// ---- export ----------------------------------------------------------------------------------

// One tensor of the output: its name, shape, and how to produce its FP32 values.
struct ExportTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::string source;  // the checkpoint key
  enum Transform { kCopyRows, kTranspose, kQkvWeight, kQkvBias } transform = kCopyRows;
};

struct ModelShape {
  int64_t vocab = 0, padded_vocab = 0, hidden = 0, layers = 0, heads = 0, head_dim = 0, ffn = 0, positions = 0;
  bool untied = false;
  double norm_epsilon = 1e-5;
};



absl::StatusOr<ModelShape> model_shape(const CheckpointReader& reader, std::optional<int64_t> vocab_override) {
  const std::map<std::string, std::string> args = saved_arguments(reader);
  auto need = [&](const std::string& key) -> absl::Status {
    if (!reader.contains(key)) {
      return absl::DataLossError(absl::StrCat("checkpoint ", reader.directory(), " has no tensor '", key, "'"));
    }
    return absl::OkStatus();
  };
  // Hugging Face's GPT-2 layout has none of the Llama-style options; this single-file export copies
  // tensors as stored, so zero-centred norm weights (--apply-layernorm-1p) are refused here (the
  // --output-dir export adds their 1), and GPT-2 has no squared-ReLU MLP and no per-head query/key
  // norms (--qk-layernorm).
  const std::pair<const char*, const char*> gpt2_values[] = {
      {"--normalization", "LayerNorm"}, {"--position-embedding-type", "learned_absolute"}, {"--swiglu", "false"},
      {"--group-query-attention", "false"}, {"--disable-bias-linear", "false"}, {"--apply-layernorm-1p", "false"},
      {"--squared-relu", "false"}, {"--qk-layernorm", "false"}};
  for (const auto& [flag, want] : gpt2_values) {
    if (args.count(flag) && args.at(flag) != want) {
      return absl::FailedPreconditionError(absl::StrCat("the export writes Hugging Face's GPT-2 layout, which needs ",
                                                        flag, " ", want, " (checkpoint: ", args.at(flag), ")"));
    }
  }
  const std::string embedding = "model/embedding.word_embeddings.weight";
  GPT_RETURN_IF_ERROR(need(embedding));
  GPT_RETURN_IF_ERROR(need("model/embedding.position_embeddings.weight"));
  ModelShape s;
  s.padded_vocab = reader.global_shape(embedding).at(0);
  s.hidden = reader.global_shape(embedding).at(1);
  s.positions = reader.global_shape("model/embedding.position_embeddings.weight").at(0);
  GPT_ASSIGN_OR_RETURN(s.layers, saved_argument_int(args, "--num-layers"));
  GPT_ASSIGN_OR_RETURN(s.heads, saved_argument_int(args, "--num-attention-heads"));
  s.untied = args.count("--untie-embeddings-and-output-weights") && args.at("--untie-embeddings-and-output-weights") == "true";
  if (args.count("--norm-epsilon")) {
    if (!absl::SimpleAtod(args.at("--norm-epsilon"), &s.norm_epsilon)) {
      return absl::DataLossError("the checkpoint's saved arguments have a malformed --norm-epsilon");
    }
  }
  const std::string qkv0 = "model/decoder.layers.0.self_attention.linear_qkv.weight";
  const std::string fc1 = "model/decoder.layers.0.mlp.linear_fc1.weight";
  if (s.layers < 1) return absl::DataLossError("the checkpoint's saved arguments have --num-layers < 1");
  GPT_RETURN_IF_ERROR(need(qkv0));
  GPT_RETURN_IF_ERROR(need(fc1));
  const int64_t projection = reader.global_shape(qkv0).at(0) / 3;
  if (s.heads < 1 || projection % s.heads != 0) return absl::DataLossError("QKV rows do not split into the heads");
  s.head_dim = projection / s.heads;
  if (projection != s.hidden) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Hugging Face GPT-2 needs heads x kv_channels = hidden size (checkpoint: ", s.heads, " x ", s.head_dim,
        " = ", projection, ", hidden ", s.hidden, ")"));
  }
  s.ffn = reader.global_shape(fc1).at(0);
  if (vocab_override) {
    s.vocab = *vocab_override;
  } else {
    GPT_ASSIGN_OR_RETURN(s.vocab, real_vocabulary_size(args, s.padded_vocab, reader.metadata().tensor_parallel));
  }
  if (s.vocab < 1 || s.vocab > s.padded_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary size ", s.vocab, " is not in [1, ", s.padded_vocab,
                                                   "] (the checkpoint's padded embedding rows)"));
  }
  return s;
}

std::vector<ExportTensor> export_plan(const ModelShape& s) {
  std::vector<ExportTensor> plan;
  auto add = [&](std::string name, std::vector<int64_t> shape, std::string source, ExportTensor::Transform t) {
    plan.push_back({std::move(name), std::move(shape), "model/" + std::move(source), t});
  };
  const int64_t h = s.hidden;
  add("transformer.wte.weight", {s.vocab, h}, "embedding.word_embeddings.weight", ExportTensor::kCopyRows);
  add("transformer.wpe.weight", {s.positions, h}, "embedding.position_embeddings.weight", ExportTensor::kCopyRows);
  for (int64_t layer = 0; layer < s.layers; ++layer) {
    const std::string ours = absl::StrCat("decoder.layers.", layer, ".");
    const std::string hf = absl::StrCat("transformer.h.", layer, ".");
    for (const char* p : {"weight", "bias"}) {
      add(hf + "ln_1." + p, {h}, ours + "input_layernorm." + p, ExportTensor::kCopyRows);
    }
    add(hf + "attn.c_attn.weight", {h, 3 * h}, ours + "self_attention.linear_qkv.weight", ExportTensor::kQkvWeight);
    add(hf + "attn.c_attn.bias", {3 * h}, ours + "self_attention.linear_qkv.bias", ExportTensor::kQkvBias);
    add(hf + "attn.c_proj.weight", {h, h}, ours + "self_attention.linear_proj.weight", ExportTensor::kTranspose);
    add(hf + "attn.c_proj.bias", {h}, ours + "self_attention.linear_proj.bias", ExportTensor::kCopyRows);
    for (const char* p : {"weight", "bias"}) {
      add(hf + "ln_2." + p, {h}, ours + "pre_mlp_layernorm." + p, ExportTensor::kCopyRows);
    }
    add(hf + "mlp.c_fc.weight", {h, s.ffn}, ours + "mlp.linear_fc1.weight", ExportTensor::kTranspose);
    add(hf + "mlp.c_fc.bias", {s.ffn}, ours + "mlp.linear_fc1.bias", ExportTensor::kCopyRows);
    add(hf + "mlp.c_proj.weight", {s.ffn, h}, ours + "mlp.linear_fc2.weight", ExportTensor::kTranspose);
    add(hf + "mlp.c_proj.bias", {h}, ours + "mlp.linear_fc2.bias", ExportTensor::kCopyRows);
  }
  for (const char* p : {"weight", "bias"}) {
    add(std::string("transformer.ln_f.") + p, {h}, std::string("decoder.final_layernorm.") + p, ExportTensor::kCopyRows);
  }
  if (s.untied) add("lm_head.weight", {s.vocab, h}, "output_layer.weight", ExportTensor::kCopyRows);
  return plan;
}

// The FP32 values of one output tensor, read from the checkpoint and rearranged.
absl::StatusOr<std::vector<float>> produce(CheckpointReader& reader, const ExportTensor& t, const ModelShape& s) {
  if (!reader.contains(t.source)) {
    return absl::DataLossError(absl::StrCat("checkpoint ", reader.directory(), " has no tensor '", t.source, "'"));
  }
  const std::vector<int64_t>& stored = reader.global_shape(t.source);
  // The part of the stored tensor we need: the first rows (unpadded vocabulary) or all of it.
  std::vector<int64_t> offsets(stored.size(), 0), shape = stored;
  if (t.transform == ExportTensor::kCopyRows && !stored.empty()) {
    if (stored.size() != t.shape.size() || stored[0] < t.shape[0] ||
        !std::equal(stored.begin() + 1, stored.end(), t.shape.begin() + 1)) {
      return absl::DataLossError(absl::StrCat("tensor '", t.source, "' has shape ", shape_text(stored), ", expected ",
                                              shape_text(t.shape)));
    }
    shape[0] = t.shape[0];
  } else {
    const std::vector<int64_t> want = t.transform == ExportTensor::kQkvBias ? t.shape
                                                                            : std::vector<int64_t>{t.shape[1], t.shape[0]};
    if (stored != want) {
      return absl::DataLossError(absl::StrCat("tensor '", t.source, "' has shape ", shape_text(stored), ", expected ",
                                              shape_text(want)));
    }
  }
  std::vector<float> in(static_cast<size_t>(volume(shape)));
  GPT_RETURN_IF_ERROR(reader.read(t.source, stored, offsets, shape, DType::kFloat32, in.data()));
  if (t.transform == ExportTensor::kCopyRows) return in;
  std::vector<float> out(in.size());
  const int64_t heads = s.heads, d = s.head_dim, projection = heads * d;
  // Our QKV row r = (head * 3 + which) * d + e; Hugging Face's output column (which * heads + head) * d + e.
  auto hf_column = [&](int64_t r) {
    const int64_t head = r / (3 * d), which = (r / d) % 3, e = r % d;
    return (which * heads + head) * d + e;
  };
  switch (t.transform) {
    case ExportTensor::kTranspose: {  // ours [out, in] -> Conv1D [in, out]
      const int64_t rows = shape[0], columns = shape[1];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < columns; ++c) out[static_cast<size_t>(c * rows + r)] = in[static_cast<size_t>(r * columns + c)];
      break;
    }
    case ExportTensor::kQkvWeight: {  // ours [3p, h] rows [heads, 3, d] -> Conv1D [h, 3p] columns [3, heads, d]
      const int64_t rows = 3 * projection, columns = shape[1];
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t o = hf_column(r);
        for (int64_t c = 0; c < columns; ++c) out[static_cast<size_t>(c * rows + o)] = in[static_cast<size_t>(r * columns + c)];
      }
      break;
    }
    case ExportTensor::kQkvBias:
      for (int64_t r = 0; r < 3 * projection; ++r) out[static_cast<size_t>(hf_column(r))] = in[static_cast<size_t>(r)];
      break;
    case ExportTensor::kCopyRows: break;
  }
  return out;
}


absl::Status export_safetensors(const std::string& given, std::optional<int64_t> iteration, const std::string& output,
                                std::optional<int64_t> vocab_override) {
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, open_checkpoint(given, iteration));
  GPT_ASSIGN_OR_RETURN(const ModelShape s, model_shape(*reader, vocab_override));
  const std::vector<ExportTensor> plan = export_plan(s);

  // Header: every tensor's FP32 byte range, in plan order; then the data in the same order.
  std::vector<std::string> entries;
  int64_t offset = 0;
  for (const ExportTensor& t : plan) {
    const int64_t bytes = volume(t.shape) * 4;
    entries.push_back(absl::StrCat(json_quote(t.name), ":{\"dtype\":\"F32\",\"shape\":[", absl::StrJoin(t.shape, ","),
                                   "],\"data_offsets\":[", offset, ",", offset + bytes, "]}"));
    offset += bytes;
  }
  // Metadata values must be strings; the model's hyperparameters for a config.json.
  const std::string metadata = absl::StrCat(
      "\"__metadata__\":{\"format\":\"pt\",\"source\":", json_quote(reader->directory()), ",\"iteration\":\"",
      reader->metadata().iteration, "\",\"vocab_size\":\"", s.vocab, "\",\"n_positions\":\"", s.positions,
      "\",\"n_embd\":\"", s.hidden, "\",\"n_layer\":\"", s.layers, "\",\"n_head\":\"", s.heads, "\",\"n_inner\":\"",
      s.ffn, "\",\"layer_norm_epsilon\":\"", absl::StrCat(s.norm_epsilon), "\",\"activation_function\":\"gelu_new\","
      "\"tie_word_embeddings\":\"", s.untied ? "false" : "true", "\"}");
  std::string header = absl::StrCat("{", metadata, ",", absl::StrJoin(entries, ","), "}");
  while (header.size() % 8 != 0) header += ' ';  // the data starts 8-byte aligned (as safetensors writes)

  const std::string temporary = output + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (!file) return absl::PermissionDeniedError(absl::StrCat("cannot write ", temporary, ": ", std::strerror(errno)));
  auto fail = [&](absl::Status status) {
    std::fclose(file);
    std::remove(temporary.c_str());
    return status;
  };
  auto put = [&](const void* data, size_t bytes) { return std::fwrite(data, 1, bytes, file) == bytes; };
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  bool written = put(length, 8) && put(header.data(), header.size());
  for (const ExportTensor& t : plan) {
    if (!written) break;
    absl::StatusOr<std::vector<float>> values = produce(*reader, t, s);
    if (!values.ok()) return fail(values.status());
    // Little-endian FP32 (this program runs on little-endian hosts only).
    written = put(values->data(), values->size() * sizeof(float));
  }
  if (!written || std::fflush(file) != 0) return fail(absl::DataLossError(absl::StrCat("writing ", temporary, " failed: ", std::strerror(errno))));
  if (std::fclose(file) != 0) {
    std::remove(temporary.c_str());
    return absl::DataLossError(absl::StrCat("writing ", temporary, " failed: ", std::strerror(errno)));
  }
  std::error_code error;
  std::filesystem::rename(temporary, output, error);
  if (error) {
    std::remove(temporary.c_str());  // a failed export leaves no file behind
    return absl::DataLossError(absl::StrCat("cannot rename ", temporary, " to ", output, ": ", error.message()));
  }
  std::printf("exported %s (iteration %lld): %zu tensors, %lld bytes of FP32, vocabulary %lld (padded %lld), %s\n",
              output.c_str(), static_cast<long long>(reader->metadata().iteration), plan.size(),
              static_cast<long long>(offset), static_cast<long long>(s.vocab), static_cast<long long>(s.padded_vocab),
              s.untied ? "untied (lm_head.weight exported)" : "tied (lm_head = wte, omitted)");
  return absl::OkStatus();
}

int report(const absl::Status& status) {
  if (status.ok()) return 0;
  std::string message(status.message());
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  CLI::App app{
      "Inspect, verify and export pretrain_gpt's sharded HDF5 checkpoints.\n"
      "CHECKPOINT is a --save directory (its latest_checkpointed_iteration.txt, or --iteration N, picks\n"
      "the checkpoint) or one checkpoint directory DIR/iter_<7 digits>. Errors: one line, exit 1.",
      "ckpt_tool"};
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  ckpt_tool inspect checkpoints/                 the tracker's checkpoint\n"
      "  ckpt_tool verify checkpoints/iter_0000100      every checksum; OK or the damaged file and tensor\n"
      "  ckpt_tool export checkpoints/ -o model.safetensors\n"
      "See docs/CHECKPOINTS.md, section ckpt_tool.");
  std::string directory, output;
  std::optional<int64_t> iteration, vocab_size;

  CLI::App* inspect = app.add_subcommand("inspect", "Print the iteration, layout, run state and every tensor "
                                                    "(global shape, dtype, number of pieces)");
  CLI::App* verify = app.add_subcommand("verify", "Read every piece (Fletcher-32 checksums) and check that the pieces "
                                                  "cover every tensor exactly once");
  CLI::App* export_ = app.add_subcommand("export", "Write the model (not the optimizer) as one FP32 safetensors file "
                                                   "in Hugging Face GPT-2's layout (Conv1D weights, tied lm_head omitted)");
  for (CLI::App* command : {inspect, verify, export_}) {
    command->add_option("CHECKPOINT", directory, "Save directory or iter_<7 digits> directory")->required();
    command->add_option("--iteration", iteration, "Iteration to open in a save directory (default: the tracker's)")
        ->transform(gpt::decimal_integer(0));
  }
  CLI::Option* export_output = export_->add_option("--output,-o", output, "The safetensors file to write")->required();
  export_->add_option("--vocab-size", vocab_size,
                      "Real (unpadded) vocabulary size, when the saved arguments do not tell it")
      ->transform(gpt::decimal_integer(1));
  gpt::HfCommands hf(app, export_, export_output);
  if (const std::optional<int> exit_status = gpt::parse_command_line(app, argc, argv)) return *exit_status;
  if (std::optional<absl::Status> status = hf.run(directory, iteration, vocab_size, output)) return gpt::report(*status);
  if (*inspect) return gpt::report(gpt::inspect(directory, iteration));
  if (*verify) return gpt::report(gpt::verify(directory, iteration));
  return gpt::report(gpt::export_safetensors(directory, iteration, output, vocab_size));
}
