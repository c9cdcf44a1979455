#include "train/report/pipeline_timeline.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/strict_number.h"
#include "core/stream_copy.h"
#include "train/report/metrics_file.h"

namespace gpt {
namespace {

std::vector<pipeline::Instruction> compute_instructions(const std::vector<pipeline::Step>& steps) {
  std::vector<pipeline::Instruction> computes;
  for (const pipeline::Step& step : steps) {
    if (pipeline::is_compute_op(step.instructions.front().op)) computes.push_back(step.instructions.front());
  }
  return computes;
}

// A JSON value, as much of JSON as the timeline record uses: objects, arrays, strings without
// escapes other than \" and \\, numbers, true, false, null.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  bool boolean = false;
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;
  const Json* field(std::string_view key) const {
    for (const auto& [name, value] : fields) {
      if (name == key) return &value;
    }
    return nullptr;
  }
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}
  std::optional<Json> value() {
    skip();
    if (at_ >= text_.size()) return std::nullopt;
    const char c = text_[at_];
    Json v;
    if (c == '{') {
      v.kind = Json::kObject;
      ++at_;
      if (eat('}')) return v;
      do {
        skip();
        std::optional<Json> key = value();
        if (!key || key->kind != Json::kString || !eat(':')) return std::nullopt;
        std::optional<Json> item = value();
        if (!item) return std::nullopt;
        v.fields.push_back({key->text, *std::move(item)});
      } while (eat(','));
      return eat('}') ? std::optional<Json>(std::move(v)) : std::nullopt;
    }
    if (c == '[') {
      v.kind = Json::kArray;
      ++at_;
      if (eat(']')) return v;
      do {
        std::optional<Json> item = value();
        if (!item) return std::nullopt;
        v.items.push_back(*std::move(item));
      } while (eat(','));
      return eat(']') ? std::optional<Json>(std::move(v)) : std::nullopt;
    }
    if (c == '"') {
      v.kind = Json::kString;
      for (++at_; at_ < text_.size() && text_[at_] != '"'; ++at_) {
        if (text_[at_] == '\\' && at_ + 1 < text_.size()) ++at_;
        v.text += text_[at_];
      }
      if (at_ >= text_.size()) return std::nullopt;
      ++at_;
      return v;
    }
    for (const auto& [word, kind, truth] : {std::tuple{"true", Json::kBool, true}, std::tuple{"false", Json::kBool, false},
                                            std::tuple{"null", Json::kNull, false}}) {
      if (text_.substr(at_, std::string_view(word).size()) == word) {
        at_ += std::string_view(word).size();
        v.kind = kind;
        v.boolean = truth;
        return v;
      }
    }
    const std::string rest(text_.substr(at_, std::min<size_t>(64, text_.size() - at_)));
    char* end = nullptr;
    v.number = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str()) return std::nullopt;
    at_ += static_cast<size_t>(end - rest.c_str());
    v.kind = Json::kNumber;
    return v;
  }

 private:
  void skip() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool eat(char c) {
    skip();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  std::string_view text_;
  size_t at_ = 0;
};

std::optional<pipeline::Op> compute_op(std::string_view name) {
  for (pipeline::Op op : {pipeline::Op::kForward, pipeline::Op::kBackward, pipeline::Op::kBackwardInput,
                          pipeline::Op::kBackwardWeight}) {
    if (name == pipeline::to_string(op)) return op;
  }
  return std::nullopt;
}

// A pass's times are milliseconds from the start of its rank's pass over its steps: finite, >= 0,
// ordered, and at most 1e9 ms (11.6 days, beyond any iteration) so that the sums and means of the
// costs read from them stay finite; its chunk and microbatch whole numbers (range checked by the
// caller against the layout).
constexpr double kMaxTimelineMs = 1e9;

absl::Status check_pass_numbers(const Json& pass, size_t rank, size_t index) {
  const auto at = [&](const std::string& what) { return absl::StrCat("rank ", rank, " pass ", index, ": ", what); };
  for (size_t i : {size_t{1}, size_t{2}}) {
    const double v = pass.items[i].number;
    if (!(std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= 2147483647.0)) {
      return absl::InvalidArgumentError(
          at(absl::StrCat(i == 1 ? "the chunk" : "the microbatch", " must be a whole number (got ", number_text(v), ")")));
    }
  }
  const double start = pass.items[3].number, end = pass.items[4].number;
  for (const auto& [name, value] : {std::pair{"start_ms", start}, std::pair{"end_ms", end}}) {
    if (absl::Status ok = check_number(value, NumberRange::from_to(0, kMaxTimelineMs)); !ok.ok()) {
      return absl::InvalidArgumentError(at(absl::StrCat(name, " ", ok.message())));
    }
  }
  if (end < start) {
    return absl::InvalidArgumentError(
        at(absl::StrCat("it ends (", number_text(end), " ms) before it starts (", number_text(start), " ms)")));
  }
  return absl::OkStatus();
}

absl::StatusOr<MeasuredTimeline> parse_record(const Json& record, const std::string& where) {
  auto bad = [&](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat(where, ": ", what)); };
  MeasuredTimeline t;
  auto integer = [&](const char* key, auto& out) -> absl::Status {
    const Json* v = record.field(key);
    // Finite, whole and within the field's type before any conversion (a cast of NaN or 1e300 is undefined).
    const double most = std::min(9007199254740992.0,  // 2^53: every whole number below is exact
                                 static_cast<double>(std::numeric_limits<std::remove_reference_t<decltype(out)>>::max()));
    if (v == nullptr || v->kind != Json::kNumber || !std::isfinite(v->number) || v->number < 1 || v->number > most ||
        v->number != std::floor(v->number)) {
      return bad(absl::StrCat("\"", key, "\" must be a positive integer"));
    }
    out = static_cast<std::remove_reference_t<decltype(out)>>(v->number);
    return absl::OkStatus();
  };
  GPT_RETURN_IF_ERROR(integer("iteration", t.iteration));
  GPT_RETURN_IF_ERROR(integer("pipeline_size", t.pipeline_size));
  GPT_RETURN_IF_ERROR(integer("virtual_size", t.virtual_size));
  GPT_RETURN_IF_ERROR(integer("microbatches", t.microbatches));
  GPT_RETURN_IF_ERROR(integer("num_layers", t.num_layers));
  const Json* schedule = record.field("schedule");
  if (schedule == nullptr || schedule->kind != Json::kString || !pipeline::parse_schedule_kind(schedule->text).ok()) {
    return bad("\"schedule\" must name a pipeline schedule");
  }
  t.schedule = schedule->text;
  const Json* ranks = record.field("ranks");
  if (ranks == nullptr || ranks->kind != Json::kArray || static_cast<int>(ranks->items.size()) != t.pipeline_size) {
    return bad(absl::StrCat("\"ranks\" must list ", t.pipeline_size, " ranks"));
  }
  for (const Json& rank : ranks->items) {
    if (rank.kind != Json::kArray) return bad("a rank's passes must be an array");
    std::vector<TimedPass>& passes = t.ranks.emplace_back();
    for (const Json& pass : rank.items) {
      const bool shaped = pass.kind == Json::kArray && pass.items.size() == 5 && pass.items[0].kind == Json::kString &&
                          std::all_of(pass.items.begin() + 1, pass.items.end(),
                                      [](const Json& v) { return v.kind == Json::kNumber; });
      const std::optional<pipeline::Op> op = shaped ? compute_op(pass.items[0].text) : std::nullopt;
      if (!op) return bad("a pass must be [op (F, B, Bi or W), chunk, microbatch, start_ms, end_ms]");
      if (absl::Status numbers = check_pass_numbers(pass, t.ranks.size() - 1, passes.size()); !numbers.ok()) {
        return bad(std::string(numbers.message()));
      }
      const int chunk = static_cast<int>(pass.items[1].number), microbatch = static_cast<int>(pass.items[2].number);
      if (chunk < 0 || chunk >= t.virtual_size || microbatch < 0 || microbatch >= t.microbatches ||
          !(pass.items[4].number >= pass.items[3].number)) {
        return bad(absl::StrCat("a pass out of range: chunk ", chunk, ", microbatch ", microbatch));
      }
      passes.push_back({{*op, chunk, microbatch, -1}, pass.items[3].number, pass.items[4].number});
    }
  }
  return t;
}

// Milliseconds to the microsecond (the clock's float32 trip leaves noise below).
double microseconds(double ms) { return std::round(ms * 1e3) / 1e3; }

}  // namespace

TimelineGather::TimelineGather(const pipeline::Schedule& schedule, pipeline::ScheduleKind kind, int64_t num_layers,
                               Arena& arena)
    : schedule_(schedule), kind_(kind), num_layers_(num_layers) {
  for (const std::vector<pipeline::Step>& steps : schedule_.ranks) {
    most_passes_ = std::max(most_passes_, compute_instructions(steps).size());
  }
  const int64_t floats = 2 * static_cast<int64_t>(most_passes_);
  mine_ = arena.allocate(DType::kFloat32, {floats});
  all_ = arena.allocate(DType::kFloat32, {schedule_.pipeline_size * floats});
}

MeasuredTimeline TimelineGather::gather(Context& ctx, Communicator& pipeline,
                                        std::span<const std::pair<double, double>> mine, int64_t iteration) {
  GPT_CHECK_EQ(pipeline.size(), schedule_.pipeline_size) << "pipeline group for the timeline";
  std::vector<float> values(2 * most_passes_, 0.0f);
  for (size_t i = 0; i < mine.size() && i < most_passes_; ++i) {
    values[2 * i] = static_cast<float>(mine[i].first * 1e3);
    values[2 * i + 1] = static_cast<float>(mine[i].second * 1e3);
  }
  copy_to_device(ctx, mine_, std::span<const float>(values));
  pipeline.all_gather(ctx, all_, mine_);
  std::vector<float> all(static_cast<size_t>(all_.numel()));
  copy_to_host(ctx, all.data(), all_);
  ctx.synchronize();
  MeasuredTimeline t{.iteration = iteration,
                     .schedule = pipeline::to_string(kind_),
                     .pipeline_size = schedule_.pipeline_size,
                     .virtual_size = schedule_.virtual_size,
                     .microbatches = schedule_.microbatches,
                     .num_layers = num_layers_,
                     .ranks = {}};
  for (int r = 0; r < schedule_.pipeline_size; ++r) {
    const std::vector<pipeline::Instruction> computes = compute_instructions(schedule_.ranks[static_cast<size_t>(r)]);
    const float* times = all.data() + static_cast<size_t>(r) * 2 * most_passes_;
    std::vector<TimedPass>& passes = t.ranks.emplace_back();
    for (size_t i = 0; i < computes.size(); ++i) passes.push_back({computes[i], times[2 * i], times[2 * i + 1]});
  }
  return t;
}

std::string timeline_record(const MeasuredTimeline& t) {
  std::string ranks = "[";
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    absl::StrAppend(&ranks, r ? ", [" : "[");
    for (size_t i = 0; i < t.ranks[r].size(); ++i) {
      const TimedPass& pass = t.ranks[r][i];
      absl::StrAppend(&ranks, i ? ", " : "", "[", json_string(pipeline::to_string(pass.instruction.op)), ", ",
                      pass.instruction.chunk, ", ", pass.instruction.microbatch, ", ", json_number(microseconds(pass.start_ms)),
                      ", ", json_number(microseconds(pass.end_ms)), "]");
    }
    absl::StrAppend(&ranks, "]");
  }
  absl::StrAppend(&ranks, "]");
  return absl::StrCat("{\"pipeline_timeline\": true, \"iteration\": ", t.iteration,
                      ", \"schedule\": ", json_string(t.schedule), ", \"pipeline_size\": ", t.pipeline_size,
                      ", \"virtual_size\": ", t.virtual_size, ", \"microbatches\": ", t.microbatches,
                      ", \"num_layers\": ", t.num_layers, ", \"ranks\": ", ranks, "}");
}

absl::StatusOr<MeasuredTimeline> read_last_timeline(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open the metrics file ", path));
  std::string line, last;
  int64_t number = 0, last_number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find("\"pipeline_timeline\": true") != std::string::npos) {
      last = line;
      last_number = number;
    }
  }
  if (last.empty()) {
    return absl::NotFoundError(absl::StrCat(
        path, " holds no pipeline timeline (pretrain_gpt writes one at each log line with --timing-log-level 2, "
              "--metrics-file and --pipeline-model-parallel-size > 1)"));
  }
  const std::string where = absl::StrCat(path, " line ", last_number);
  std::optional<Json> record = JsonReader(last).value();
  if (!record || record->kind != Json::kObject) return absl::InvalidArgumentError(where + ": not a JSON object");
  return parse_record(*record, where);
}

StageCosts stage_costs_from_timeline(const MeasuredTimeline& t, const std::string& source) {
  const absl::StatusOr<pipeline::ScheduleKind> kind = pipeline::parse_schedule_kind(t.schedule);
  const pipeline::Placement placement =
      kind.ok() ? pipeline::schedule_placement(*kind) : pipeline::Placement::kLoop;
  const size_t stages = static_cast<size_t>(t.pipeline_size * t.virtual_size);
  struct Sum {
    double total = 0;
    int count = 0;
    double mean() const { return count > 0 ? total / count : 0.0; }
  };
  std::vector<Sum> forward(stages), input(stages), weight(stages), fused(stages);
  Sum split_backward, split_weight;
  for (int r = 0; r < t.pipeline_size; ++r) {
    for (const TimedPass& pass : t.ranks[static_cast<size_t>(r)]) {
      const size_t k =
          static_cast<size_t>(pipeline::virtual_stage(placement, t.pipeline_size, r, pass.instruction.chunk));
      const double ms = pass.end_ms - pass.start_ms;
      Sum* sum = nullptr;
      switch (pass.instruction.op) {
        case pipeline::Op::kForward: sum = &forward[k]; break;
        case pipeline::Op::kBackward: sum = &fused[k]; break;
        case pipeline::Op::kBackwardInput: sum = &input[k]; split_backward.total += ms; break;
        case pipeline::Op::kBackwardWeight: sum = &weight[k]; split_weight.total += ms; break;
        default: break;
      }
      if (sum != nullptr) {
        sum->total += ms;
        ++sum->count;
      }
    }
  }
  const double split = split_backward.total + split_weight.total;
  const double weight_share = split > 0 ? split_weight.total / split : 0.5;
  StageCosts costs;
  costs.source = source;
  for (size_t k = 0; k < stages; ++k) {
    costs.forward.push_back(forward[k].mean());
    if (input[k].count > 0) {
      costs.backward_input.push_back(input[k].mean());
      costs.weight.push_back(weight[k].mean());
    } else {
      costs.backward_input.push_back(fused[k].mean() * (1.0 - weight_share));
      costs.weight.push_back(fused[k].mean() * weight_share);
    }
  }
  return costs;
}

absl::StatusOr<StageCosts> measured_stage_costs(const Arguments& args) {
  const std::string& path = args.pipeline_schedule_costs;
  absl::StatusOr<MeasuredTimeline> timeline = read_last_timeline(path);
  if (!timeline.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--pipeline-schedule-costs: ", timeline.status().message()));
  }
  const int v = virtual_pipeline_size(args);
  if (timeline->pipeline_size != args.pipeline_model_parallel_size || timeline->virtual_size != v ||
      timeline->num_layers != args.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pipeline-schedule-costs ", path, " was measured on PP ", timeline->pipeline_size, " with ",
        timeline->virtual_size, " chunks per rank and ", timeline->num_layers, " layers; this run has PP ",
        args.pipeline_model_parallel_size, ", ", v, " chunks per rank and ", args.num_layers, " layers"));
  }
  return stage_costs_from_timeline(
      *timeline, absl::StrCat("measured in ", path, " (iteration ", timeline->iteration, ", ", timeline->schedule,
                              "; mean F, B, W per virtual stage)"));
}

pipeline::SimulationReport measured_report(const MeasuredTimeline& t) {
  pipeline::SimulationReport report;
  for (const std::vector<TimedPass>& passes : t.ranks) {
    pipeline::RankTimeline& rank = report.ranks.emplace_back();
    int step = 0;
    for (const TimedPass& pass : passes) {
      rank.compute.push_back({pass.instruction, step++, pass.start_ms, pass.end_ms});
      rank.busy += pass.end_ms - pass.start_ms;
      rank.finish = std::max(rank.finish, pass.end_ms);
    }
    report.makespan = std::max(report.makespan, rank.finish);
    report.ideal = std::max(report.ideal, rank.busy);
  }
  double idle = 0;
  for (pipeline::RankTimeline& rank : report.ranks) {
    rank.idle = report.makespan - rank.busy;
    idle += report.makespan > 0 ? rank.idle / report.makespan : 0.0;
  }
  report.bubble_fraction = report.ideal > 0 ? (report.makespan - report.ideal) / report.ideal : 0.0;
  report.idle_fraction = report.ranks.empty() ? 0.0 : idle / static_cast<double>(report.ranks.size());
  return report;
}

}  // namespace gpt
