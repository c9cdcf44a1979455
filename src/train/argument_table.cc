#include "train/argument_table.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/megatron_description.h"

namespace gpt {

namespace {

// Python's repr of a float (data/megatron_description.h for finite values).
std::string python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return python_float_repr(value);
}

std::string python_repr_str(const std::string& text) {
  // Python quotes with ' unless the text holds a ' and no ".
  const bool double_quotes = text.find('\'') != std::string::npos && text.find('"') == std::string::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out(1, quote);
  for (char c : text) {
    if (c == '\\' || c == quote) out += '\\';
    out += c;
  }
  return out + quote;
}

}  // namespace

std::string python_str(const PyValue& value) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(bool v) const { return v ? "True" : "False"; }
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    std::string operator()(double v) const { return python_float(v); }
    std::string operator()(const std::string& v) const { return v; }
    std::string operator()(const std::vector<std::string>& v) const {
      std::vector<std::string> quoted;
      for (const std::string& item : v) quoted.push_back(python_repr_str(item));
      return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
    }
  };
  return std::visit(Visitor{}, value);
}

std::vector<ArgumentEntry> argument_table(const Arguments& a, int64_t world_size) {
  std::vector<ArgumentEntry> t;
  for (const FlagRow& row : flag_rows()) {
    t.push_back({std::string(row.flag), flag_dest(row), flag_python_value(row, a), flag_canonical_text(row, a)});
  }
  if (world_size > 0) {
    // What Megatron's validate_args derives before it prints.
    const int v = virtual_pipeline_size(a);
    t.push_back({"", "rank", int64_t{0}, ""});
    t.push_back({"", "world_size", world_size, ""});
    t.push_back({"", "data_parallel_size", data_parallel_size(a, world_size), ""});
    t.push_back({"", "virtual_pipeline_model_parallel_size", v > 1 ? PyValue(int64_t{v}) : PyValue(), ""});
    t.push_back({"", "params_dtype", std::string(a.bf16 ? "torch.bfloat16" : a.fp16 ? "torch.float16" : "torch.float32"), ""});
  }
  return t;
}

std::string describe_arguments(const Arguments& args, int64_t world_size) {
  std::vector<std::string> lines;
  for (const ArgumentEntry& entry : argument_table(args, world_size)) {
    const size_t dots = entry.dest.size() < 48 ? 48 - entry.dest.size() : 0;
    lines.push_back(absl::StrCat("  ", entry.dest, " ", std::string(dots, '.'), " ", python_str(entry.value)));
  }
  // Megatron sorts the whole lines, lower-cased (so "_" sorts after letters, as in its logs).
  std::stable_sort(lines.begin(), lines.end(), [](const std::string& x, const std::string& y) {
    return absl::AsciiStrToLower(x) < absl::AsciiStrToLower(y);
  });
  return absl::StrCat("------------------------ arguments ------------------------\n", absl::StrJoin(lines, "\n"),
                      "\n-------------------- end of arguments ---------------------");
}

}  // namespace gpt
