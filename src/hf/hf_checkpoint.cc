#include "hf/hf_checkpoint.h"

#include <simdjson.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_files.h"
#include "core/checked_math.h"
#include "generate/checkpoint_model.h"
#include "hf/hf_config.h"
#include "hf/hf_moe.h"
#include "hf/hf_tokenizer_files.h"
#include "hf/json_config.h"
#include "hf/safetensors.h"
#include "model/param_registry.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;

std::string shape_text(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

int64_t volume(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool is_nonempty_directory(const std::string& path) {
  std::error_code error;
  return fs::exists(path, error) && !(fs::is_directory(path, error) && fs::is_empty(path, error));
}

absl::Status refuse(const std::string& path, const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat(path, ": ", why, " does not map to this program's models"));
}

}  // namespace

absl::StatusOr<HfFamily> hf_family(const ModelConfig& c) {
  if (c.moe.enabled()) return hf_moe_family(c);
  const bool learned = c.position_embedding == PositionEmbedding::kLearnedAbsolute;
  const bool layernorm = c.normalization == Normalization::kLayerNorm;
  if (learned && layernorm && !c.swiglu) {
    std::vector<std::string> problems;
    if (!c.add_bias_linear) problems.push_back("--disable-bias-linear");
    if (c.query_groups() != c.num_attention_heads) problems.push_back("grouped-query attention");
    if (c.attention_projection_size() != c.hidden_size) problems.push_back("heads x kv_channels != hidden size");
    if (c.squared_relu) problems.push_back("squared-ReLU activation (--squared-relu)");
    if (c.qk_layernorm) problems.push_back("per-head query and key norms (--qk-layernorm)");
    if (problems.empty()) return HfFamily::kGpt2;
    return absl::FailedPreconditionError(absl::StrCat("Hugging Face's GPT-2 has no ", absl::StrJoin(problems, ", ")));
  }
  if (c.position_embedding == PositionEmbedding::kRope && !layernorm && c.swiglu) {
    if (c.rotary_dim != c.kv_channels) {
      return absl::FailedPreconditionError("LlamaForCausalLM rotates every head dimension (--rotary-percent 1)");
    }
    if (c.qk_layernorm) {
      return absl::FailedPreconditionError(
          "LlamaForCausalLM has no per-head query and key norms (--qk-layernorm); this program exports none of the "
          "architectures that have them (Qwen3, OLMo2)");
    }
    // Biases on q, k and v alone are Qwen2's (Llama's attention_bias also covers o_proj).
    return c.has_qkv_bias() && !c.add_bias_linear ? HfFamily::kQwen2 : HfFamily::kLlama;
  }
  return absl::FailedPreconditionError(
      "neither GPT-2 (learned positions, LayerNorm, GeLU) nor Llama (RoPE, RMSNorm, SwiGLU): no Hugging Face "
      "architecture takes this combination");
}

absl::Status hf_export(const std::string& checkpoint, const std::string& output_dir, const HfExportOptions& options) {
  if (is_nonempty_directory(output_dir)) {
    return absl::AlreadyExistsError(absl::StrCat(output_dir, " exists and is not empty: export writes a new directory"));
  }
  GPT_ASSIGN_OR_RETURN(const CheckpointModel model, load_checkpoint_model(checkpoint, options.iteration, options.vocab_size, {},
                                                                         options.check_arguments));
  const ModelConfig& c = model.config;
  GPT_ASSIGN_OR_RETURN(const HfFamily family, hf_family(c));
  const std::vector<HfMapping> mappings = hf_mappings(c, family);
  // Shards: consecutive tensors up to max_shard_bytes each (a larger tensor alone).
  std::vector<std::vector<size_t>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (size_t i = 0; i < mappings.size(); ++i) {
    const int64_t bytes = volume(mappings[i].hf_shape) * 4;
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  std::string trimmed = output_dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::string temporary = trimmed + ".tmp";
  std::error_code error;
  fs::remove_all(temporary, error);
  fs::create_directories(temporary, error);
  if (error) return absl::PermissionDeniedError(absl::StrCat("cannot create ", temporary, ": ", error.message()));
  auto fail = [&](absl::Status status) {
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    return status;
  };
  const size_t n = shards.size();
  std::vector<std::string> weight_map;
  for (size_t s = 0; s < n; ++s) {
    char name[64];
    if (n == 1) {
      std::snprintf(name, sizeof(name), "model.safetensors");
    } else {
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, n);
    }
    std::vector<SafetensorsTensor> tensors;
    for (size_t i : shards[s]) {
      const HfMapping& m = mappings[i];
      const std::vector<float>& ours = model.params.at(m.ours);
      SafetensorsTensor t{m.hf_name, m.hf_shape, std::vector<float>(static_cast<size_t>(volume(m.hf_shape)))};
      for (int64_t e = 0; e < static_cast<int64_t>(t.values.size()); ++e) t.values[e] = ours[m.source(e)];
      // --apply-layernorm-1p stores the norms' weights zero-centred (the norm scales by 1 + w);
      // Hugging Face's LayerNorm and LlamaRMSNorm scale by their weight itself.
      if (c.layernorm_zero_centered_gamma && m.ours.ends_with("layernorm.weight")) {
        for (float& value : t.values) value += 1.0f;
      }
      tensors.push_back(std::move(t));
      weight_map.push_back(absl::StrCat(json_quote(m.hf_name), ": ", json_quote(name)));
    }
    absl::Status written = write_safetensors((fs::path(temporary) / name).string(), tensors, {{"format", "pt"}});
    if (!written.ok()) return fail(written);
  }
  auto write_text = [&](const std::string& file, const std::string& text) -> absl::Status {
    std::ofstream out(fs::path(temporary) / file);
    out << text;
    out.close();
    if (!out) return absl::DataLossError(absl::StrCat("writing ", temporary, "/", file, " failed"));
    return absl::OkStatus();
  };
  if (n > 1) {
    absl::Status written = write_text("model.safetensors.index.json",
                                      absl::StrCat("{\n  \"metadata\": {\"total_size\": ", total_bytes,
                                                   "},\n  \"weight_map\": {\n    ", absl::StrJoin(weight_map, ",\n    "),
                                                   "\n  }\n}\n"));
    if (!written.ok()) return fail(written);
  }
  // The recorded Hugging Face ids, or GPT-2's <|endoftext|> (HF's gpt2 config gives it as both).
  HfSpecialTokens special{.eos = {model.hf_eos_ids.begin(), model.hf_eos_ids.end()}, .bos = model.hf_bos_id};
  if (special.eos.empty() && model.tokenizer_type == "GPT2BPETokenizer") {
    special.eos = {kGpt2BpeVocabularySize - 1};
    special.bos = kGpt2BpeVocabularySize - 1;
  }
  absl::Status written = write_text("config.json", hf_config_json(c, family, special));
  if (!written.ok()) return fail(written);
  const absl::StatusOr<std::string> tokenizer = hf_export_tokenizer(model, temporary);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  fs::remove_all(trimmed, error);  // an empty directory given as the output
  fs::rename(temporary, trimmed, error);
  if (error) return fail(absl::DataLossError(absl::StrCat("cannot rename ", temporary, " to ", trimmed, ": ", error.message())));
  std::printf("exported %s (iteration %lld) to %s: %s, %zu tensors, %lld bytes of FP32 in %zu safetensors file%s%s, "
              "vocabulary %lld (padded %lld); tokenizer: %s\n",
              model.directory.c_str(), static_cast<long long>(model.iteration), trimmed.c_str(),
              hf_architecture(family), mappings.size(),
              static_cast<long long>(total_bytes), n, n > 1 ? "s" : "", n > 1 ? " + model.safetensors.index.json" : "",
              static_cast<long long>(c.vocab_size), static_cast<long long>(c.padded_vocab_size), tokenizer->c_str());
  return absl::OkStatus();
}

namespace {

// The safetensors files of a Hugging Face directory: the index's weight map (tensor -> file
// name) and its distinct files, or model.safetensors alone (an empty map).
struct SafetensorsLayout {
  std::map<std::string, std::string> file_of;
  std::vector<std::string> files;
};

absl::StatusOr<SafetensorsLayout> safetensors_layout(const std::string& hf_dir) {
  SafetensorsLayout layout;
  std::error_code error;
  const fs::path index = fs::path(hf_dir) / "model.safetensors.index.json";
  if (!fs::exists(index, error)) {
    layout.files.push_back("model.safetensors");
    return layout;
  }
  simdjson::dom::parser parser;
  simdjson::padded_string text;
  simdjson::dom::object map;
  if (simdjson::padded_string::load(index.string()).get(text) != simdjson::SUCCESS ||
      parser.parse(text)["weight_map"].get_object().get(map) != simdjson::SUCCESS) {
    return absl::DataLossError(absl::StrCat(index.string(), ": no \"weight_map\" object"));
  }
  std::set<std::string> distinct;
  for (const simdjson::dom::key_value_pair entry : map) {
    std::string_view file;
    if (entry.value.get_string().get(file) != simdjson::SUCCESS || file.find('/') != std::string_view::npos) {
      return absl::DataLossError(absl::StrCat(index.string(), ": tensor '", std::string(entry.key), "' maps to no plain file name"));
    }
    layout.file_of[std::string(entry.key)] = std::string(file);
    distinct.insert(std::string(file));
  }
  layout.files.assign(distinct.begin(), distinct.end());
  return layout;
}

// Our parameters (global name -> FP32 values) from the directory's tensors, each present with its
// shape and nothing else but known buffers; the vocabulary's padding rows stay 0.
using OpenedFiles = std::map<std::string, SafetensorsFile>;  // file name -> its checked header

absl::StatusOr<OpenedFiles> open_safetensors(const std::string& hf_dir, const SafetensorsLayout& layout) {
  OpenedFiles opened;
  for (const std::string& file : layout.files) {
    GPT_ASSIGN_OR_RETURN(SafetensorsFile st, SafetensorsFile::open((fs::path(hf_dir) / file).string()));
    opened.emplace(file, std::move(st));
  }
  return opened;
}

// Import's bound on config.json's sizes, checked before the tables or the tensors are built: the
// model it describes must be no larger than the tensors the files hold (in count and in elements),
// and its FP32 copy, held twice (the parameters and the shard being written), must fit in host
// memory. A config.json of a billion layers or a 2^40 vocabulary is refused here, not by the
// allocator.
absl::Status check_import_size(const JsonConfig& json, const ModelConfig& c, HfFamily family,
                               const OpenedFiles& opened) {
  int64_t stored_tensors = 0;
  CheckedBytes stored_elements = 0;
  for (const auto& [file, st] : opened) {
    for (const auto& [name, entry] : st.entries()) {
      CheckedBytes volume = 1;
      for (int64_t d : entry.shape) volume = volume * d;
      stored_elements = stored_elements + volume;
      ++stored_tensors;
    }
  }
  const std::optional<HfTableSize> size = hf_table_size(c, family);
  const std::optional<int64_t> padding = checked_product(c.padded_vocab_size - c.vocab_size, c.hidden_size,
                                                         c.untie_embeddings_and_output_weights ? 2 : 1);
  const CheckedBytes held = size && padding ? (CheckedBytes(size->elements) + *padding) * 4 * 2 : CheckedBytes(std::nullopt);
  if (!size || !stored_elements.value() || size->tensors > stored_tensors || size->elements > *stored_elements.value()) {
    return absl::DataLossError(absl::StrCat(
        json.path(), ": describes a model of ", size ? absl::StrCat(size->tensors, " tensors of ", size->elements,
                                                                    " elements") : std::string("more than 2^63 elements"),
        " (", c.num_layers, " layers, hidden ", c.hidden_size, ", vocabulary ", c.vocab_size,
        "), but the safetensors files hold ", stored_tensors, " tensors of ", stored_elements.value().value_or(-1),
        " elements"));
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  const std::optional<int64_t> host = checked_multiply(pages, page_size);
  if (!held.value() || (pages > 0 && page_size > 0 && host && *held.value() > *host)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        json.path(), ": the imported model needs ", held.value() ? absl::StrCat(*held.value() >> 20, " MiB") : "more than 2^63 bytes",
        " of host memory (its FP32 parameters, padded vocabulary included, twice) but this machine has ",
        host.value_or(0) >> 20, " MiB"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::vector<float>>> read_hf_tensors(
    const std::string& hf_dir, const SafetensorsLayout& layout, const OpenedFiles& opened, const JsonConfig& json,
    const ModelConfig& c, HfFamily family, const std::vector<HfMapping>& mappings) {
  std::map<std::string, std::pair<const SafetensorsFile*, std::string>> found;  // canonical name -> file, stored name
  // GPT-2 checkpoints on the Hub often lack the "transformer." prefix.
  auto canonical = [&](const std::string& name) {
    if (family == HfFamily::kGpt2 && name.rfind("transformer.", 0) != 0 && name != "lm_head.weight") {
      return "transformer." + name;
    }
    return name;
  };
  for (const auto& [file, kept] : opened) {
    for (const auto& [name, entry] : kept.entries()) {
      if (!layout.file_of.empty() && layout.file_of.count(name) && layout.file_of.at(name) != file) continue;
      found[canonical(name)] = {&kept, name};
    }
  }
  // Every tensor present with its shape; nothing else but known buffers.
  std::set<std::string> wanted;
  for (const HfMapping& m : mappings) {
    wanted.insert(m.hf_name);
    auto it = found.find(m.hf_name);
    if (it == found.end()) {
      return absl::NotFoundError(absl::StrCat(hf_dir, ": no tensor '", m.hf_name, "' (", json.path(), " describes a ",
                                              hf_architecture(family), " model that has it)"));
    }
    const SafetensorsEntry& entry = it->second.first->entries().at(it->second.second);
    if (entry.shape != m.hf_shape) {
      return absl::DataLossError(absl::StrCat(it->second.first->path(), ": tensor '", it->second.second, "' has shape ",
                                              shape_text(entry.shape), ", config.json says ", shape_text(m.hf_shape)));
    }
  }
  for (const auto& [name, where] : found) {
    if (wanted.count(name)) continue;
    const bool buffer = name.find(".attn.bias") != std::string::npos || name.find(".attn.masked_bias") != std::string::npos ||
                        name.find("rotary_emb.inv_freq") != std::string::npos ||
                        (name == "lm_head.weight" && !c.untie_embeddings_and_output_weights);
    if (!buffer) {
      return refuse(where.first->path(), absl::StrCat("tensor '", where.second, "' (not part of the ",
                                                      hf_architecture(family), " layout)"));
    }
  }
  // Our tensors (padding rows of the vocabulary stay 0).
  std::map<std::string, std::vector<float>> ours;
  for (const auto& [name, shape] : model_parameter_shapes(c)) ours[name].assign(static_cast<size_t>(volume(shape)), 0.0f);
  for (const HfMapping& m : mappings) {
    const auto& [file, stored] = found.at(m.hf_name);
    GPT_ASSIGN_OR_RETURN(const std::vector<float> values, file->read_float32(stored));
    std::vector<float>& target = ours.at(m.ours);
    for (int64_t e = 0; e < static_cast<int64_t>(values.size()); ++e) target[m.source(e)] = values[e];
  }
  return ours;
}

// Writes `ours` as iteration 0 of save_dir: iter_0000000.tmp, its shard and index, renamed, then
// the tracker; on failure removes what it made. Returns the iteration directory.
absl::StatusOr<std::string> write_imported_checkpoint(const std::string& save_dir, const ModelConfig& c,
                                                      const std::map<std::string, std::vector<float>>& ours,
                                                      const std::string& arguments, const HfFoundTokenizer& tokenizer) {
  std::error_code error;
  const bool created = !fs::exists(save_dir, error);
  const std::string temporary = (fs::path(save_dir) / (iteration_directory_name(0) + ".tmp")).string();
  fs::create_directories(temporary, error);
  if (error) return absl::PermissionDeniedError(absl::StrCat("cannot create ", temporary, ": ", error.message()));
  auto fail = [&](absl::Status status) {
    std::error_code ignored;
    if (created) {
      fs::remove_all(save_dir, ignored);
    } else {
      fs::remove_all(temporary, ignored);
    }
    return status;
  };
  std::vector<HostPiece> pieces;
  for (const auto& [name, shape] : model_parameter_shapes(c)) {
    HostPiece piece;
    piece.record.key = "model/" + name;
    piece.record.global_shape = shape;
    piece.record.offsets.assign(shape.size(), 0);
    piece.record.local_shape = shape;
    piece.dtype = DType::kFloat32;
    const std::vector<float>& values = ours.at(name);
    piece.bytes.resize(values.size() * sizeof(float));
    std::memcpy(piece.bytes.data(), values.data(), piece.bytes.size());
    pieces.push_back(std::move(piece));
  }
  const std::string shard = shard_file_name(0);
  // One save: its id binds the shard to the index (checkpoint format 2).
  const std::string save_id = save_id_text(new_save_id());
  absl::Status status = write_shard((fs::path(temporary) / shard).string(), pieces, save_id, /*iteration=*/0);
  if (!status.ok()) return fail(status);
  CheckpointMetadata metadata;
  metadata.save_id = save_id;
  metadata.iteration = 0;
  metadata.seed = 1234;
  metadata.params_dtype = "float32";
  metadata.arguments = arguments;
  status = write_index(temporary, {shard}, metadata);
  if (status.ok()) status = hf_copy_tokenizer(tokenizer, temporary);
  if (!status.ok()) return fail(status);
  const std::string final_directory = (fs::path(save_dir) / iteration_directory_name(0)).string();
  fs::rename(temporary, final_directory, error);
  if (error) return fail(absl::DataLossError(absl::StrCat("cannot rename ", temporary, ": ", error.message())));
  status = fsync_directory(save_dir);
  if (status.ok()) status = write_tracker(save_dir, 0);
  if (!status.ok()) return fail(status);
  return final_directory;
}

}  // namespace

absl::Status hf_import(const std::string& hf_dir, const std::string& save_dir, const HfImportOptions& options) {
  std::error_code error;
  if (!fs::is_directory(hf_dir, error)) {
    if (fs::exists(hf_dir, error)) {
      return absl::InvalidArgumentError(absl::StrCat(hf_dir, " is a file, not a Hugging Face model directory"));
    }
    return absl::NotFoundError(absl::StrCat(hf_dir, ": no such directory"));
  }
  if (is_nonempty_directory(save_dir)) {
    return absl::AlreadyExistsError(absl::StrCat(save_dir, " exists and is not empty: import writes a new save directory"));
  }
  if (options.make_vocab_size_divisible_by < 1 || options.tensor_parallel < 1) {
    return absl::InvalidArgumentError("--make-vocab-size-divisible-by and --tensor-model-parallel-size must be >= 1");
  }
  GPT_ASSIGN_OR_RETURN(const JsonConfig json, JsonConfig::read((fs::path(hf_dir) / "config.json").string()));
  GPT_ASSIGN_OR_RETURN(ImportedModel imported, hf_model_from_config(json));
  ModelConfig& c = imported.c;
  const HfFamily family = imported.family;
  GPT_ASSIGN_OR_RETURN(const HfSpecialTokens special, hf_special_tokens(hf_dir, json, c.vocab_size));
  const HfFoundTokenizer tokenizer = hf_find_tokenizer(hf_dir, family, c.vocab_size);
  // Every value the checkpoint will carry passes pretrain_gpt's own checks first (a norm epsilon
  // of -1 or 1e300, a RoPE base of 0, sizes whose products overflow).
  const std::optional<int64_t> vocab_multiple =
      checked_multiply(options.make_vocab_size_divisible_by, options.tensor_parallel);
  if (!vocab_multiple) {
    return absl::InvalidArgumentError("--make-vocab-size-divisible-by x --tensor-model-parallel-size overflows");
  }
  std::string arguments = hf_import_arguments(imported, *vocab_multiple, special, tokenizer.record);
  if (is_hf_moe_family(family)) arguments += hf_moe_import_arguments(c);
  if (options.check_arguments) {
    const absl::Status checked = options.check_arguments(arguments);
    if (!checked.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(json.path(), ": pretrain_gpt would refuse this model",
                                                        hf_config_key_of(checked.message(), family), ": ",
                                                        checked.message()));
    }
  }
  c.padded_vocab_size = padded_vocab_size(c.vocab_size, options.make_vocab_size_divisible_by, options.tensor_parallel);
  GPT_ASSIGN_OR_RETURN(const SafetensorsLayout layout, safetensors_layout(hf_dir));
  GPT_ASSIGN_OR_RETURN(const OpenedFiles opened, open_safetensors(hf_dir, layout));
  GPT_RETURN_IF_ERROR(check_import_size(json, c, family, opened));
  const std::vector<HfMapping> mappings = hf_mappings(c, family);
  GPT_ASSIGN_OR_RETURN(const auto ours, read_hf_tensors(hf_dir, layout, opened, json, c, family, mappings));
  GPT_ASSIGN_OR_RETURN(const std::string final_directory, write_imported_checkpoint(save_dir, c, ours, arguments, tokenizer));
  const std::vector<std::string>& files = layout.files;
  std::printf("imported %s (%s, %zu tensors, %zu safetensors file%s) into %s: %lld layers, hidden %lld, heads %lld, "
              "groups %lld, vocabulary %lld padded to %lld; load with --load %s --finetune\n",
              hf_dir.c_str(), hf_architecture(family), mappings.size(), files.size(),
              files.size() > 1 ? "s" : "", final_directory.c_str(), static_cast<long long>(c.num_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_attention_heads),
              static_cast<long long>(c.query_groups()), static_cast<long long>(c.vocab_size),
              static_cast<long long>(c.padded_vocab_size), save_dir.c_str());
  if (!special.eos.empty() || special.bos) {
    std::printf("recorded for generate: eos_token_id %s, bos_token_id %s\n",
                special.eos.empty() ? "none" : absl::StrJoin(special.eos, ",").c_str(),
                special.bos ? std::to_string(*special.bos).c_str() : "none");
  }
  std::printf("tokenizer: %s\n", tokenizer.note.c_str());
  return absl::OkStatus();
}

}  // namespace gpt
