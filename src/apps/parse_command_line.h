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

// CLI11 (2.1) converts an integer with strtoll's base 0: `--seed 010` ran seed 8, `--batches 0x10`
// 16 batches, and `--seed 09` failed as "Could not convert". Every integer option (CLI11's type
// INT or UINT) takes decimal digits, a sign allowed, and no leading zero.
inline void require_decimal_integers(CLI::App& app) {
  const CLI::Validator decimal(
      [](std::string& text) {
        const size_t digits = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
        const bool all_digits =
            text.size() > digits && text.find_first_not_of("0123456789", digits) == std::string::npos;
        if (!all_digits) return text + " is not a whole number in decimal digits";
        if (text[digits] == '0' && text.size() > digits + 1)
          return text + " has a leading zero, which would read it as octal: write it without";
        return std::string();
      },
      "");
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    const std::string base = type.substr(0, type.find(':'));
    if (base == "INT" || base == "UINT") opt->check(decimal);
  }
}

// app.parse(argc, argv); throws CLI::ExtrasError naming the arguments not understood when there
// are any, whatever else is wrong, and refuses empty values (refuse_empty_values) and integers
// that are not plain decimal (require_decimal_integers).
inline void parse_naming_unknown_options(CLI::App& app, int argc, char** argv) {
  refuse_empty_values(app, argc, argv);
  require_decimal_integers(app);
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
