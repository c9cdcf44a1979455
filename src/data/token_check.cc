#include "data/token_check.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace gpt {
namespace {

// Blocks small enough to stay in L1 while the exact position of a bad id is looked up, large
// enough that the vectorized maximum dominates.
constexpr int64_t kBlockTokens = int64_t{1} << 14;
// Below this a thread costs more to start than it saves.
constexpr int64_t kMinTokensPerThread = int64_t{1} << 20;

// The first index in [begin, end) whose id, read as the unsigned type U, is >= limit; -1 if none.
// Reading signed ids as unsigned turns every negative id into a huge one, so one comparison
// catches both ends (the caller caps `limit` at 2^(bits-1) for signed dtypes).
template <typename U>
int64_t first_out_of_range(const uint8_t* bytes, int64_t begin, int64_t end, uint64_t limit) {
  static_assert(std::is_unsigned_v<U>);
  // The map is page-aligned and every sequence starts at a multiple of the element size.
  const U* tokens = reinterpret_cast<const U*>(bytes);
  for (int64_t block = begin; block < end; block += kBlockTokens) {
    const int64_t block_end = std::min(end, block + kBlockTokens);
    U largest = 0;
    for (int64_t i = block; i < block_end; ++i) largest = tokens[i] > largest ? tokens[i] : largest;
    if (static_cast<uint64_t>(largest) < limit) continue;
    for (int64_t i = block; i < block_end; ++i) {
      if (static_cast<uint64_t>(tokens[i]) >= limit) return i;
    }
  }
  return -1;
}

// The id at token `index`, as the dtype stores it (signed where the dtype is).
int64_t id_at(const IndexedDataset& dataset, int64_t index) {
  const uint8_t* p = dataset.token_bytes() + index * static_cast<int64_t>(dataset.element_size());
  switch (dataset.dtype_code()) {
    case 1: return *p;
    case 3: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case 4: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case 5: { int64_t v; std::memcpy(&v, p, 8); return v; }
    default: { uint16_t v; std::memcpy(&v, p, 2); return v; }
  }
}

absl::Status out_of_vocabulary(const IndexedDataset& dataset, int64_t index, int64_t vocab_size) {
  const std::vector<int64_t>& pointers = dataset.pointers();
  const int64_t byte = index * static_cast<int64_t>(dataset.element_size());
  // The last sequence starting at or before the byte holds it (empty sequences share a pointer
  // with the next one, which comes later).
  const int64_t sequence = std::upper_bound(pointers.begin(), pointers.end(), byte) - pointers.begin() - 1;
  GPT_CHECK(sequence >= 0) << "token " << index << " before the first sequence";
  const int64_t position = (byte - pointers[static_cast<size_t>(sequence)]) / static_cast<int64_t>(dataset.element_size());
  const std::vector<int64_t>& documents = dataset.document_indices();
  const int64_t document = std::upper_bound(documents.begin(), documents.end(), sequence) - documents.begin() - 1;
  const std::string where = document == sequence ? absl::StrCat("document ", document)
                                                 : absl::StrCat("document ", document, " (sequence ", sequence, ")");
  return absl::InvalidArgumentError(absl::StrCat(
      dataset.prefix(), ".bin: token id ", id_at(dataset, index), " in ", where, ", position ", position,
      ", is outside the vocabulary of ", vocab_size,
      " ids (was the dataset prepared with another tokenizer, or is --vocab-size too small?)"));
}

template <typename U>
int64_t scan(const IndexedDataset& dataset, int64_t begin, int64_t end, uint64_t limit, int threads) {
  const int64_t count = end - begin;
  const int workers = static_cast<int>(std::clamp<int64_t>(count / kMinTokensPerThread, 1, threads));
  std::vector<int64_t> found(static_cast<size_t>(workers), -1);
  auto work = [&](int w) {
    const int64_t from = begin + count * w / workers, to = begin + count * (w + 1) / workers;
    found[static_cast<size_t>(w)] = first_out_of_range<U>(dataset.token_bytes(), from, to, limit);
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(work, w);
  work(0);
  for (std::thread& t : pool) t.join();
  for (int64_t index : found) {
    if (index >= 0) return index;  // slices are in order: the first hit is the earliest
  }
  return -1;
}

}  // namespace

absl::Status check_token_ids(const IndexedDataset& dataset, const TokenCheckOptions& options) {
  GPT_CHECK(options.vocab_size > 0 && options.threads >= 1 && options.parts >= 1 && options.part >= 0 &&
            options.part < options.parts)
      << "token check of " << dataset.prefix() << ": vocabulary " << options.vocab_size << ", part " << options.part
      << " of " << options.parts << ", " << options.threads << " threads";
  const int64_t tokens = static_cast<int64_t>(dataset.token_byte_count() / dataset.element_size());
  // 128-bit products: tokens * parts may exceed 2^63 for a large file and many ranks.
  const int64_t begin = static_cast<int64_t>(static_cast<__int128>(tokens) * options.part / options.parts);
  const int64_t end = static_cast<int64_t>(static_cast<__int128>(tokens) * (options.part + 1) / options.parts);
  if (begin == end) return absl::OkStatus();
  const uint64_t vocab = static_cast<uint64_t>(options.vocab_size);
  int64_t bad = -1;
  switch (dataset.dtype_code()) {
    case 1:  // uint8
      if (vocab <= 0xFF) bad = scan<uint8_t>(dataset, begin, end, vocab, options.threads);
      break;
    case 3:  // int16: a negative id reads as 2^15 or more
      bad = scan<uint16_t>(dataset, begin, end, std::min<uint64_t>(vocab, uint64_t{1} << 15), options.threads);
      break;
    case 4:  // int32
      bad = scan<uint32_t>(dataset, begin, end, std::min<uint64_t>(vocab, uint64_t{1} << 31), options.threads);
      break;
    case 5:  // int64
      bad = scan<uint64_t>(dataset, begin, end, std::min<uint64_t>(vocab, uint64_t{1} << 63), options.threads);
      break;
    default:  // uint16 (8): nothing to check when every value is an id
      if (vocab <= 0xFFFF) bad = scan<uint16_t>(dataset, begin, end, vocab, options.threads);
      break;
  }
  return bad < 0 ? absl::OkStatus() : out_of_vocabulary(dataset, bad, options.vocab_size);
}

}  // namespace gpt
