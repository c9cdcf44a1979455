// Command-line parsing shared by the tools: CLI11's help goes to stdout with exit 0, a parse error
// to stderr as one "error:" line with exit 1.
#pragma once

#include <cstdio>
#include <optional>

#include "CLI/CLI.hpp"

namespace gpt {

// nullopt when the command line parsed; otherwise the exit status the tool returns at once.
// `print`: false on all but one rank of an MPI job, so that the help or the error appears once.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, bool print = true) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (print) std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& error) {
    if (print) std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return std::nullopt;
}

}  // namespace gpt
