// Megatron's SentencePiece tokenizers over Debian's libsentencepiece (--tokenizer-model
// tokenizer.model):
//   GPTSentencePieceTokenizer: the model's pieces as they are; tokenize = encode_as_ids(text),
//     the end-of-document id is the model's eos_id (refused where the model has none);
//   SentencePieceTokenizer: the pieces plus Megatron's special tokens, appended in this order
//     where the model lacks them: <CLS>, <SEP>, <EOD>, <MASK>, then the model's pad, bos and eos
//     pieces (<PAD>, <BOS>, <EOS> where the model has no such id); a special token's text inside a
//     document is that token (the text between is encoded by the model), and the
//     end-of-document id is <EOD>'s.
// Without libsentencepiece at build time, loading either is refused with that reason.
#pragma once

#include <memory>
#include <string>

#include "data/text_tokenizer.h"

namespace gpt {

// True where this build links libsentencepiece.
bool sentencepiece_available();

// `megatron_specials`: SentencePieceTokenizer (true) or GPTSentencePieceTokenizer (false).
absl::StatusOr<std::unique_ptr<TextTokenizer>> load_sentencepiece_tokenizer(const std::string& model_file,
                                                                            bool megatron_specials);

}  // namespace gpt
