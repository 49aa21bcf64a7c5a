// Seeded mutation of a valid input file for the parser fuzz tests: each mutant is a copy of the
// seed file with a few random edits (bit flips, interesting bytes and numbers, inserted,
// deleted, duplicated or truncated ranges, deep nesting), so the parser sees inputs that are
// almost valid and reach past its first checks. Deterministic: mutant i of seed s is the same
// on every machine, and its description says how to rebuild it.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace echo::fuzz {

struct Mutant {
  std::string bytes;
  std::string description;  // the edits, for the failure message
};

class Mutator {
 public:
  // `tokens`: strings worth splicing into this format (numbers at the edge of a type, quotes,
  // keys the parser looks for, ...).
  Mutator(std::string seed_file, std::vector<std::string> tokens)
      : seed_(std::move(seed_file)), tokens_(std::move(tokens)) {}

  // Mutant number `index`: 1 to 4 edits drawn from a generator seeded by `index`.
  Mutant make(uint64_t index) const {
    std::mt19937_64 gen(0x5DEECE66Dull * (index + 1) + 11);
    Mutant m{seed_, "mutant " + std::to_string(index) + ":"};
    const int edits = 1 + static_cast<int>(gen() % 4);
    for (int e = 0; e < edits; ++e) edit(gen, m);
    return m;
  }

 private:
  static size_t pick(std::mt19937_64& gen, size_t n) { return n == 0 ? 0 : static_cast<size_t>(gen() % n); }

  void edit(std::mt19937_64& gen, Mutant& m) const {
    std::string& s = m.bytes;
    const size_t at = pick(gen, s.size() + 1);
    switch (gen() % 9) {
      case 0: {  // flip one bit
        if (s.empty()) return;
        const size_t i = pick(gen, s.size());
        const int bit = static_cast<int>(gen() % 8);
        s[i] = static_cast<char>(s[i] ^ (1 << bit));
        m.description += " flip bit " + std::to_string(bit) + " of byte " + std::to_string(i) + ";";
        return;
      }
      case 1: {  // overwrite a byte with one that matters to parsers
        static constexpr char kBytes[] = {'\0', '\xff', '\x80', '"', '\\', '[', ']',  '{', '}', ',', ':',
                                          '-',  '.',    'e',    '0', '9',  ' ', '\n', '#', '&', '*'};
        if (s.empty()) return;
        const size_t i = pick(gen, s.size());
        s[i] = kBytes[pick(gen, sizeof kBytes)];
        m.description += " set byte " + std::to_string(i) + ";";
        return;
      }
      case 2:
      case 3: {  // splice in a token
        const std::string& t = tokens_[pick(gen, tokens_.size())];
        const bool replace = gen() % 2 == 0;
        const size_t len = replace ? std::min(t.size(), s.size() - at) : 0;
        s.replace(at, len, t);
        m.description +=
            (replace ? " overwrite at " : " insert at ") + std::to_string(at) + " token '" + printable(t) + "';";
        return;
      }
      case 4: {  // delete a range
        const size_t len = std::min<size_t>(1 + pick(gen, 16), s.size() - at);
        s.erase(at, len);
        m.description += " erase " + std::to_string(len) + " at " + std::to_string(at) + ";";
        return;
      }
      case 5: {  // duplicate a range
        const size_t len = std::min<size_t>(1 + pick(gen, 64), s.size() - at);
        s.insert(at, s.substr(at, len));
        m.description += " duplicate " + std::to_string(len) + " at " + std::to_string(at) + ";";
        return;
      }
      case 6: {  // truncate
        s.resize(at);
        m.description += " truncate to " + std::to_string(at) + ";";
        return;
      }
      case 7: {  // overwrite 8 bytes with an edge-of-range little-endian integer (binary headers)
        static constexpr uint64_t kValues[] = {0,          1,          2,           0x7f,        0xff,
                                               0xffff,     0x7fffffff, 0x80000000u, 0xffffffffu, 1ull << 32,
                                               1ull << 62, 1ull << 63, ~0ull,       ~0ull - 33,  ~0ull >> 1};
        if (s.size() < 8) return;
        const size_t i = pick(gen, s.size() - 7);
        const uint64_t v = kValues[pick(gen, std::size(kValues))];
        const int width = 1 << pick(gen, 4);  // 1, 2, 4 or 8 bytes
        for (int b = 0; b < width; ++b) s[i + b] = static_cast<char>(v >> (8 * b));
        m.description +=
            " put " + std::to_string(v) + " (" + std::to_string(width) + " bytes) at " + std::to_string(i) + ";";
        return;
      }
      default: {  // nest deeply: the stack overflows of recursive copy / dump / destruction
        const size_t depth = gen() % 2 ? 100'000 : 200 + pick(gen, 200);
        const char open = gen() % 2 ? '[' : '{';
        s.insert(at, std::string(depth, open));
        m.description +=
            " insert " + std::to_string(depth) + " '" + std::string(1, open) + "' at " + std::to_string(at) + ";";
        return;
      }
    }
  }

  static std::string printable(std::string_view t) {
    std::string out;
    for (char c : t.substr(0, 40)) out += (c >= 32 && c < 127) ? c : '?';
    return out;
  }

  std::string seed_;
  std::vector<std::string> tokens_;
};

}  // namespace echo::fuzz
