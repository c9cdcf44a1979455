// The description Megatron writes beside its cached GPT dataset indices, and whose MD5 names them
// (megatron/core/datasets/megatron_dataset.py: unique_description = json.dumps(unique_identifiers,
// indent=4), unique_description_hash = md5 of it). Reproduced byte for byte as core_v0.8.0 writes it
// with its (legacy) tokenizers, so the cache files of one program are found by the other:
//
//   {"class": "GPTDataset", "dataset_path": <the --data-path prefix as given>, "num_samples": <int or
//    null>, "index_split": "train" | "valid" | "test", "random_seed": <--seed>, "sequence_length":
//    <--seq-length>, "split": <--split as given>, "split_matrix": [[0, 0.969], [0.969, 0.999],
//    [0.999, 1.0]] (null for a split of weight zero), "tokenizer": {"class": "_GPT2BPETokenizer",
//    "tokenizer_path": [<vocab file>, <merge file>]}}
//
// (with Python's json.dumps layout: four-space indentation, one list element per line, floats as
// Python's repr, non-ASCII escaped). Current Megatron (core 0.17 on) describes its new tokenizer
// library's classes and options instead, so its hash differs; the file names keep the same form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset_split.h"

namespace gpt {

// A legacy Megatron tokenizer's unique_identifiers: its class name, the paths it was built from
// (None prints null) and its keyword options as str() of their values.
struct TokenizerIdentity {
  std::string class_name;
  std::vector<std::optional<std::string>> paths;
  std::vector<std::pair<std::string, std::string>> options;

  // --tokenizer-type GPT2BPETokenizer --vocab-file V --merge-file M
  static TokenizerIdentity gpt2_bpe(const std::string& vocab_file, const std::string& merge_file);
  // --tokenizer-type NullTokenizer --vocab-size N
  static TokenizerIdentity null_tokenizer(int64_t vocab_size);
  // --tokenizer-type SentencePieceTokenizer, GPTSentencePieceTokenizer or HuggingFaceTokenizer
  // --tokenizer-model M (Megatron's MegatronLegacyTokenizer: the class, the model path as given,
  // vocab_extra_ids=0 for the SentencePiece classes).
  static TokenizerIdentity with_model(const std::string& tokenizer_type, const std::string& tokenizer_model);
};

struct MegatronDatasetIdentity {
  std::string dataset_path;                // the prefix as given to --data-path
  std::optional<int64_t> num_samples;      // none: one epoch (Megatron's None)
  std::string index_split;                 // "train", "valid", "test"
  uint64_t random_seed = 0;
  int64_t sequence_length = 0;
  std::string split;                       // --split as given, e.g. "969, 30, 1"
  SplitMatrix split_matrix;
  TokenizerIdentity tokenizer;
};

std::string megatron_dataset_description(const MegatronDatasetIdentity& identity);

// Python's repr(float): the shortest digits that read back as the same double, in fixed notation
// for exponents -4 to 15 ("0.969", "1.0") and scientific otherwise ("1e-05", "1.5e+16").
std::string python_float_repr(double value);
// A JSON string as json.dumps writes it (ensure_ascii: non-ASCII as \u and four hex digits, UTF-16 pairs above
// U+FFFF). Bytes that are not UTF-8 are written as the code points U+DC80..U+DCFF, as Python's
// surrogateescape reading of a command-line argument gives them.
std::string json_string(const std::string& text);

}  // namespace gpt
