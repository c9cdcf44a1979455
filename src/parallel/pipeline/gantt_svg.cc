#include "parallel/pipeline/gantt_svg.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpt::pipeline {
namespace {

constexpr double kLeft = 70, kRight = 20, kRowHeight = 34, kRowGap = 6, kLegendHeight = 24;

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Forward blue, backward green, a split backward's input-gradient pass teal and its weight-gradient
// pass orange; later chunks lighter so the interleaving is visible.
double lightness(int chunk, int chunks) { return chunks > 1 ? 36.0 + 32.0 * chunk / (chunks - 1) : 42.0; }
std::string fill(Op op, int chunk, int chunks) {
  const int hue = op == Op::kForward ? 212 : op == Op::kBackwardInput ? 172 : op == Op::kBackwardWeight ? 30 : 140;
  const int saturation = op == Op::kForward ? 70 : op == Op::kBackwardWeight ? 80 : 55;
  return absl::StrFormat("hsl(%d,%d%%,%.0f%%)", hue, saturation, lightness(chunk, chunks));
}
const char* legend_name(Op op) {
  switch (op) {
    case Op::kForward: return "forward";
    case Op::kBackward: return "backward";
    case Op::kBackwardInput: return "B (input gradient)";
    case Op::kBackwardWeight: return "W (weight gradient)";
    default: return "";
  }
}

// 1, 2 or 5 times a power of ten, giving about ten ticks.
double tick_step(double span) {
  const double raw = std::max(span, 1e-12) / 10;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0}) {
    if (f * decade >= raw) return f * decade;
  }
  return 10 * decade;
}

}  // namespace

std::string gantt_svg(const Schedule& schedule, const SimulationReport& report, const GanttOptions& options) {
  const int p = schedule.pipeline_size, v = schedule.virtual_size;
  const double top = (options.title.empty() ? 10 : 36) + kLegendHeight;
  const double span = report.makespan > 0 ? report.makespan : 1;
  const double scale = options.width / span;
  const double rows_bottom = top + p * (kRowHeight + kRowGap);
  const double total_width = kLeft + options.width + kRight, total_height = rows_bottom + 44;

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
      "font-family=\"Helvetica, Arial, sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      total_width, total_height, total_width, total_height);
  if (!options.title.empty()) {
    absl::StrAppendFormat(&svg, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", kLeft,
                          escape(options.title));
  }
  // Legend: one swatch per (forward/backward, chunk).
  double x = kLeft;
  const double legend_y = top - kLegendHeight + 4;
  std::vector<Op> ops;
  for (Op op : {Op::kForward, Op::kBackward, Op::kBackwardInput, Op::kBackwardWeight}) {
    bool used = op == Op::kForward;
    for (const RankTimeline& rank : report.ranks) {
      for (const ComputeInterval& interval : rank.compute) used = used || interval.instruction.op == op;
    }
    if (used) ops.push_back(op);
  }
  for (Op op : ops) {
    for (int c = 0; c < v; ++c) {
      absl::StrAppendFormat(&svg, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"%s\"/>\n", x, legend_y,
                            fill(op, c, v));
      const std::string label = absl::StrCat(legend_name(op), v > 1 ? absl::StrCat(" chunk ", c) : "");
      absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", x + 18, legend_y + 10,
                            label);
      x += 18 + 7.0 * label.size() + 14;
    }
  }
  absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#444\">box: microbatch / c chunk</text>\n",
                        x + 6, legend_y + 10);

  for (int r = 0; r < p; ++r) {
    const double y = top + r * (kRowHeight + kRowGap);
    absl::StrAppendFormat(&svg, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">rank %d</text>\n",
                          kLeft - 8, y + kRowHeight / 2 + 4, r);
    absl::StrAppendFormat(&svg, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.1f\" height=\"%.0f\" fill=\"#f3f3f3\"/>\n", kLeft,
                          y, options.width, kRowHeight);
    for (const ComputeInterval& interval : report.ranks[static_cast<size_t>(r)].compute) {
      const Instruction& i = interval.instruction;
      const double bx = kLeft + interval.start * scale, bw = (interval.end - interval.start) * scale;
      absl::StrAppendFormat(&svg,
                            "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" stroke=\"white\" "
                            "stroke-width=\"0.8\"><title>%s: %g to %g</title></rect>\n",
                            bx, y, bw, kRowHeight, fill(i.op, i.chunk, v), to_string(i), interval.start, interval.end);
      if (bw < 11) continue;  // too narrow for a label
      const char* ink = lightness(i.chunk, v) < 50 ? "white" : "#111";
      absl::StrAppendFormat(&svg,
                            "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" font-weight=\"bold\" text-anchor=\"middle\" "
                            "fill=\"%s\">%d</text>\n",
                            bx + bw / 2, y + 15, ink, i.microbatch);
      absl::StrAppendFormat(&svg,
                            "<text x=\"%.2f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\" fill=\"%s\">c%d</text>\n",
                            bx + bw / 2, y + 28, ink, i.chunk);
    }
  }

  // Time axis.
  absl::StrAppendFormat(&svg, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", kLeft,
                        rows_bottom, kLeft + options.width, rows_bottom);
  const double step = tick_step(span);
  for (int k = 0; k * step <= span * (1 + 1e-9); ++k) {
    const double t = k * step, tx = kLeft + t * scale;
    absl::StrAppendFormat(&svg, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\"/>\n", tx,
                          rows_bottom, tx, rows_bottom + 5);
    absl::StrAppendFormat(&svg, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", tx,
                          rows_bottom + 18, t);
  }
  absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" fill=\"#444\">time</text>\n",
                        kLeft + options.width / 2, rows_bottom + 36);
  svg += "</svg>\n";
  return svg;
}

}  // namespace gpt::pipeline
