// CLI11's parse, with an unknown option reported as what it is. CLI11 checks required arguments
// before unknown ones, and an unknown option takes the word after it as its value, so
// `echo_train --bogus config.yaml` (or a bare `echo_train --bogus`) said "config is required"
// instead of naming --bogus.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace echo::apps {

// The refusal of an empty value, naming the option.
inline CLI::ValidationError empty_value_error(const CLI::Option& opt) {
  return CLI::ValidationError(opt.get_name(), std::string("an empty value (an unset shell variable?): give one") +
                                                  (opt.get_positional() ? "" : ", or leave the option out"));
}

// Throws CLI::ValidationError naming an option given an empty value (`--json ''`, `--data ""`,
// `--json=`: most often an unset shell variable). No option of echo's tools means anything by one;
// taken as given it became a file named '' or a silently ignored setting, and CLI11 reads
// `--opt=` as "no value yet" and takes the NEXT word as the value (`--valid-prefix= --append-eos`
// wrote a dataset named --append-eos and dropped the flag), so that form is caught in argv first.
inline void refuse_empty_values(CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;  // what follows is positional
    if (word.size() > 3 && word.rfind("--", 0) == 0 && word.back() == '=') {
      const CLI::Option* opt = app.get_option_no_throw(word.substr(0, word.size() - 1));
      if (opt != nullptr && opt->get_expected_max() != 0) throw empty_value_error(*opt);
    }
    // `--tokens ''`: a number option's converter would refuse it first, in its own words.
    if (word.size() > 1 && word[0] == '-' && i + 1 < argc && argv[i + 1][0] == '\0') {
      const CLI::Option* opt = app.get_option_no_throw(word);
      if (opt != nullptr && opt->get_expected_max() != 0) throw empty_value_error(*opt);
    }
  }
}

// app.parse(argc, argv); throws CLI::ExtrasError naming the arguments not understood when there
// are any, whatever else is wrong, and refuses empty values (refuse_empty_values).
inline void parse_naming_unknown_options(CLI::App& app, int argc, char** argv) {
  refuse_empty_values(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RequiredError&) {
    // The parse has already set aside what it did not understand: that is the first mistake.
    if (!app.remaining().empty()) throw CLI::ExtrasError(app.get_name(), app.remaining());
    throw;
  }
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_max() == 0) continue;  // a flag: it takes no value
    for (const std::string& value : opt->results())
      if (value.empty()) throw empty_value_error(*opt);
  }
}

}  // namespace echo::apps
