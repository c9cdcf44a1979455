#include "checkpoint/index_metadata.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/crc32c.h"

namespace gpt::checkpoint_index {

int64_t checksum(const std::string& text) { return crc32c(text.data(), text.size()); }

namespace {

// The run state's attributes, in the order write_metadata writes them.
std::vector<std::pair<const char*, int64_t>> run_state_numbers(const CheckpointMetadata& m) {
  return {{"iteration", m.iteration},
          {"consumed_train_samples", m.consumed_train_samples},
          {"consumed_valid_samples", m.consumed_valid_samples},
          {"optimizer_steps", m.optimizer_steps},
          {"seed", m.seed},
          {"tensor_model_parallel_size", m.tensor_parallel},
          {"pipeline_model_parallel_size", m.pipeline_parallel},
          {"data_parallel_size", m.data_parallel},
          {"virtual_stages_per_pipeline_rank", m.virtual_stages},
          {"distributed_optimizer", m.distributed_optimizer ? 1 : 0}};
}

// What the index's run-state checksum covers: every attribute a load acts on (the run state, the
// layout, the shards and what each must be), as "name=value" lines.
std::string run_state_text(const CheckpointMetadata& m, const std::string& shard_files, const std::string& shard_bytes,
                           const std::string& shard_checksums) {
  std::string text;
  for (const auto& [name, value] : run_state_numbers(m)) absl::StrAppend(&text, name, "=", value, "\n");
  absl::StrAppend(&text, "params_dtype=", m.params_dtype, "\nsave_id=", m.save_id, "\nshard_files=", shard_files,
                  "\nshard_bytes=", shard_bytes, "\nshard_table_checksums=", shard_checksums, "\n");
  return text;
}


// The records as "key=value" lines, in key order.
absl::StatusOr<std::string> records_text(const std::map<std::string, std::string>& records) {
  std::string text;
  for (const auto& [key, value] : records) {
    if (key.empty() || key.find_first_of("=\n") != std::string::npos || value.find('\n') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint record '", key, "': keys may not be empty or hold '=' or line breaks, values may "
                       "not hold line breaks"));
    }
    absl::StrAppend(&text, key, "=", value, "\n");
  }
  return text;
}

absl::StatusOr<std::map<std::string, std::string>> parse_records(const std::string& text, const std::string& path) {
  std::map<std::string, std::string> records;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos || equals == 0) {
      return absl::DataLossError(absl::StrCat(path, ": a malformed record line '", line, "'"));
    }
    records[std::string(line.substr(0, equals))] = std::string(line.substr(equals + 1));
  }
  return records;
}

}  // namespace

absl::Status write_metadata(Hdf5File& index, const CheckpointMetadata& m, const std::string& shard_files,
                            const std::string& shard_bytes, const std::string& shard_checksums,
                            const std::string& pieces) {
  GPT_ASSIGN_OR_RETURN(const std::string records, records_text(m.records));  // refused before writing anything
  GPT_RETURN_IF_ERROR(index.set_attribute("format", std::string(kFormat)));
  GPT_RETURN_IF_ERROR(index.set_attribute("format_version", kFormatVersion));
  for (const auto& [name, value] : run_state_numbers(m)) GPT_RETURN_IF_ERROR(index.set_attribute(name, value));
  GPT_RETURN_IF_ERROR(index.set_attribute("params_dtype", m.params_dtype));
  GPT_RETURN_IF_ERROR(index.set_attribute("save_id", m.save_id));
  GPT_RETURN_IF_ERROR(index.set_attribute("shard_files", shard_files));
  GPT_RETURN_IF_ERROR(index.set_attribute("shard_bytes", shard_bytes));
  GPT_RETURN_IF_ERROR(index.set_attribute("shard_table_checksums", shard_checksums));
  GPT_RETURN_IF_ERROR(index.set_attribute(
      "run_state_checksum", checksum(run_state_text(m, shard_files, shard_bytes, shard_checksums))));
  GPT_RETURN_IF_ERROR(index.set_attribute("arguments_checksum", checksum(m.arguments)));
  GPT_RETURN_IF_ERROR(index.set_attribute("pieces_checksum", checksum(pieces)));
  GPT_RETURN_IF_ERROR(index.write_text(kArguments, m.arguments));
  GPT_RETURN_IF_ERROR(index.set_attribute("records_checksum", checksum(records)));
  GPT_RETURN_IF_ERROR(index.write_text(kRecords, records));
  return index.write_text(kPieceTable, pieces);
}

absl::Status read_metadata(const Hdf5File& index, CheckpointMetadata& m) {
  const absl::StatusOr<std::string> format = index.attribute_string("format");
  if (!format.ok() || *format != kFormat) {
    return absl::DataLossError(absl::StrCat(index.path(), " is not a checkpoint index of this program"));
  }
  GPT_ASSIGN_OR_RETURN(const int64_t version, index.attribute_int("format_version"));
  if (version != kFormatVersion && version != kLegacyFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(index.path(), ": checkpoint format version ", version,
                                                      " (this program reads versions ", kLegacyFormatVersion, " and ",
                                                      kFormatVersion, ")"));
  }
  m.legacy = version == kLegacyFormatVersion;
  const std::pair<const char*, int64_t*> ints[] = {
      {"iteration", &m.iteration},
      {"consumed_train_samples", &m.consumed_train_samples},
      {"consumed_valid_samples", &m.consumed_valid_samples},
      {"optimizer_steps", &m.optimizer_steps},
      {"seed", &m.seed},
      {"tensor_model_parallel_size", &m.tensor_parallel},
      {"pipeline_model_parallel_size", &m.pipeline_parallel},
      {"data_parallel_size", &m.data_parallel},
      {"virtual_stages_per_pipeline_rank", &m.virtual_stages}};
  for (const auto& [name, value] : ints) {
    GPT_ASSIGN_OR_RETURN(*value, index.attribute_int(name));
  }
  GPT_ASSIGN_OR_RETURN(const int64_t distributed, index.attribute_int("distributed_optimizer"));
  m.distributed_optimizer = distributed != 0;
  GPT_ASSIGN_OR_RETURN(m.params_dtype, index.attribute_string("params_dtype"));
  GPT_ASSIGN_OR_RETURN(m.arguments, index.read_text(kArguments));
  if (m.legacy) return absl::OkStatus();
  GPT_ASSIGN_OR_RETURN(m.save_id, index.attribute_string("save_id"));
  GPT_ASSIGN_OR_RETURN(const std::string shard_files, index.attribute_string("shard_files"));
  GPT_ASSIGN_OR_RETURN(const std::string shard_bytes, index.attribute_string("shard_bytes"));
  GPT_ASSIGN_OR_RETURN(const std::string shard_checksums, index.attribute_string("shard_table_checksums"));
  GPT_ASSIGN_OR_RETURN(const int64_t run_state_checksum, index.attribute_int("run_state_checksum"));
  GPT_ASSIGN_OR_RETURN(const int64_t arguments_checksum, index.attribute_int("arguments_checksum"));
  if (checksum(run_state_text(m, shard_files, shard_bytes, shard_checksums)) != run_state_checksum) {
    return absl::DataLossError(absl::StrCat(
        index.path(), ": its run state (iteration ", m.iteration, ", consumed samples ", m.consumed_train_samples,
        ", optimizer steps ", m.optimizer_steps, ", layout, shard list) does not match its checksum: the index is "
        "damaged or was edited"));
  }
  if (checksum(m.arguments) != arguments_checksum) {
    return absl::DataLossError(absl::StrCat(index.path(), ": its saved arguments ('", kArguments,
                                            "') do not match their checksum: the index is damaged or was edited"));
  }
  // Records came with format 2 in the same release as the checksums; an index without them (none
  // written) has none.
  if (!index.contains(kRecords)) return absl::OkStatus();
  GPT_ASSIGN_OR_RETURN(const std::string records, index.read_text(kRecords));
  GPT_ASSIGN_OR_RETURN(const int64_t records_checksum, index.attribute_int("records_checksum"));
  if (checksum(records) != records_checksum) {
    return absl::DataLossError(absl::StrCat(index.path(), ": its records ('", kRecords,
                                            "') do not match their checksum: the index is damaged or was edited"));
  }
  GPT_ASSIGN_OR_RETURN(m.records, parse_records(records, index.path()));
  return absl::OkStatus();
}

}  // namespace gpt::checkpoint_index
