// The value rules of the key table and the YAML spelling of values.
#include "core/config/schema.h"

#include <yaml-cpp/yaml.h>

#include <cstdint>

namespace echo::config::schema {

Check at_least(double lo) {
  return {[lo](double v) { return v >= lo ? std::string() : fmt::format("must be >= {}", lo); }};
}

Check greater_than(double lo) {
  return {[lo](double v) { return v > lo ? std::string() : fmt::format("must be > {}", lo); }};
}

Check in_closed(double lo, double hi) {
  return {[lo, hi](double v) {
    return v >= lo && v <= hi ? std::string() : fmt::format("is out of range [{}, {}]", lo, hi);
  }};
}

Check in_half_open(double lo, double hi) {
  return {[lo, hi](double v) {
    return v >= lo && v < hi ? std::string() : fmt::format("is out of range [{}, {})", lo, hi);
  }};
}

Check fp32_decay() {
  return {[](double v) {
    if (!(v >= 0 && v < 1)) return std::string("is out of range [0, 1)");
    // The update runs in fp32: 0.99999999 passes [0, 1) as a double but is 1.0f there, so 1 - beta
    // is 0 and the moment never moves (training would silently do nothing).
    if (!(static_cast<float>(v) < 1.0f))
      return std::string(
          "rounds to 1 in fp32, which the update computes in (1 - beta would be 0); the largest "
          "usable value is 0.99999994");
    return std::string();
  }};
}

Check fp32_positive() {
  return {[](double v) {
    if (!(v > 0)) return std::string("must be > 0");
    // The update runs in fp32: 1e-46 is > 0 as a double but 0 there (eps 0 divides 0 by 0).
    if (!(static_cast<float>(v) > 0.0f))
      return std::string("is 0 in fp32, the precision it is used in; the smallest usable value is 1.4e-45");
    return std::string();
  }};
}

Check fp32_positive_at_most(double hi, std::string why) {
  return {[positive = fp32_positive(), hi, why = std::move(why)](double v) {
    if (std::string bad = positive.number(v); !bad.empty()) return bad;
    if (v > hi) return fmt::format("must be <= {} ({})", hi, why);
    return std::string();
  }};
}

Check fp32_off_or_positive() {
  return {[](double v) {
    if (v == 0) return std::string();
    if (!(v > 0)) return std::string("must be >= 0 (0 = off)");
    if (!(static_cast<float>(v) > 0.0f))
      return std::string(
          "is 0 in fp32, the precision it is used in, but is not 0 = off; the smallest usable value is 1.4e-45");
    return std::string();
  }};
}

Check power_of_two(double lo, double hi) {
  return {[lo, hi](double v) {
    const auto n = static_cast<std::int64_t>(v);
    const bool ok = v >= lo && v <= hi && n > 0 && (n & (n - 1)) == 0;
    return ok ? std::string() : fmt::format("must be a power of two in [{}, {}]", lo, hi);
  }};
}

Check one_of(std::vector<int> allowed) {
  return {[allowed = std::move(allowed)](double v) {
    std::string list;
    for (std::size_t i = 0; i < allowed.size(); ++i) {
      if (allowed[i] == v) return std::string();
      list += fmt::format("{}{}", i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ", allowed[i]);
    }
    return "must be " + list;
  }};
}

Check even_at_least(double lo, std::string why) {
  return {[lo, why = std::move(why)](double v) {
    if (v < lo) return fmt::format("must be >= {}", lo);
    if (static_cast<std::int64_t>(v) % 2 != 0) return fmt::format("must be even ({})", why);
    return std::string();
  }};
}

Check between(double lo, double hi, std::string why) {
  return {[lo, hi, why = std::move(why)](double v) {
    if (v < lo) return fmt::format("must be >= {}", lo);
    if (v > hi) return fmt::format("must be <= {} ({})", hi, why);
    return std::string();
  }};
}

Check even_between(double lo, double hi, std::string why_even, std::string why_hi) {
  return {[lo, hi, why_even = std::move(why_even), why_hi = std::move(why_hi)](double v) {
    if (v < lo) return fmt::format("must be >= {}", lo);
    if (v > hi) return fmt::format("must be <= {} ({})", hi, why_hi);
    if (static_cast<std::int64_t>(v) % 2 != 0) return fmt::format("must be even ({})", why_even);
    return std::string();
  }};
}

Check non_empty() { return {nullptr, true}; }

std::string dotted(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

std::string yaml_scalar(double value) {
  // fmt's "{}" is the shortest text that reads back to the same double ("1e-06", "1000000");
  // YAML 1.1 (python3-yaml) only takes it for a float when it has a '.', so add one.
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".na") != std::string::npos) return text;  // has '.', or is nan / inf
  const std::size_t exp = text.find('e');
  if (exp == std::string::npos) return text + ".0";
  return text.insert(exp, ".0");
}

std::string yaml_scalar(int value) { return fmt::format("{}", value); }

std::string yaml_scalar(std::uint64_t value) { return fmt::format("{}", value); }

std::string yaml_scalar(bool value) { return value ? "true" : "false"; }

std::string yaml_scalar(const std::string& value) {
  YAML::Emitter out;
  // NOTE: the emitter leaves "123", "true" or "~" plain; our reader would take them back as
  // strings, but other YAML readers (sweep scripts) would not, so quote anything that reads
  // as a number, a bool or null.
  const YAML::Node plain(value);
  double number = 0;
  bool flag = false;
  const bool ambiguous = value.empty() || value == "~" || value == "null" || value == "Null" || value == "NULL" ||
                         YAML::convert<double>::decode(plain, number) || YAML::convert<bool>::decode(plain, flag);
  if (ambiguous) out << YAML::DoubleQuoted;
  out << value;
  return out.c_str();
}

}  // namespace echo::config::schema
