// What the ranks of a job agree on before they work together. Without these checks a rank that
// fails in set-up leaves the others waiting in their first collective until the timeout (and its
// message is never shown), and ranks launched with different arguments train diverging replicas
// or fail with an MPI error that names nothing.
//
// Every function here is collective over the world (every rank calls it at the same point), through
// parallel/comm/world_agreement.h: bounded by --distributed-timeout-minutes, a timeout naming the
// agreement and the ranks that did not arrive. Each returns its argument unchanged in a world of one.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

// The number of ranks of the job (MPI_COMM_WORLD's size; 1 without MPI). Not collective.
int job_world_size();

// MPI is running when a launcher started this process (MpiRuntime initialized it) and it has not
// been shut down; without it the process is a world of one.
bool mpi_running();

// "Set-up ok?": OK when `local` is OK on every rank. Otherwise a failing rank gets its own status
// back and every other rank a peer-failure status naming the lowest failing rank, so all leave
// set-up together; the launcher then prints the failing rank's own message, once.
absl::Status agree_on_setup(const absl::Status& local, absl::string_view phase);
// True for the status agree_on_setup gives a rank that did not fail itself.
bool is_peer_failure(const absl::Status& status);
// That status: `phase` failed on world rank `rank`, whose own message that rank reports.
absl::Status peer_failure(absl::string_view phase, int rank);

// The validated arguments as text, one "--flag value" line per field: what ranks compare.
std::string canonical_arguments(const Arguments& args);
// The flags whose lines differ between two canonical texts, as "--flag A (rank 0: B)".
std::vector<std::string> differing_arguments(const std::string& mine, const std::string& reference);

// Every rank compares a digest of its canonical arguments with rank 0's; a rank whose digest
// differs fails with the flags that differ (rank 0's text is sent only then).
absl::Status check_same_arguments(const Arguments& args);

}  // namespace gpt
