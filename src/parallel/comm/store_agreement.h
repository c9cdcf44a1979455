// The world agreements (world_agreement.h) of a torchrun job, over its key-value store instead of
// MPI messages: the same exchange, with keys for messages. Every rank but 0 sets
// "<prefix>a<n>/<rank>" (n counts the agreements, which every rank makes in the same order); rank
// 0 waits for them until the deadline, combines them and sets "<prefix>a<n>/answer", or, at the
// deadline, the verdict naming the ranks that did not arrive, which it reports (one line) while
// the others stop quietly. The others wait a grace period longer for the answer; if rank 0 never
// gives one, rank 1 says so.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpt {
class TcpStoreClient;
}

namespace gpt::world {

// From now on the agreements of this process go over `store` (nullptr: back to MPI or none).
void use_store(TcpStoreClient* store, std::string prefix, int rank, int size);
bool store_in_use();
int store_rank();
int store_size();

using Combiner = std::function<std::vector<int64_t>(const std::vector<int64_t>& all)>;
// `mine` (as many words on every rank) to rank 0, which passes every rank's words, by rank, to
// `combine`; its result comes back to every rank in `answer` (sized by the caller).
void store_exchange(std::span<const int64_t> mine, std::string_view what, const Combiner& combine,
                    std::vector<int64_t>& answer, double timeout_seconds, double grace_seconds);

}  // namespace gpt::world
