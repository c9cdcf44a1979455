#include "parallel/comm/store_agreement.h"

#include <chrono>
#include <algorithm>
#include <cstring>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "parallel/comm/tcp_store.h"

namespace gpt::world {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kOk = 0, kTimedOut = 1;  // the first word of rank 0's answer

struct StoreWorld {
  TcpStoreClient* store = nullptr;
  std::string prefix;
  int rank = 0;
  int size = 1;
  int64_t agreements = 0;
} world_store;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string as_bytes(std::span<const int64_t> words) {
  return std::string(reinterpret_cast<const char*>(words.data()), words.size_bytes());
}

std::vector<int64_t> as_words(const std::string& bytes) {
  std::vector<int64_t> words(bytes.size() / sizeof(int64_t));
  std::memcpy(words.data(), bytes.data(), words.size() * sizeof(int64_t));
  return words;
}

// A store failure mid-agreement: the store's host (rank 0) has gone.
[[noreturn]] void store_failed(std::string_view what, const absl::Status& status) {
  GPT_FATAL() << "agreement '" << what << "' over the world failed on world rank " << world_store.rank << ": "
              << status.message();
}

// Rank 0's side: gathers, combines, answers.
void gather_and_answer(std::span<const int64_t> mine, std::string_view what, const Combiner& combine,
                       std::vector<int64_t>& answer, const std::string& key, double timeout_seconds) {
  TcpStoreClient& store = *world_store.store;
  const size_t n = mine.size();
  std::vector<std::string> keys;
  for (int r = 1; r < world_store.size; ++r) keys.push_back(absl::StrCat(key, r));
  // Waits in slices, between which it asks whether a missing rank's process has ended (its store
  // connection closed, tcp_store.h): a lost rank or node is named at once, not at the timeout.
  const Clock::time_point deadline = deadline_after(timeout_seconds);
  absl::Status arrived;
  while (true) {
    arrived = store.wait(keys, std::min(deadline, deadline_after(0.5)));
    if (!absl::IsDeadlineExceeded(arrived) || Clock::now() > deadline) break;
    std::ostringstream ended;
    for (int r = 1; r < world_store.size; ++r) {
      absl::StatusOr<bool> closed = store.check({absl::StrCat(world_store.prefix, "closed/", r)});
      if (closed.ok() && *closed) ended << (ended.tellp() > 0 ? "," : "") << r;
    }
    if (ended.tellp() > 0) {
      std::vector<int64_t> verdict = {kTimedOut};
      (void)store.set(key + "answer", as_bytes(verdict));
      GPT_FATAL() << "agreement '" << what << "' over the world: world ranks [" << ended.str()
                  << "] have ended (their connection to the key-value store closed)";
    }
  }
  if (absl::IsDeadlineExceeded(arrived)) {
    std::vector<int64_t> verdict = {kTimedOut};
    std::ostringstream missing;
    for (int r = 1; r < world_store.size; ++r) {
      absl::StatusOr<bool> there = store.check({keys[static_cast<size_t>(r - 1)]});
      if (!there.ok()) store_failed(what, there.status());
      if (!*there) missing << (verdict.size() > 1 ? "," : "") << r;
      if (!*there) verdict.push_back(r);
    }
    (void)store.set(key + "answer", as_bytes(verdict));  // best effort: the others stop quietly
    GPT_FATAL() << "agreement '" << what << "' over the world timed out after " << timeout_seconds
                << " s (--distributed-timeout-minutes): world ranks [" << missing.str() << "] did not arrive";
  }
  if (!arrived.ok()) store_failed(what, arrived);
  std::vector<int64_t> all(mine.begin(), mine.end());
  for (const std::string& k : keys) {
    absl::StatusOr<std::string> value = store.get(k, deadline_after(timeout_seconds));
    if (!value.ok()) store_failed(what, value.status());
    const std::vector<int64_t> words = as_words(*value);
    GPT_CHECK_EQ(words.size(), n) << "agreement '" << what << "': a rank sent another number of words";
    all.insert(all.end(), words.begin(), words.end());
  }
  answer = combine(all);
  std::vector<int64_t> message = {kOk};
  message.insert(message.end(), answer.begin(), answer.end());
  const absl::Status sent = store.set(key + "answer", as_bytes(message));
  if (!sent.ok()) store_failed(what, sent);
}

}  // namespace

void use_store(TcpStoreClient* store, std::string prefix, int rank, int size) {
  world_store = StoreWorld{store, std::move(prefix), rank, size, 0};
}

bool store_in_use() { return world_store.store != nullptr; }
int store_rank() { return world_store.rank; }
int store_size() { return world_store.size; }

void store_exchange(std::span<const int64_t> mine, std::string_view what, const Combiner& combine,
                    std::vector<int64_t>& answer, double timeout_seconds, double grace_seconds) {
  GPT_CHECK(store_in_use()) << "store agreement without a store";
  const std::string key = absl::StrCat(world_store.prefix, "a", world_store.agreements++, "/");
  if (world_store.rank == 0) {
    gather_and_answer(mine, what, combine, answer, key, timeout_seconds);
    return;
  }
  TcpStoreClient& store = *world_store.store;
  const absl::Status sent = store.set(absl::StrCat(key, world_store.rank), as_bytes(mine));
  if (!sent.ok()) store_failed(what, sent);
  // Rank 1 gives up first when rank 0 never answers, and its report is the one that matters.
  const double patience = timeout_seconds + grace_seconds + (world_store.rank == 1 ? 0.0 : 1.0);
  absl::StatusOr<std::string> message = store.get(key + "answer", deadline_after(patience));
  if (absl::IsDeadlineExceeded(message.status())) {
    GPT_FATAL() << "agreement '" << what << "' over the world timed out on world rank " << world_store.rank
                << " after " << patience << " s (--distributed-timeout-minutes): world rank 0, which gathers "
                << "it, did not answer";
  }
  if (!message.ok()) store_failed(what, message.status());
  const std::vector<int64_t> words = as_words(*message);
  GPT_CHECK(!words.empty()) << "agreement '" << what << "': empty answer";
  if (words[0] == kTimedOut) fatal_exit(1);  // rank 0 reports the missing ranks; one line is enough
  GPT_CHECK_EQ(words.size(), answer.size() + 1) << "agreement '" << what << "': answer of another length";
  std::copy(words.begin() + 1, words.end(), answer.begin());
}

}  // namespace gpt::world
