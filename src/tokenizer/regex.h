// A compiled PCRE2 pattern (UTF + UCP, JIT-compiled when PCRE2 has a JIT) that lists the
// non-overlapping matches in a subject. Used for the pre-tokenizer's Split regex and to find
// added tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace echo::tokenizer {

struct Match {
  std::size_t begin = 0;
  std::size_t end = 0;
  int group = 0;  // the lowest-numbered capture group that took part (0 when none did)
};

class Regex {
 public:
  // Compiles with_unicode_white_space(pattern). Throws echo::Error with PCRE2's message and the
  // offset in the pattern. `what` names the pattern's origin in that message (e.g.
  // "tokenizer.json 'x': pre_tokenizer Split").
  Regex(std::string_view pattern, const std::string& what);
  ~Regex();
  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&& other) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every match in `subject` (valid UTF-8: callers repair it first), left to right.
  // Empty matches are skipped. Thread-safe: each call has its own match data.
  void find_all(std::string_view subject, std::vector<Match>& out) const;

  bool jit_compiled() const { return jit_; }
  const std::string& pattern() const { return pattern_; }

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
  uint32_t num_groups_ = 0;
  std::string pattern_;
  std::string what_;
};

// `pattern` with \s and \S as Unicode's White_Space (\p{White_Space}, \P{White_Space}), inside and
// outside classes, escapes and \Q...\E quotes left as they are. NOTE: under UCP, PCRE2's \s also
// matches U+180E (MONGOLIAN VOWEL SEPARATOR, White_Space until Unicode 6.3); the Rust tokenizers'
// Oniguruma, Rust's regex and JavaScript do not, so Qwen's `\s+(?!\S)` split differently there.
std::string with_unicode_white_space(std::string_view pattern);

// Whether this PCRE2 build has a JIT compiler for this machine (PCRE2_CONFIG_JIT).
bool pcre2_jit_available();

// `literal` as a PCRE2 pattern that matches exactly those bytes.
std::string escape_regex(std::string_view literal);

}  // namespace echo::tokenizer
