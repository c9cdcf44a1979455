// The index's non-tensor content, inside the checkpoint module (checkpoint_files.cc writes and
// reads it): the format's names and version, the run state and arguments with their CRC-32Cs,
// and the keyed records. docs/CHECKPOINTS.md describes the layout.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/hdf5_file.h"
#include "core/status.h"

namespace gpt::checkpoint_index {

inline constexpr char kPieceTable[] = "_pieces";
inline constexpr char kArguments[] = "_arguments";
inline constexpr char kRecords[] = "_records";
inline constexpr char kFormat[] = "gpt-hdf5-checkpoint";
// 2: the index binds its shards (size, save id, piece-table checksum) and checksums its metadata.
// 1: neither; still read (CheckpointMetadata::legacy).
inline constexpr int64_t kFormatVersion = 2;
inline constexpr int64_t kLegacyFormatVersion = 1;

// CRC-32C of a text, as the index stores its checksums.
int64_t checksum(const std::string& text);

// The format, run state, shard bindings, arguments, records and piece table, with their checksums.
absl::Status write_metadata(Hdf5File& index, const CheckpointMetadata& m, const std::string& shard_files,
                            const std::string& shard_bytes, const std::string& shard_checksums,
                            const std::string& pieces);
// Reads the run state, arguments and records; a version-2 index is checked against its run-state,
// arguments and records checksums (the piece table's is checked where it is read).
absl::Status read_metadata(const Hdf5File& index, CheckpointMetadata& m);

}  // namespace gpt::checkpoint_index
