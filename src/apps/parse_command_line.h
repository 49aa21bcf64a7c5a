// CLI11's parse, with an unknown option reported as what it is. CLI11 checks required arguments
// before unknown ones, and an unknown option takes the word after it as its value, so
// `echo_train --bogus config.yaml` (or a bare `echo_train --bogus`) said "config is required"
// instead of naming --bogus.
#pragma once

#include <CLI/CLI.hpp>

namespace echo::apps {

// app.parse(argc, argv); throws CLI::ExtrasError naming the arguments not understood when there
// are any, whatever else is wrong.
inline void parse_naming_unknown_options(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::RequiredError&) {
    // The parse has already set aside what it did not understand: that is the first mistake.
    if (!app.remaining().empty()) throw CLI::ExtrasError(app.get_name(), app.remaining());
    throw;
  }
}

}  // namespace echo::apps
