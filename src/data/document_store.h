// Token documents by index: what the GPT dataset needs from a corpus. The Megatron indexed dataset
// (.bin/.idx) implements it; tests use in-memory corpora.
#pragma once

#include <cstdint>
#include <string>

namespace gpt {

class DocumentStore {
 public:
  virtual ~DocumentStore() = default;
  virtual int64_t num_documents() const = 0;
  virtual int64_t document_length(int64_t document) const = 0;
  // Tokens [offset, offset + length) of `document` into `out`.
  virtual void read(int64_t document, int64_t offset, int64_t length, int32_t* out) const = 0;
  // Identifies the corpus for index caching (path and size, or a content description).
  virtual std::string identity() const = 0;
};

}  // namespace gpt
