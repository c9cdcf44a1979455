#include "data/sentencepiece_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "data/file_access.h"

#ifdef GPT_HAVE_SENTENCEPIECE
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "data/sentencepiece_model.h"
#endif

namespace gpt {

#ifndef GPT_HAVE_SENTENCEPIECE

bool sentencepiece_available() { return false; }

absl::StatusOr<std::unique_ptr<TextTokenizer>> load_sentencepiece_tokenizer(const std::string& model_file, bool) {
  return absl::UnimplementedError(absl::StrCat(
      "--tokenizer-model ", model_file, ": this build has no SentencePiece library (install Debian's "
      "libsentencepiece-dev, as scripts/setup.sh does, and rebuild)"));
}

#else

namespace {

class SentencePieceTokenizer final : public TextTokenizer {
 public:
  SentencePieceTokenizer(std::shared_ptr<const SentencePieceModel> model, bool megatron_specials)
      : model_(std::move(model)), megatron_specials_(megatron_specials) {
    const int pieces = model_->piece_size();
    vocab_size_ = pieces;
    if (!megatron_specials) {
      eod_id_ = model_->eos_id();
      return;
    }
    // Megatron's _SentencePieceTokenizer._initalize(): each special token is the model's piece of
    // that text, or a new id after the pieces.
    auto add_special = [&](const std::string& text) {
      int32_t id = model_->piece_id(text);
      if (id < 0) {
        auto it = std::find_if(specials_.begin(), specials_.end(), [&](const auto& s) { return s.first == text; });
        if (it != specials_.end()) return it->second;
        id = static_cast<int32_t>(vocab_size_++);
      }
      if (std::none_of(specials_.begin(), specials_.end(), [&](const auto& s) { return s.first == text; })) {
        specials_.emplace_back(text, id);
      }
      return id;
    };
    auto piece_or = [&](int id, const char* fallback) {
      return id >= 0 && id < pieces ? model_->piece(id) : std::string(fallback);
    };
    add_special("<CLS>");
    add_special("<SEP>");
    eod_id_ = add_special("<EOD>");
    add_special("<MASK>");
    add_special(piece_or(model_->pad_id(), "<PAD>"));
    add_special(piece_or(model_->bos_id(), "<BOS>"));
    add_special(piece_or(model_->eos_id(), "<EOS>"));
  }

  std::unique_ptr<TextTokenizer> clone() const override { return std::make_unique<SentencePieceTokenizer>(*this); }

  void encode(std::string_view text, std::vector<int32_t>& out) override {
    size_t start = 0;
    while (megatron_specials_) {
      // The earliest special token (ties: the first in Megatron's order).
      size_t best = std::string_view::npos;
      const std::pair<std::string, int32_t>* found = nullptr;
      for (const auto& special : specials_) {
        const size_t at = text.find(special.first, start);
        if (at < best) {
          best = at;
          found = &special;
        }
      }
      if (!found) break;
      encode_plain(text.substr(start, best - start), out);
      out.push_back(found->second);
      start = best + found->first.size();
    }
    encode_plain(text.substr(start), out);
  }

  std::string decode(std::span<const int32_t> ids) const override {
    // Megatron's detokenize(): special tokens as " <TEXT> " between decoded stretches.
    std::string text;
    std::vector<int> stretch;
    for (int32_t id : ids) {
      const auto special = megatron_specials_ ? special_text(id) : nullptr;
      if (!special) {
        stretch.push_back(id);
        continue;
      }
      text += decode_plain(stretch) + " " + *special + " ";
      stretch.clear();
    }
    return text + decode_plain(stretch);
  }

  int32_t eod_id() const override { return eod_id_; }
  int64_t vocab_size() const override { return vocab_size_; }

 private:
  void encode_plain(std::string_view text, std::vector<int32_t>& out) {
    if (text.empty()) return;
    ids_.clear();
    std::string error;
    GPT_CHECK(model_->encode(text, ids_, error)) << "SentencePiece encode: " << error;
    out.insert(out.end(), ids_.begin(), ids_.end());
  }
  std::string decode_plain(const std::vector<int>& ids) const {
    std::string text;
    std::vector<int> known;
    for (int id : ids) known.push_back(id < model_->piece_size() ? id : model_->unk_id());
    std::string error;
    GPT_CHECK(model_->decode(known, text, error)) << "SentencePiece decode: " << error;
    return text;
  }
  const std::string* special_text(int32_t id) const {
    for (const auto& special : specials_) {
      if (special.second == id) return &special.first;
    }
    return nullptr;
  }

  std::shared_ptr<const SentencePieceModel> model_;  // shared by clones: encode and decode are thread-safe
  bool megatron_specials_;
  int64_t vocab_size_ = 0;
  int32_t eod_id_ = -1;
  std::vector<std::pair<std::string, int32_t>> specials_;  // Megatron's insertion order
  std::vector<int> ids_;                                   // reused across calls
};

// The module's loader, opened once: next to the executable, else where the build wrote it.
absl::StatusOr<LoadSentencePieceModel> sentencepiece_module() {
  static const absl::StatusOr<LoadSentencePieceModel> loader = []() -> absl::StatusOr<LoadSentencePieceModel> {
    std::error_code ec;
    const std::filesystem::path executable = std::filesystem::read_symlink("/proc/self/exe", ec);
    const std::string beside = (executable.parent_path() / GPT_SENTENCEPIECE_MODULE_NAME).string();
    std::string tried;
    for (const std::string& path : {beside, std::string(GPT_SENTENCEPIECE_MODULE_PATH)}) {
      if (!std::filesystem::exists(path, ec)) continue;
      // RTLD_DEEPBIND: the library's symbols (its own protobuf) before the program's.
      if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)) {
        if (void* entry = dlsym(handle, kLoadSentencePieceModel)) return reinterpret_cast<LoadSentencePieceModel>(entry);
      }
      tried += absl::StrCat(" ", path, ": ", dlerror());
    }
    return absl::UnavailableError(absl::StrCat("the SentencePiece module ", GPT_SENTENCEPIECE_MODULE_NAME,
                                               " cannot be opened (next to the program or at ",
                                               GPT_SENTENCEPIECE_MODULE_PATH, ")", tried));
  }();
  return loader;
}

}  // namespace

bool sentencepiece_available() { return true; }

absl::StatusOr<std::unique_ptr<TextTokenizer>> load_sentencepiece_tokenizer(const std::string& model_file,
                                                                            bool megatron_specials) {
  GPT_RETURN_IF_ERROR(check_readable_file("--tokenizer-model", model_file));
  GPT_ASSIGN_OR_RETURN(const LoadSentencePieceModel load, sentencepiece_module());
  std::string error;
  std::shared_ptr<const SentencePieceModel> model(load(model_file, error));
  if (!model) {
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer-model ", model_file, " is not a SentencePiece model: ", error));
  }
  auto tokenizer = std::make_unique<SentencePieceTokenizer>(std::move(model), megatron_specials);
  if (tokenizer->eod_id() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer-model ", model_file, " has no end-of-sentence piece (eos_id -1), which "
        "GPTSentencePieceTokenizer uses as the end-of-document id (SentencePieceTokenizer adds <EOD>)"));
  }
  return std::unique_ptr<TextTokenizer>(std::move(tokenizer));
}

#endif

}  // namespace gpt
