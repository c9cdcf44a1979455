// A simulated schedule as an SVG Gantt chart: one row per pipeline rank, a box per forward (blue)
// and backward (green), a lighter shade for each later model chunk, each box labelled with its
// microbatch and chunk, and a time axis.
#pragma once

#include <string>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"

namespace gpt::pipeline {

struct GanttOptions {
  std::string title;  // drawn above the chart; empty for none
  double width = 1200;  // of the time axis, in pixels
};

std::string gantt_svg(const Schedule& schedule, const SimulationReport& report, const GanttOptions& options = {});

}  // namespace gpt::pipeline
