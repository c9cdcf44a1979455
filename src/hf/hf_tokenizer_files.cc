#include "hf/hf_tokenizer_files.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/text_tokenizer.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

absl::Status copy(const std::string& source, const fs::path& target) {
  std::error_code error;
  fs::copy_file(source, target, fs::copy_options::overwrite_existing, error);
  if (error) return absl::DataLossError(absl::StrCat("cannot copy ", source, " to ", target.string(), ": ", error.message()));
  return absl::OkStatus();
}

// A Hugging Face tokenizer's files: tokenizer.json (the given file, or inside the given directory)
// and the tokenizer_config.json beside it when there is one.
std::vector<std::pair<std::string, std::string>> hf_tokenizer_files(const std::string& tokenizer_model) {
  std::error_code error;
  const fs::path json = fs::is_directory(tokenizer_model, error) ? fs::path(tokenizer_model) / "tokenizer.json"
                                                                 : fs::path(tokenizer_model);
  std::vector<std::pair<std::string, std::string>> files = {{json.string(), "tokenizer.json"}};
  const fs::path config = json.parent_path() / "tokenizer_config.json";
  if (is_file(config)) files.emplace_back(config.string(), "tokenizer_config.json");
  return files;
}

}  // namespace

absl::StatusOr<std::string> hf_export_tokenizer(const CheckpointModel& model, const std::string& directory) {
  const std::string& type = model.tokenizer_type;
  if (!is_text_tokenizer_type(type)) {
    return absl::StrCat("none (", type.empty() ? "mock data" : type, ": token ids only)");
  }
  auto saved = [&](const char* flag) { return model.arguments.count(flag) ? model.arguments.at(flag) : std::string(); };
  std::vector<std::pair<std::string, std::string>> files;
  if (type == "GPT2BPETokenizer") {
    files = {{saved("--vocab-file"), "vocab.json"}, {saved("--merge-file"), "merges.txt"}};
  } else if (type == "HuggingFaceTokenizer") {
    files = hf_tokenizer_files(saved("--tokenizer-model"));
  } else {
    files = {{saved("--tokenizer-model"), "tokenizer.model"}};
  }
  std::vector<std::string> names;
  for (const auto& [source, name] : files) {
    if (source.empty() || !is_file(source)) {
      return absl::StrCat("none (the checkpoint's ", type, " file '", source,
                          "' is not readable here; copy the tokenizer files by hand)");
    }
  }
  for (const auto& [source, name] : files) {
    GPT_RETURN_IF_ERROR(copy(source, fs::path(directory) / name));
    names.push_back(name);
  }
  return absl::StrCat(absl::StrJoin(names, " + "), " (", type, ")");
}

HfFoundTokenizer hf_find_tokenizer(const std::string& hf_dir, HfFamily family, int64_t vocab_size) {
  const fs::path dir(hf_dir);
  HfFoundTokenizer found;
  std::vector<std::string> skipped;
  // Loads the candidate with this program's tokenizer; records it when it loads and fits the model.
  auto take = [&](TokenizerFiles files, HfTokenizerRecord record, std::vector<std::pair<std::string, std::string>> copies) {
    absl::StatusOr<std::unique_ptr<TextTokenizer>> loaded = load_text_tokenizer(files);
    std::string why;
    if (!loaded.ok()) {
      why = std::string(loaded.status().message());
    } else if ((*loaded)->vocab_size() > vocab_size) {
      why = absl::StrCat((*loaded)->vocab_size(), " tokens, more than the model's vocab_size ", vocab_size);
    } else {
      found.record = std::move(record);
      found.copies = std::move(copies);
      std::vector<std::string> names;
      for (const auto& copy : found.copies) names.push_back(copy.second);
      found.note = absl::StrCat(absl::StrJoin(names, " + "), " as ", found.record.type);
      return true;
    }
    skipped.push_back(absl::StrCat(copies.front().second, " not recorded: ", why));
    return false;
  };
  const fs::path vocab = dir / "vocab.json", merges = dir / "merges.txt";
  if (family == HfFamily::kGpt2 && is_file(vocab) && is_file(merges) &&
      take({.type = "GPT2BPETokenizer", .vocab_file = vocab.string(), .merge_file = merges.string()},
           {.type = "GPT2BPETokenizer", .vocab_file = "vocab.json", .merge_file = "merges.txt"},
           {{vocab.string(), "vocab.json"}, {merges.string(), "merges.txt"}})) {
    return found;
  }
  const fs::path json = dir / "tokenizer.json";
  if (is_file(json) && take({.type = "HuggingFaceTokenizer", .tokenizer_model = json.string()},
                            {.type = "HuggingFaceTokenizer", .tokenizer_model = "tokenizer.json"},
                            hf_tokenizer_files(json.string()))) {
    return found;
  }
  const fs::path model = dir / "tokenizer.model";
  if (is_file(model) && take({.type = "GPTSentencePieceTokenizer", .tokenizer_model = model.string()},
                             {.type = "GPTSentencePieceTokenizer", .tokenizer_model = "tokenizer.model"},
                             {{model.string(), "tokenizer.model"}})) {
    return found;
  }
  found.note = skipped.empty() ? "none (no vocab.json + merges.txt, tokenizer.json or tokenizer.model)"
                               : absl::StrCat("none (", absl::StrJoin(skipped, "; "), ")");
  return found;
}

absl::Status hf_copy_tokenizer(const HfFoundTokenizer& found, const std::string& directory) {
  for (const auto& [source, name] : found.copies) GPT_RETURN_IF_ERROR(copy(source, fs::path(directory) / name));
  return absl::OkStatus();
}

}  // namespace gpt
