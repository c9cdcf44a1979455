// validate_data_arguments (train/arguments.h): the training data (--mock-data, or --data-path with
// its blend and --split) and the tokenizer flags that read it.
#include "absl/strings/str_cat.h"
#include "data/dataset_split.h"
#include "data/gpt_dataset_builder.h"
#include "train/arguments.h"
#include "train/flag_enums.h"
#include "train/flag_table.h"

namespace gpt {
namespace {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status require_positive(absl::string_view flag, int64_t value) {
  if (value <= 0) return invalid(absl::StrCat(flag, " must be a positive integer (got ", value, ")"));
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_data_arguments(const Arguments& a) {
  if (a.mock_data == !a.data_path.empty()) {
    return invalid(
        a.mock_data ? absl::StrCat(flag_name(&A::mock_data), " and ", flag_name(&A::data_path), " cannot both be given")
                    : absl::StrCat("no training data: pass ", flag_name(&A::data_path),
                                   " (a Megatron dataset prefix) or ", flag_name(&A::mock_data)));
  }
  if (!a.data_path.empty()) {
    // One prefix, prefixes only (blended by size), or weight prefix pairs with positive weights.
    GPT_ASSIGN_OR_RETURN(const DataBlend blend, parse_data_path(a.data_path));
    if (blend.weights) {
      for (size_t i = 0; i < blend.weights->size(); ++i) {
        if (!((*blend.weights)[i] > 0.0)) {
          return invalid(absl::StrCat(flag_name(&A::data_path), ": '", a.data_path[2 * i], "' (the weight of ",
                                      blend.prefixes[i], ") is not a positive weight"));
        }
      }
    }
    GPT_RETURN_IF_ERROR(parse_split(a.split).status());
  }
  // The tokenizer: GPT-2 BPE files, a SentencePiece or Hugging Face --tokenizer-model, or
  // NullTokenizer with --vocab-size N (Megatron's: ids [0, N) plus the end-of-document id N).
  // --mock-data takes any, as in Megatron, or --vocab-size alone (this program's shorthand: a
  // vocabulary of exactly N). GPT-2 BPE files without a type: GPT2BPETokenizer (resolve_defaults).
  // Files a tokenizer type does not read are refused rather than ignored.
  const std::optional<TokenizerType> type = parse_flag_enum<TokenizerType>(a.tokenizer_type);
  const bool reads_model = type == TokenizerType::kSentencePiece || type == TokenizerType::kGptSentencePiece ||
                           type == TokenizerType::kHuggingFace;
  if (!a.tokenizer_model.empty() && !reads_model) {
    return invalid(absl::StrCat(
        flag_name(&A::tokenizer_model), " is read by ", flag_name(&A::tokenizer_type),
        " SentencePieceTokenizer, "
        "GPTSentencePieceTokenizer or HuggingFaceTokenizer, not by ",
        a.tokenizer_type.empty() ? absl::StrCat(flag_name(&A::mock_data), " without a tokenizer") : a.tokenizer_type));
  }
  if (reads_model && (!a.vocab_file.empty() || !a.merge_file.empty())) {
    return invalid(absl::StrCat(flag_name(&A::tokenizer_type), " ", a.tokenizer_type, " reads ",
                                flag_name(&A::tokenizer_model), ", not ", flag_name(&A::vocab_file), " or ",
                                flag_name(&A::merge_file)));
  }
  if (a.tokenizer_type.empty() && !a.mock_data) {
    return invalid(absl::StrCat(flag_name(&A::data_path), " needs a tokenizer: ", flag_name(&A::vocab_file), " and ",
                                flag_name(&A::merge_file), " (GPT2BPETokenizer), ", flag_name(&A::tokenizer_type),
                                " SentencePieceTokenizer, GPTSentencePieceTokenizer or HuggingFaceTokenizer with ",
                                flag_name(&A::tokenizer_model), ", or ", flag_name(&A::tokenizer_type),
                                " NullTokenizer with ", flag_name(&A::vocab_size)));
  }
  if (type == TokenizerType::kGpt2Bpe) {
    if (a.vocab_file.empty() || a.merge_file.empty()) {
      return invalid(absl::StrCat(flag_name(&A::tokenizer_type), " GPT2BPETokenizer needs ", flag_name(&A::vocab_file),
                                  " and ", flag_name(&A::merge_file)));
    }
    return absl::OkStatus();
  }
  if (reads_model) {
    if (a.tokenizer_model.empty())
      return invalid(absl::StrCat(flag_name(&A::tokenizer_type), " ", a.tokenizer_type, " needs ",
                                  flag_name(&A::tokenizer_model)));
    return absl::OkStatus();  // the model is read (and refused where unsupported) with the data
  }
  if (type != TokenizerType::kNone && type != TokenizerType::kNull) {
    return invalid(absl::StrCat(flag_name(&A::tokenizer_type), " must be ",
                                names_for_message(flag_enum_names<TokenizerType>()), " (got ", a.tokenizer_type, ")"));
  }
  if (!flag_given(a, &A::vocab_size)) {
    return invalid(absl::StrCat("missing required flag ", flag_name(&A::vocab_size), " (needed by ",
                                a.tokenizer_type.empty()
                                    ? flag_name(&A::mock_data)
                                    : absl::StrCat(flag_name(&A::tokenizer_type), " NullTokenizer"),
                                ")"));
  }
  GPT_RETURN_IF_ERROR(require_positive(flag_name(&A::vocab_size), a.vocab_size));
  if (a.vocab_size < 2)
    return invalid(absl::StrCat(flag_name(&A::vocab_size), " must be at least 2 (got ", a.vocab_size, ")"));
  return absl::OkStatus();
}

}  // namespace gpt
