#include "data/text_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "data/gpt2_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace gpt {

bool is_text_tokenizer_type(std::string_view type) {
  return type == "GPT2BPETokenizer" || type == "SentencePieceTokenizer" || type == "GPTSentencePieceTokenizer" ||
         type == "HuggingFaceTokenizer";
}

absl::StatusOr<std::unique_ptr<TextTokenizer>> load_text_tokenizer(const TokenizerFiles& files) {
  if (files.type == "GPT2BPETokenizer") {
    GPT_ASSIGN_OR_RETURN(Gpt2Tokenizer tokenizer, Gpt2Tokenizer::load(files.vocab_file, files.merge_file));
    return std::unique_ptr<TextTokenizer>(std::make_unique<Gpt2Tokenizer>(std::move(tokenizer)));
  }
  if (files.type == "SentencePieceTokenizer" || files.type == "GPTSentencePieceTokenizer") {
    if (files.tokenizer_model.empty()) return absl::InvalidArgumentError(absl::StrCat("--tokenizer-type ", files.type, " needs --tokenizer-model"));
    return load_sentencepiece_tokenizer(files.tokenizer_model, files.type == "SentencePieceTokenizer");
  }
  if (files.type == "HuggingFaceTokenizer") {
    if (files.tokenizer_model.empty()) return absl::InvalidArgumentError("--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model");
    GPT_ASSIGN_OR_RETURN(HfTokenizer tokenizer, HfTokenizer::load(files.tokenizer_model));
    return std::unique_ptr<TextTokenizer>(std::make_unique<HfTokenizer>(std::move(tokenizer)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--tokenizer-type ", files.type, " has no text tokenizer here (GPT2BPETokenizer, SentencePieceTokenizer, "
      "GPTSentencePieceTokenizer or HuggingFaceTokenizer)"));
}

}  // namespace gpt
