// Small host-side agreements over the whole job (MPI_COMM_WORLD), for what the ranks settle before
// and around the training collectives: set-up status, the arguments' digests, checkpoint save and
// load handshakes, byte counts. Every wait is bounded by --distributed-timeout-minutes (the
// launcher sets it once the arguments are parsed; 10 minutes until then), and a timeout names the
// agreement and the world ranks that did not arrive, never a silent hang.
//
// How: world rank 0 gathers every rank's values with point-to-point messages (so it knows who is
// missing), combines them and sends the result back. At its deadline rank 0 names the ranks that
// did not arrive (one line), tells the ranks that did to stop quietly, and ends the job; the
// others wait a grace period longer, and if rank 0 itself never answers, rank 1 says so.
// Under torchrun the same exchange goes over the job's key-value store (store_agreement.h).
// Without MPI (a world of one) every function returns at once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpt::world {

// MPI initialized (a launcher started this process) and not finalized, or a torchrun world formed.
bool running();
int rank();  // 0 without MPI
int size();  // 1 without MPI

// The deadline of every agreement from now on (seconds > 0).
void set_timeout_seconds(double seconds);
double timeout_seconds();

enum class Combine { kMin, kMax, kSum };
// `values` combined element-wise over the world, in place (every rank passes as many).
// Collective; `what` names the agreement in a timeout message.
void all_reduce(std::span<int64_t> values, Combine combine, std::string_view what);
int64_t all_reduce(int64_t value, Combine combine, std::string_view what);
// Every rank's value, by world rank. Collective.
std::vector<uint64_t> all_gather(uint64_t value, std::string_view what);
// Rank 0's `text` on every rank. Collective.
void broadcast_from_rank0(std::string& text, std::string_view what);
// Every rank's `mine` on rank 0, by world rank (an empty vector elsewhere). Collective; rank 0
// holds world size x the longest text while it gathers.
std::vector<std::string> gather_to_rank0(const std::string& mine, std::string_view what);

}  // namespace gpt::world
