#include "perf_model/cluster.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/strict_number.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"

#ifndef GPT_SOURCE_DIR
#define GPT_SOURCE_DIR ""
#endif

namespace gpt::perf {
namespace {

constexpr double kMostFileValue = 1e18, kLeastPositiveFileValue = 1e-9;

// What a number must be.
enum class Range { kPositive, kNonNegative, kFraction };  // kFraction: (0, 1]

// One key of the format: where its value goes and the factor from the file's unit to SI.
struct Key {
  const char* name;
  bool required;
  Range range;
  double scale;
  double Cluster::*field;
};

const Key kKeys[] = {
    {"peak_tflops", true, Range::kPositive, 1e12, &Cluster::peak_flops},
    {"memory_gib", true, Range::kPositive, 1024.0 * 1024 * 1024, &Cluster::memory_bytes},
    {"memory_reserved_gib", false, Range::kNonNegative, 1024.0 * 1024 * 1024, &Cluster::memory_reserved_bytes},
    {"memory_bandwidth_GBps", true, Range::kPositive, 1e9, &Cluster::memory_bandwidth},
    {"memory_bandwidth_efficiency", false, Range::kFraction, 1, &Cluster::memory_bandwidth_efficiency},
    {"intra_node_bandwidth_GBps", true, Range::kPositive, 1e9, &Cluster::intra_node_bandwidth},
    {"inter_node_bandwidth_GBps", true, Range::kPositive, 1e9, &Cluster::inter_node_bandwidth},
    {"intra_node_latency_us", false, Range::kNonNegative, 1e-6, &Cluster::intra_node_latency},
    {"inter_node_latency_us", false, Range::kNonNegative, 1e-6, &Cluster::inter_node_latency},
    {"intra_node_efficiency", false, Range::kFraction, 1, &Cluster::intra_node_efficiency},
    {"inter_node_efficiency", false, Range::kFraction, 1, &Cluster::inter_node_efficiency},
    {"host_link_bandwidth_GBps", false, Range::kPositive, 1e9, &Cluster::host_link_bandwidth},
    {"host_adamw_GBps", false, Range::kPositive, 1e9, &Cluster::host_adamw_bandwidth},
    {"attention_forward_efficiency", true, Range::kFraction, 1, &Cluster::attention_forward_efficiency},
    {"attention_backward_efficiency", true, Range::kFraction, 1, &Cluster::attention_backward_efficiency},
    {"kernel_overhead_us", false, Range::kNonNegative, 1e-6, &Cluster::kernel_overhead},
    {"microbatch_overhead_us", false, Range::kNonNegative, 1e-6, &Cluster::microbatch_overhead},
    {"collective_overhead_us", false, Range::kNonNegative, 1e-6, &Cluster::collective_overhead},
    {"iteration_overhead_ms", false, Range::kNonNegative, 1e-3, &Cluster::iteration_overhead},
    {"tp_comm_overlap_fraction", false, Range::kNonNegative, 1, &Cluster::tp_comm_overlap_fraction},
    {"dp_comm_overlap_fraction", false, Range::kNonNegative, 1, &Cluster::dp_comm_overlap_fraction},
    {"model_error_fraction", false, Range::kFraction, 1, &Cluster::model_error},
};

absl::Status error_at(absl::string_view origin, int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ": ", message));
}

absl::StatusOr<double> parse_number(absl::string_view text, Range range, absl::string_view key) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(key, " must be a number (got \"", text, "\")"));
  }
  const bool ok = range == Range::kPositive      ? value > 0
                  : range == Range::kNonNegative ? value >= 0
                                                 : value > 0 && value <= 1;
  if (!ok) {
    const char* what = range == Range::kPositive ? "positive" : range == Range::kNonNegative ? ">= 0" : "in (0, 1]";
    return absl::InvalidArgumentError(absl::StrCat(key, " must be ", what, " (got ", text, ")"));
  }
  // Magnitudes every computation from them survives: at most 1e18 in the file's unit (a GiB count
  // times 2^30 stays finite), and a positive value at least 1e-9 (a bandwidth of 1e-300 would make
  // every transfer take forever, an infinite time in the predictions).
  if (value > kMostFileValue || (range == Range::kPositive && value < kLeastPositiveFileValue)) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, " must be ", value > kMostFileValue ? "at most " : "at least ",
        number_text(value > kMostFileValue ? kMostFileValue : kLeastPositiveFileValue), " (got ", text, ")"));
  }
  return value;
}

absl::StatusOr<int> parse_count(absl::string_view text, absl::string_view key) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(key, " must be a positive integer (got \"", text, "\")"));
  }
  return value;
}

// "1e9:0.25, 1e10:0.41": ascending FLOP counts, efficiencies in (0, 1].
absl::StatusOr<std::vector<std::pair<double, double>>> parse_table(absl::string_view text) {
  std::vector<std::pair<double, double>> table;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("gemm_efficiency entries are flops:efficiency (got \"", absl::StripAsciiWhitespace(entry), "\")"));
    }
    GPT_ASSIGN_OR_RETURN(const double flops,
                         parse_number(absl::StripAsciiWhitespace(parts[0]), Range::kPositive, "gemm_efficiency flops"));
    GPT_ASSIGN_OR_RETURN(const double efficiency, parse_number(absl::StripAsciiWhitespace(parts[1]), Range::kFraction,
                                                                "gemm_efficiency efficiency"));
    if (!table.empty() && flops <= table.back().first) {
      return absl::InvalidArgumentError("gemm_efficiency flops must be ascending");
    }
    table.emplace_back(flops, efficiency);
  }
  if (table.empty()) return absl::InvalidArgumentError("gemm_efficiency needs at least one flops:efficiency entry");
  return table;
}

bool is_file_path(absl::string_view name) {
  return name.find('/') != absl::string_view::npos || absl::EndsWith(name, ".conf") ||
         std::filesystem::exists(std::filesystem::path(std::string(name)));
}

absl::StatusOr<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read cluster file ", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading cluster file ", path.string()));
  return text.str();
}

}  // namespace

double Cluster::gemm_efficiency_at(double flops) const {
  if (gemm_efficiency.empty()) return 1.0;
  if (flops <= gemm_efficiency.front().first) return gemm_efficiency.front().second;
  for (size_t i = 1; i < gemm_efficiency.size(); ++i) {
    const auto [x1, y1] = gemm_efficiency[i];
    if (flops <= x1) {
      const auto [x0, y0] = gemm_efficiency[i - 1];
      const double w = (std::log(flops) - std::log(x0)) / (std::log(x1) - std::log(x0));
      return y0 + w * (y1 - y0);
    }
  }
  return gemm_efficiency.back().second;
}

absl::StatusOr<Cluster> parse_cluster(absl::string_view text, absl::string_view origin) {
  Cluster cluster;
  std::map<std::string, int, std::less<>> seen;  // key -> line
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos) {
      return error_at(origin, line_number, absl::StrCat("expected key = value (got \"", line, "\")"));
    }
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, equals)));
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(equals + 1));
    if (auto [it, fresh] = seen.emplace(key, line_number); !fresh) {
      return error_at(origin, line_number, absl::StrCat(key, " is given twice (first on line ", it->second, ")"));
    }
    if (value.empty()) return error_at(origin, line_number, absl::StrCat(key, " has no value"));
    absl::Status status;
    if (key == "name") {
      cluster.name = std::string(value);
    } else if (key == "gpus_per_node" || key == "compute_slots_per_node") {
      absl::StatusOr<int> count = parse_count(value, key);
      status = count.status();
      if (count.ok()) (key == "gpus_per_node" ? cluster.gpus_per_node : cluster.compute_slots_per_node) = *count;
    } else if (key == "gemm_efficiency") {
      absl::StatusOr<std::vector<std::pair<double, double>>> table = parse_table(value);
      status = table.status();
      if (table.ok()) cluster.gemm_efficiency = *std::move(table);
    } else {
      const Key* spec = std::find_if(std::begin(kKeys), std::end(kKeys), [&](const Key& k) { return key == k.name; });
      if (spec == std::end(kKeys)) return error_at(origin, line_number, absl::StrCat("unknown key ", key));
      absl::StatusOr<double> number = parse_number(value, spec->range, key);
      status = number.status();
      if (number.ok()) cluster.*(spec->field) = *number * spec->scale;
    }
    if (!status.ok()) return error_at(origin, line_number, status.message());
  }
  std::vector<std::string> missing;
  for (const char* key : {"name", "gpus_per_node", "gemm_efficiency"}) {
    if (!seen.contains(key)) missing.push_back(key);
  }
  for (const Key& key : kKeys) {
    if (key.required && !seen.contains(key.name)) missing.push_back(key.name);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": missing ", absl::StrJoin(missing, ", ")));
  }
  if (cluster.compute_slots_per_node == 0) cluster.compute_slots_per_node = cluster.gpus_per_node;
  for (const auto& [key, fraction] : {std::pair{"tp_comm_overlap_fraction", cluster.tp_comm_overlap_fraction},
                                      std::pair{"dp_comm_overlap_fraction", cluster.dp_comm_overlap_fraction}}) {
    if (fraction > 1) {
      return error_at(origin, seen.find(key)->second, absl::StrCat(key, " must be in [0, 1] (got ", fraction, ")"));
    }
  }
  if (cluster.memory_reserved_bytes >= cluster.memory_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": memory_reserved_gib must be less than memory_gib"));
  }
  cluster.source = std::string(origin);
  return cluster;
}

std::vector<std::string> clusters_directories(absl::string_view executable_path) {
  std::vector<std::string> directories;
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::weakly_canonical(std::string(executable_path), error);
  if (!error && !exe.empty()) {
    directories.push_back((exe.parent_path() / ".." / "share" / "gpt" / "clusters").lexically_normal().string());
    directories.push_back((exe.parent_path() / ".." / ".." / "configs" / "clusters").lexically_normal().string());
  }
  if (absl::string_view(GPT_SOURCE_DIR).size() > 0) {
    directories.push_back(absl::StrCat(GPT_SOURCE_DIR, "/configs/clusters"));
  }
  return directories;
}

absl::StatusOr<Cluster> load_cluster(absl::string_view name_or_path, absl::string_view executable_path) {
  if (name_or_path.empty()) return absl::InvalidArgumentError("--cluster needs a name or a file");
  if (is_file_path(name_or_path)) {
    GPT_ASSIGN_OR_RETURN(const std::string text, read_file(std::string(name_or_path)));
    return parse_cluster(text, name_or_path);
  }
  std::vector<std::string> known;
  const std::vector<std::string> directories = clusters_directories(executable_path);
  for (const std::string& directory : directories) {
    const std::filesystem::path path = std::filesystem::path(directory) / absl::StrCat(name_or_path, ".conf");
    if (std::filesystem::exists(path)) {
      GPT_ASSIGN_OR_RETURN(const std::string text, read_file(path));
      return parse_cluster(text, path.string());
    }
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
      if (entry.path().extension() == ".conf") known.push_back(entry.path().stem().string());
    }
  }
  std::sort(known.begin(), known.end());
  known.erase(std::unique(known.begin(), known.end()), known.end());
  return absl::NotFoundError(absl::StrCat("unknown cluster ", name_or_path, " (shipped: ",
                                          known.empty() ? "none found" : absl::StrJoin(known, ", "),
                                          "; or give a file path)"));
}

}  // namespace gpt::perf
