// CLI11's parse, with an unknown option reported as what it is. CLI11 checks required arguments
// before unknown ones, and an unknown option takes the word after it as its value, so
// `echo_train --bogus config.yaml` (or a bare `echo_train --bogus`) said "config is required"
// instead of naming --bogus.
#pragma once

#include <CLI/CLI.hpp>

namespace echo::apps {

// app.parse(argc, argv); throws CLI::ExtrasError naming the arguments not understood when there
// are any, whatever else is wrong.
// Also throws CLI::ValidationError for an option given an empty value (`--json ''`, `--data ""`,
// often an unset shell variable): no option of echo's tools means anything by one, and taken as
// given it became a file named '' or a silently ignored setting.
inline void parse_naming_unknown_options(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::RequiredError&) {
    // The parse has already set aside what it did not understand: that is the first mistake.
    if (!app.remaining().empty()) throw CLI::ExtrasError(app.get_name(), app.remaining());
    throw;
  }
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size_min() == 0) continue;  // a flag: it takes no value
    for (const std::string& value : opt->results())
      if (value.empty())
        throw CLI::ValidationError(opt->get_name(),
                                   "an empty value (an unset shell variable?): give one, or leave the option out");
  }
}

}  // namespace echo::apps
