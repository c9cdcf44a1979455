#include "parallel/comm/world_agreement.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "parallel/comm/store_agreement.h"

namespace gpt::world {
namespace {

// Point-to-point on MPI_COMM_WORLD under a tag of their own: the grid's collectives run on
// communicators of their own (MPI_Comm_dup / split), so nothing else matches these messages, and
// MPI keeps messages between two ranks with one tag in order, so agreements cannot cross.
constexpr int kTag = 0x6774;
constexpr int64_t kOk = 0, kTimedOut = 1;  // the first word of rank 0's answer

double timeout = 600.0;

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The ranks other than 0 wait this much longer than rank 0, so that rank 0's verdict (which ranks
// are missing) reaches them before their own deadline.
double grace_seconds() { return std::max(2.0, 0.1 * timeout); }

void check_mpi(int status, const char* call, std::string_view what) {
  if (status != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(status, text, &length);
    GPT_FATAL() << call << " in agreement '" << what << "' failed: " << text;
  }
}

// Polls `requests` until all complete or the deadline passes; returns whether they completed.
// `done[i]` (optional) tells which completed.
bool poll(std::vector<MPI_Request>& requests, Clock::time_point deadline, std::string_view what,
          std::vector<int>* done = nullptr) {
  auto pause = std::chrono::microseconds(0);
  while (true) {
    int all = 0;
    check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &all, MPI_STATUSES_IGNORE),
              "MPI_Testall", what);
    if (all) return true;
    if (Clock::now() > deadline) {
      if (done != nullptr) {
        // MPI_Testall frees nothing unless all are complete: ask each request on its own.
        done->assign(requests.size(), 0);
        for (size_t i = 0; i < requests.size(); ++i) {
          check_mpi(MPI_Test(&requests[i], &(*done)[i], MPI_STATUS_IGNORE), "MPI_Test", what);
        }
      }
      return false;
    }
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
  }
}

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
  return out.str();
}

[[noreturn]] void missing_ranks(std::string_view what, const std::vector<int64_t>& missing) {
  GPT_FATAL() << "agreement '" << what << "' over the world timed out after " << timeout
              << " s (--distributed-timeout-minutes): world ranks [" << rank_list(missing)
              << "] did not arrive";
}

}  // namespace

bool running() {
  if (store_in_use()) return true;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

int rank() {
  if (store_in_use()) return store_rank();
  if (!running()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int size() {
  if (store_in_use()) return store_size();
  if (!running()) return 1;
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

void set_timeout_seconds(double seconds) {
  GPT_CHECK(seconds > 0) << "agreement timeout " << seconds;
  timeout = seconds;
}

double timeout_seconds() { return timeout; }

namespace {

// The exchange every agreement is made of. `mine`: this rank's words (n of them on every rank).
// Rank 0 receives all ranks' words (by rank: [rank r's n words] for r = 0..size-1), `combine`
// turns them into the answer, which every rank gets back (`answer`).
template <typename CombineFn>
void exchange(std::span<const int64_t> mine, std::string_view what, CombineFn combine, std::vector<int64_t>& answer) {
  if (store_in_use()) {  // a torchrun job: the same exchange over its key-value store
    store_exchange(mine, what, combine, answer, timeout, grace_seconds());
    return;
  }
  const int me = rank(), world = size();
  const size_t n = mine.size();
  if (me == 0) {
    std::vector<int64_t> all(n * static_cast<size_t>(world));
    std::copy(mine.begin(), mine.end(), all.begin());
    std::vector<MPI_Request> receives(static_cast<size_t>(world - 1), MPI_REQUEST_NULL);
    for (int r = 1; r < world; ++r) {
      check_mpi(MPI_Irecv(all.data() + n * static_cast<size_t>(r), static_cast<int>(n), MPI_INT64_T, r, kTag,
                          MPI_COMM_WORLD, &receives[static_cast<size_t>(r - 1)]),
                "MPI_Irecv", what);
    }
    std::vector<int> done;
    if (!poll(receives, deadline_after(timeout), what, &done)) {
      std::vector<int64_t> missing, arrived;
      for (int r = 1; r < world; ++r) (done[static_cast<size_t>(r - 1)] ? arrived : missing).push_back(r);
      // The ranks that arrived stop with the same finding (best effort, bounded).
      std::vector<int64_t> verdict = {kTimedOut, static_cast<int64_t>(missing.size())};
      verdict.insert(verdict.end(), missing.begin(), missing.end());
      verdict.resize(std::max(verdict.size(), answer.size() + 1), 0);
      std::vector<MPI_Request> sends;
      for (int64_t r : arrived) {
        sends.emplace_back();
        MPI_Isend(verdict.data(), static_cast<int>(verdict.size()), MPI_INT64_T, static_cast<int>(r), kTag,
                  MPI_COMM_WORLD, &sends.back());
      }
      poll(sends, deadline_after(1.0), what);
      missing_ranks(what, missing);
    }
    answer = combine(all);
    std::vector<int64_t> message = {kOk};
    message.insert(message.end(), answer.begin(), answer.end());
    std::vector<MPI_Request> sends(static_cast<size_t>(world - 1), MPI_REQUEST_NULL);
    for (int r = 1; r < world; ++r) {
      check_mpi(MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_INT64_T, r, kTag, MPI_COMM_WORLD,
                          &sends[static_cast<size_t>(r - 1)]),
                "MPI_Isend", what);
    }
    if (!poll(sends, deadline_after(timeout), what, &done)) {
      std::vector<int64_t> missing;
      for (int r = 1; r < world; ++r) {
        if (!done[static_cast<size_t>(r - 1)]) missing.push_back(r);
      }
      missing_ranks(what, missing);
    }
    return;
  }
  // The answer's length is known to every rank (the combiner's), plus the status word; a verdict
  // of missing ranks may need more room.
  std::vector<int64_t> message(std::max<size_t>(answer.size() + 1, static_cast<size_t>(world) + 2));
  std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
  check_mpi(MPI_Isend(mine.data(), static_cast<int>(n), MPI_INT64_T, 0, kTag, MPI_COMM_WORLD, &requests[0]),
            "MPI_Isend", what);
  check_mpi(MPI_Irecv(message.data(), static_cast<int>(message.size()), MPI_INT64_T, 0, kTag, MPI_COMM_WORLD,
                      &requests[1]),
            "MPI_Irecv", what);
  // Rank 1 gives up first when rank 0 never answers, and its report ends the job: the others,
  // a second later, normally have nothing to add.
  const double patience = timeout + grace_seconds() + (me == 1 ? 0.0 : 1.0);
  if (!poll(requests, deadline_after(patience), what)) {
    GPT_FATAL() << "agreement '" << what << "' over the world timed out on world rank " << me << " after "
                << patience << " s (--distributed-timeout-minutes): world rank 0, which gathers "
                << "it, did not answer";
  }
  if (message[0] == kTimedOut) {
    // Rank 0 reports the missing ranks and ends the job; one line is enough: stop without another.
    fatal_exit(1);
  }
  std::copy(message.begin() + 1, message.begin() + 1 + static_cast<long>(answer.size()), answer.begin());
}

}  // namespace

void all_reduce(std::span<int64_t> values, Combine combine, std::string_view what) {
  if (!running() || size() == 1) return;
  const size_t n = values.size();
  std::vector<int64_t> answer(n);
  exchange(values, what,
           [&](const std::vector<int64_t>& all) {
             std::vector<int64_t> result(all.begin(), all.begin() + static_cast<long>(n));
             for (size_t at = n; at < all.size(); at += n) {
               for (size_t i = 0; i < n; ++i) {
                 const int64_t v = all[at + i];
                 result[i] = combine == Combine::kMin   ? std::min(result[i], v)
                             : combine == Combine::kMax ? std::max(result[i], v)
                                                        : result[i] + v;
               }
             }
             return result;
           },
           answer);
  std::copy(answer.begin(), answer.end(), values.begin());
}

int64_t all_reduce(int64_t value, Combine combine, std::string_view what) {
  all_reduce(std::span<int64_t>(&value, 1), combine, what);
  return value;
}

std::vector<uint64_t> all_gather(uint64_t value, std::string_view what) {
  if (!running() || size() == 1) return {value};
  int64_t word = 0;
  std::memcpy(&word, &value, sizeof(word));
  std::vector<int64_t> answer(static_cast<size_t>(size()));
  exchange(std::span<const int64_t>(&word, 1), what, [](const std::vector<int64_t>& all) { return all; }, answer);
  std::vector<uint64_t> result(answer.size());
  std::memcpy(result.data(), answer.data(), answer.size() * sizeof(uint64_t));
  return result;
}

void broadcast_from_rank0(std::string& text, std::string_view what) {
  if (!running() || size() == 1) return;
  // The length first (an agreement of one word: rank 0's), then the bytes as words.
  const int64_t length = all_reduce(rank() == 0 ? static_cast<int64_t>(text.size()) : 0, Combine::kMax, what);
  std::vector<int64_t> words(static_cast<size_t>((length + 7) / 8), 0);
  if (rank() == 0) std::memcpy(words.data(), text.data(), text.size());
  std::vector<int64_t> answer(words.size());
  const int64_t nothing = 0;
  exchange(std::span<const int64_t>(&nothing, 1), what,
           [&](const std::vector<int64_t>&) { return words; }, answer);
  text.assign(reinterpret_cast<const char*>(answer.data()), static_cast<size_t>(length));
}

std::vector<std::string> gather_to_rank0(const std::string& mine, std::string_view what) {
  if (!running() || size() == 1) return {mine};
  // Every rank sends as many words: its length, then its bytes padded to the longest text.
  const int64_t longest = all_reduce(static_cast<int64_t>(mine.size()), Combine::kMax, what);
  std::vector<int64_t> words(1 + static_cast<size_t>((longest + 7) / 8), 0);
  words[0] = static_cast<int64_t>(mine.size());
  std::memcpy(words.data() + 1, mine.data(), mine.size());
  std::vector<std::string> gathered;
  std::vector<int64_t> no_answer;
  exchange(words, what,
           [&](const std::vector<int64_t>& all) {
             for (size_t at = 0; at < all.size(); at += words.size()) {
               gathered.emplace_back(reinterpret_cast<const char*>(all.data() + at + 1),
                                     static_cast<size_t>(all[at]));
             }
             return std::vector<int64_t>();
           },
           no_answer);
  return gathered;
}

}  // namespace gpt::world
