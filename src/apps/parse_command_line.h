// CLI11's parse, with an unknown option reported as what it is. CLI11 checks required arguments
// before unknown ones, and an unknown option takes the word after it as its value, so
// `echo_train --bogus config.yaml` (or a bare `echo_train --bogus`) said "config is required"
// instead of naming --bogus.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

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

// CLI11 (2.1) converts an integer with strtoll's base 0 (`--seed 010` ran seed 8, `--batches 0x10`
// 16 batches, `--seed 09` failed as "Could not convert"), an unsigned one with strtoull (which
// reads "-1" as 2^64 - 1), and clamps a 64-bit value out of range to the nearest end without a
// word. Every integer option (CLI11's type INT or UINT) takes decimal digits and no leading zero;
// an INT a sign and a value in int64's range, a UINT no minus and a value up to 2^64 - 1. A
// narrower type's range is CLI11's own check after this one.
// Which integer an option holds, by CLI11's type name ("INT", "UINT", "INT:..." with a validator).
enum class IntegerKind { none, signed_int, unsigned_int };
inline IntegerKind integer_kind(const CLI::Option& opt) {
  const std::string type = opt.get_type_name();
  const std::string base = type.substr(0, type.find(':'));
  return base == "INT" ? IntegerKind::signed_int : base == "UINT" ? IntegerKind::unsigned_int : IntegerKind::none;
}

// std::from_chars of a whole decimal `text`, which may start with '+' (from_chars takes a '-'
// but not a '+'); the error code.
template <class T>
std::errc decimal_value(const std::string& text, T& value) {
  const char* first = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  return std::from_chars(first, text.data() + text.size(), value).ec;
}

inline std::string why_not_decimal_integer(const std::string& text, bool is_unsigned) {
  const bool minus = !text.empty() && text[0] == '-';
  const size_t digits = !text.empty() && (minus || text[0] == '+') ? 1 : 0;
  const bool all_digits = text.size() > digits && text.find_first_not_of("0123456789", digits) == std::string::npos;
  if (is_unsigned && (minus || !all_digits)) return text + " is not a whole number >= 0";
  if (!all_digits) return text + " is not a whole number in decimal digits";
  if (text[digits] == '0' && text.size() > digits + 1)
    return text + " has a leading zero, which would read it as octal: write it without";
  if (is_unsigned) {
    std::uint64_t value = 0;
    if (decimal_value(text, value) == std::errc::result_out_of_range)
      return text + " is above 2^64 - 1 = 18446744073709551615";
  } else {
    std::int64_t value = 0;
    if (decimal_value(text, value) == std::errc::result_out_of_range)
      return text + " is outside [-2^63, 2^63 - 1] = [-9223372036854775808, 9223372036854775807]";
  }
  return std::string();
}

inline void require_decimal_integers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const IntegerKind kind = integer_kind(*opt);
    if (kind == IntegerKind::none) continue;
    const bool is_unsigned = kind == IntegerKind::unsigned_int;
    opt->check(
        CLI::Validator([is_unsigned](std::string& text) { return why_not_decimal_integer(text, is_unsigned); }, ""));
  }
}

// After require_decimal_integers, an integer CLI11 cannot convert is a 64-bit value that does
// not fit the option's narrower variable, which in echo's programs is 32 bits. CLI11 says only
// "Could not convert: --opt = 3000000000" (`what`); this names the bound. nullopt when the option
// `what` names is not an integer one holding such a value (the error was another one).
inline std::optional<CLI::ValidationError> narrow_integer_error(const CLI::App& app, const std::string& what) {
  for (const CLI::Option* opt : app.get_options()) {
    if (what.find(": " + opt->get_name() + " = ") == std::string::npos) continue;
    const IntegerKind kind = integer_kind(*opt);
    if (kind == IntegerKind::none) continue;
    const bool is_unsigned = kind == IntegerKind::unsigned_int;
    for (const std::string& text : opt->results()) {
      if (!why_not_decimal_integer(text, is_unsigned).empty()) continue;
      std::int64_t value = 0;  // the check above bounds a UINT by 2^64 - 1 only
      const bool beyond_int64 = decimal_value(text, value) != std::errc();
      if (is_unsigned && (beyond_int64 || value > std::int64_t{UINT32_MAX}))
        return CLI::ValidationError(opt->get_name(),
                                    text + " is above 2^32 - 1 = 4294967295, the largest this option holds");
      if (!is_unsigned && value > INT32_MAX)
        return CLI::ValidationError(opt->get_name(),
                                    text + " is above 2^31 - 1 = 2147483647, the largest this option holds");
      if (!is_unsigned && value < INT32_MIN)
        return CLI::ValidationError(opt->get_name(),
                                    text + " is below -2^31 = -2147483648, the smallest this option holds");
    }
  }
  return std::nullopt;
}

// app.parse(argc, argv); throws CLI::ExtrasError naming the arguments not understood when there
// are any, whatever else is wrong, and refuses empty values (refuse_empty_values) and integers
// that are not plain decimal (require_decimal_integers) or do not fit their option
// (narrow_integer_error).
inline void parse_naming_unknown_options(CLI::App& app, int argc, char** argv) {
  refuse_empty_values(app, argc, argv);
  require_decimal_integers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RequiredError&) {
    // The parse has already set aside what it did not understand: that is the first mistake.
    if (!app.remaining().empty()) throw CLI::ExtrasError(app.get_name(), app.remaining());
    throw;
  } catch (const CLI::ConversionError& e) {
    if (auto narrow = narrow_integer_error(app, e.what())) throw *narrow;
    throw;
  }
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_max() == 0) continue;  // a flag: it takes no value
    for (const std::string& value : opt->results())
      if (value.empty()) throw empty_value_error(*opt);
  }
}

}  // namespace echo::apps
