// Megatron's indexed dataset (megatron/core/datasets/indexed_dataset.py), so corpora prepared for
// Megatron load unchanged. {prefix}.bin holds the tokens of every sequence back to back;
// {prefix}.idx (little-endian) holds
//   magic "MMIDIDX\x00\x00" (9 bytes), version <Q = 1, dtype code <B, sequence count <Q,
//   document count <Q, then int32 sequence lengths, int64 byte pointers into .bin and int64
//   document indices (the first sequence of each document, starting at 0, count = documents + 1).
// Dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/document_store.h"

namespace gpt {

enum class TokenDtype : uint8_t { kUint16 = 8, kInt32 = 4 };

// Megatron's choice: uint16 when every id fits (vocabulary under 65,500), else int32.
TokenDtype token_dtype_for_vocab(int64_t vocab_size);

// Writes {prefix}.bin/.idx under temporary names, renamed into place by finish(): an interrupted
// run never leaves a file that looks complete. One sequence per document.
class IndexedDatasetWriter {
 public:
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> create(const std::string& prefix, TokenDtype dtype);
  ~IndexedDatasetWriter();

  absl::Status add_document(std::span<const int32_t> tokens);
  absl::Status finish();

 private:
  IndexedDatasetWriter(std::string prefix, TokenDtype dtype) : prefix_(std::move(prefix)), dtype_(dtype) {}
  std::string prefix_;
  TokenDtype dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  int64_t bytes_written_ = 0;
  std::vector<uint8_t> buffer_;
  bool finished_ = false;
};

// Memory-maps {prefix}.bin/.idx after validating the index: header counts against the .idx size
// (overflow-safe), sequence sizes and pointers against each other and the .bin size, document
// indices from 0 to the sequence count, non-decreasing. Token ids are checked separately
// (token_check.h), since that needs the vocabulary.
class IndexedDataset final : public DocumentStore {
 public:
  static absl::StatusOr<std::unique_ptr<IndexedDataset>> open(const std::string& prefix);
  ~IndexedDataset() override;

  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  // Megatron's documents group sequences; the GPT dataset samples sequences (one per document for
  // data written by preprocess_data).
  int64_t num_documents() const override { return num_sequences(); }
  int64_t document_length(int64_t sequence) const override { return lengths_[static_cast<size_t>(sequence)]; }
  void read(int64_t sequence, int64_t offset, int64_t length, int32_t* out) const override;
  std::string identity() const override;

  const std::vector<int64_t>& document_indices() const { return document_indices_; }
  int64_t total_tokens() const;

  // The raw .bin, for scans over every token (token_check.h).
  const std::string& prefix() const { return prefix_; }
  uint8_t dtype_code() const { return dtype_code_; }
  size_t element_size() const { return element_size_; }
  const uint8_t* token_bytes() const { return static_cast<const uint8_t*>(map_); }
  size_t token_byte_count() const { return map_bytes_; }
  const std::vector<int64_t>& pointers() const { return pointers_; }

 private:
  IndexedDataset() = default;
  std::string prefix_;
  uint8_t dtype_code_ = 0;
  size_t element_size_ = 0;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> document_indices_;
  int64_t index_bytes_ = 0;
  uint64_t index_checksum_ = 0;  // FNV-1a-64 of the whole .idx
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
};

}  // namespace gpt
