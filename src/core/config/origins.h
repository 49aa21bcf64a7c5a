// Where each config value came from (a file line, a --set override, or nowhere: a default), so
// that every error points at the place the user has to edit. Internal to src/core/config.
#pragma once

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace echo::config {

class Origins {
 public:
  explicit Origins(std::string source_name) : source_name_(std::move(source_name)) {}

  const std::string& source_name() const { return source_name_; }

  // `key` (dotted) is written on 1-based `line` of the file.
  void add_line(const std::string& key, int line) { lines_[key] = line; }

  // `key` was set, or created as a section, by `--set <text>`; it replaces whatever an earlier
  // override put beneath it.
  void add_override(const std::string& key, const std::string& text);

  // "x.yaml:7" for a key from the file, "--set comm.bits=3" for one from (or inside) an
  // override, "x.yaml" for a key left at its default.
  std::string where(const std::string& key) const;

  // Like where(key), for a key known to sit on `line` of the file (a duplicate's second line).
  std::string where_line(const std::string& key, int line) const;

  // For an error about a combination of keys: an override among them, else the key given
  // latest in the file, else `section`'s line, else the file name.
  std::string where_any(std::initializer_list<std::string_view> keys, const std::string& section) const;

 private:
  std::optional<std::string> override_of(const std::string& key) const;
  std::string at_line(int line) const;

  std::string source_name_;
  std::map<std::string, int> lines_;
  std::map<std::string, std::string> overrides_;  // dotted key -> "--set key=value"
};

// Throws echo::InputError "<where>: <what>" (no source location in what()).
[[noreturn]] void fail_at(const std::string& where, const std::string& what);

}  // namespace echo::config
