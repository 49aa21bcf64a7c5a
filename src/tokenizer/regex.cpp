// PCRE2 wrapper: compile with UTF | UCP, JIT when available, list matches.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <cctype>
#include <memory>

#include "core/error.h"
#include "core/log.h"

namespace echo::tokenizer {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<const char*>(buffer));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* p) const { pcre2_match_data_free(p); }
};

}  // namespace

std::string with_unicode_white_space(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];
    if (next == 's' || next == 'S') {
      out += next == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
    } else if (next == 'Q') {  // a quote runs to \E (or the end): nothing inside is a class escape
      const size_t end = pattern.find("\\E", i + 1);
      const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
      out.append(pattern.substr(i - 1, stop - (i - 1)));
      i = stop - 1;
    } else {
      out += '\\';
      out += next;
    }
  }
  return out;
}

Regex::Regex(std::string_view pattern, const std::string& what) : pattern_(pattern), what_(what) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  const std::string unicode = with_unicode_white_space(pattern);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(unicode.data()), unicode.size(), PCRE2_UTF | PCRE2_UCP,
                        &error_code, &error_offset, nullptr);
  // The offset counts in the pattern compiled, which the message quotes when it differs.
  ECHO_INPUT_CHECK(code_ != nullptr, "{}: regex {:?}{} does not compile at offset {}: {}", what, pattern,
                   unicode == pattern ? std::string() : fmt::format(" (compiled as {:?})", unicode), error_offset,
                   pcre2_message(error_code));
  // NOTE: pcre2_match uses the JIT code by itself once it exists; without a JIT (PCRE2 built
  // without it, or an architecture it lacks) the interpreter gives the same matches, slower.
  const int jit_rc = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  jit_ = jit_rc == 0;
  if (!jit_)
    ECHO_DEBUG("tokenizer", "{}: PCRE2 JIT unavailable ({}), using the interpreter", what, pcre2_message(jit_rc));
  pcre2_pattern_info(code_, PCRE2_INFO_CAPTURECOUNT, &num_groups_);
}

Regex::~Regex() { pcre2_code_free(code_); }

Regex::Regex(Regex&& other) noexcept
    : code_(other.code_),
      jit_(other.jit_),
      num_groups_(other.num_groups_),
      pattern_(std::move(other.pattern_)),
      what_(std::move(other.what_)) {
  other.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    pcre2_code_free(code_);
    code_ = other.code_;
    jit_ = other.jit_;
    num_groups_ = other.num_groups_;
    pattern_ = std::move(other.pattern_);
    what_ = std::move(other.what_);
    other.code_ = nullptr;
  }
  return *this;
}

void Regex::find_all(std::string_view subject, std::vector<Match>& out) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(pcre2_match_data_create_from_pattern(code_, nullptr));
  ECHO_CHECK(data != nullptr, "{}: out of memory for PCRE2 match data", what_);
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  std::size_t offset = 0;
  while (offset < subject.size()) {
    // NOTE: the caller guarantees valid UTF-8 (checking it again per call would be quadratic).
    int rc = pcre2_match(code_, text, subject.size(), offset, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's default 32 KiB stack can run out on a pathological run; the interpreter keeps
      // its backtracking frames on the heap.
      rc = pcre2_match(code_, text, subject.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    ECHO_CHECK(rc >= 0, "{}: matching regex {:?} failed at byte {}: {}", what_, pattern_, offset, pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const std::size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {
      // Skip an empty match: step over one whole UTF-8 character.
      offset = begin + 1;
      while (offset < subject.size() && (static_cast<unsigned char>(subject[offset]) & 0xC0) == 0x80) ++offset;
      continue;
    }
    Match m{begin, end, 0};
    for (uint32_t g = 1; g <= num_groups_ && g < static_cast<uint32_t>(rc); ++g) {
      if (ovector[2 * g] != PCRE2_UNSET) {
        m.group = static_cast<int>(g);
        break;
      }
    }
    out.push_back(m);
    offset = end;
  }
}

bool pcre2_jit_available() {
  uint32_t jit = 0;
  return pcre2_config(PCRE2_CONFIG_JIT, &jit) >= 0 && jit == 1;
}

std::string escape_regex(std::string_view literal) {
  std::string out;
  out.reserve(literal.size() * 2);
  for (const char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80 || std::isalnum(u)) {
      out.push_back(c);  // UTF-8 continuation and lead bytes, letters and digits are literal
    } else if (u < 0x20 || u == 0x7F) {
      out += fmt::format("\\x{{{:x}}}", u);
    } else {
      out.push_back('\\');  // a backslash before any ASCII punctuation or space is a literal
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace echo::tokenizer
