// Origins: mapping dotted keys to the file line or the --set that gave them.
#include "core/config/origins.h"

#include <fmt/format.h>

#include "core/input_excerpt.h"
#include "core/error.h"

namespace echo::config {

void Origins::add_override(const std::string& key, const std::string& text) {
  const std::string below = key + ".";
  for (auto it = overrides_.lower_bound(below); it != overrides_.end() && it->first.starts_with(below);)
    it = overrides_.erase(it);
  overrides_[key] = "--set " + input_excerpt(text);  // named in messages: a 10 MB value is not quoted whole
}

std::optional<std::string> Origins::override_of(const std::string& key) const {
  // The key itself, then each enclosing key: "comm.compensator.eta", "comm.compensator", "comm".
  for (std::string k = key;;) {
    if (auto it = overrides_.find(k); it != overrides_.end()) return it->second;
    const std::size_t dot = k.rfind('.');
    if (dot == std::string::npos) return std::nullopt;
    k.resize(dot);
  }
}

std::string Origins::at_line(int line) const { return fmt::format("{}:{}", source_name_, line); }

std::string Origins::where(const std::string& key) const {
  if (auto text = override_of(key)) return *text;
  if (auto it = lines_.find(key); it != lines_.end()) return at_line(it->second);
  return source_name_;
}

std::string Origins::where_line(const std::string& key, int line) const {
  if (auto text = override_of(key)) return *text;
  return at_line(line);
}

std::string Origins::where_any(std::initializer_list<std::string_view> keys, const std::string& section) const {
  int latest = 0;
  for (std::string_view key : keys) {
    if (auto text = override_of(std::string(key))) return *text;
    if (auto it = lines_.find(std::string(key)); it != lines_.end()) latest = std::max(latest, it->second);
  }
  if (latest > 0) return at_line(latest);
  return where(section);
}

// An input error: the message names the file line (or --set) and the key; echo's own source
// line would only confuse. Each message clips the input it quotes (core/input_excerpt.h); the bound
// on `what` here catches any that does not, so no message carries a whole 10 MB value between
// ranks. `where` is a file name (at most PATH_MAX) or an override Origins already clipped.
void fail_at(const std::string& where, const std::string& what) {
  constexpr std::size_t kMaxWhatBytes = 2000;
  ECHO_INPUT_FAIL("{}: {}", where, input_excerpt(what, kMaxWhatBytes));
}

}  // namespace echo::config
