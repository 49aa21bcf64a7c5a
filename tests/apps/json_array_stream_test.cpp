// for_each_array_element (apps/prep/json_array_stream.h) against nlohmann::json::parse of the
// whole text, the independent reference echo_prep used before it streamed: on random JSON arrays
// (nested objects and arrays, repeated keys, escapes, multi-byte UTF-8, integers beyond 64 bits,
// floats, random whitespace) the elements are equal in order, and on the same texts with a byte
// inserted, removed or replaced, either both accept with equal elements or both refuse with the
// same exception kind and, for a parse error, the same byte position.
#include "apps/prep/json_array_stream.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace echo::prep {
namespace {

using Json = nlohmann::json;

class RandomJson {
 public:
  explicit RandomJson(uint32_t seed) : gen_(seed) {}

  std::string array() {
    std::string out = ws() + "[";
    const int n = pick(0, 6);
    for (int i = 0; i < n; ++i) {
      if (i > 0) out += ',';
      out += ws();
      out += value(0);
      out += ws();
    }
    out += ']';
    out += ws();
    return out;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  std::string ws() {
    static const char* kSpace[] = {"", "", " ", "\n", "\t ", "\r\n  "};
    return kSpace[pick(0, 5)];
  }
  std::string string_literal() {
    static const char* kPieces[] = {"a",       "text",           " ",        "\\n",          "\\\"", "\\\\",
                                    "\\u00e9", "\\ud83d\\ude00", "\xc3\xa9", "\xe4\xb8\xad", "\\/",  "\\t",
                                    "key"};
    std::string s = "\"";
    for (int i = pick(0, 4); i > 0; --i) s += kPieces[pick(0, 12)];
    return s + "\"";
  }
  std::string number() {
    switch (pick(0, 5)) {
      case 0:
        return std::to_string(pick(-1000, 1000));
      case 1:
        return "18446744073709551615";
      case 2:
        return "-9223372036854775808";
      case 3:
        return "123456789012345678901234567890";  // beyond 64 bits: a float
      case 4:
        return "1.5e" + std::to_string(pick(-30, 30));
      default:
        return "-0.25";
    }
  }
  std::string value(int depth) {
    const int kind = depth > 3 ? pick(0, 3) : pick(0, 5);
    switch (kind) {
      case 0:
        return string_literal();
      case 1:
        return number();
      case 2: {
        static const char* kLiterals[] = {"true", "false", "null"};
        return kLiterals[pick(0, 2)];
      }
      case 3:
        return string_literal();
      case 4: {
        std::string out = "{";
        const int n = pick(0, 4);
        for (int i = 0; i < n; ++i) {
          // A small key set, so keys repeat (the last value wins, as in a whole-file parse).
          static const char* kKeys[] = {"\"text\"", "\"meta\"", "\"id\"", "\"text\""};
          if (i > 0) out += ',';
          out += ws();
          out += kKeys[pick(0, 3)];
          out += ws();
          out += ':';
          out += ws();
          out += value(depth + 1);
        }
        out += ws();
        out += '}';
        return out;
      }
      default: {
        std::string out = "[";
        const int n = pick(0, 4);
        for (int i = 0; i < n; ++i) {
          if (i > 0) out += ',';
          out += ws();
          out += value(depth + 1);
        }
        out += ws();
        out += ']';
        return out;
      }
    }
  }
  std::mt19937 gen_;
};

struct Outcome {
  bool ok = false;
  std::vector<Json> elements;
  int error_id = 0;       // nlohmann's exception id when refused
  size_t error_byte = 0;  // a parse error's byte
};

// What `parse` (filling o.elements, or throwing nlohmann's exceptions) gives.
template <class Parse>
Outcome outcome_of(Parse&& parse) {
  Outcome o;
  try {
    o.ok = parse(o);
  } catch (const Json::parse_error& e) {
    o.error_id = e.id;
    o.error_byte = e.byte;
  } catch (const Json::exception& e) {
    o.error_id = e.id;
  }
  return o;
}

Outcome streamed(const std::string& text) {
  return outcome_of([&](Outcome& o) {
    std::istringstream in(text);
    for_each_array_element(in, [&](Json&& element, size_t index) {
      EXPECT_EQ(index, o.elements.size());
      o.elements.push_back(std::move(element));
    });
    return true;
  });
}

// The reference: the whole text parsed at once; a top level that is not an array is refused as
// for_each_array_element refuses it (nlohmann accepts any value there).
Outcome whole(const std::string& text) {
  return outcome_of([&](Outcome& o) {
    const Json j = Json::parse(text);
    if (!j.is_array()) {
      o.error_id = 101;
      return false;
    }
    o.elements.assign(j.begin(), j.end());
    return true;
  });
}

void expect_same(const std::string& text) {
  const Outcome a = streamed(text), b = whole(text);
  ASSERT_EQ(a.ok, b.ok) << text;
  if (a.ok) {
    EXPECT_EQ(a.elements, b.elements) << text;
    return;
  }
  EXPECT_EQ(a.error_id, b.error_id) << text;
  // A top level that is not an array is refused by the stream as the first value arrives, with
  // no position of its own; every other parse error is at the byte the whole parse names.
  if (b.error_id != 101 || a.error_byte != 0) {
    EXPECT_EQ(a.error_byte, b.error_byte) << text;
  }
}

TEST(JsonArrayStream, RandomArraysGiveTheElementsOfAWholeParse) {
  RandomJson random(20261207);
  for (int i = 0; i < 3000; ++i) expect_same(random.array());
}

TEST(JsonArrayStream, MutatedArraysAreAcceptedOrRefusedAsByAWholeParse) {
  RandomJson random(7);
  std::mt19937 gen(11);
  static const char kBytes[] = "[]{},:\" \\ae1-.0nt\n";
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = random.array();
    const size_t at = std::uniform_int_distribution<size_t>(0, text.size())(gen);
    const char byte = kBytes[std::uniform_int_distribution<size_t>(0, sizeof kBytes - 2)(gen)];
    switch (gen() % 3) {
      case 0:
        text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), byte);
        break;
      case 1:
        if (at < text.size()) text.erase(at, 1);
        break;
      default:
        if (at < text.size()) text[at] = byte;
        break;
    }
    expect_same(text);
    refused += whole(text).ok ? 0 : 1;
  }
  EXPECT_GT(refused, 500) << "the mutations must exercise the error paths";
}

TEST(JsonArrayStream, TheTopLevelMustBeOneArray) {
  for (const char* text : {"5", "\"a\"", "{\"text\": \"a\"}", "[\"a\"] [\"b\"]", "[\"a\"", ""}) {
    SCOPED_TRACE(text);
    EXPECT_FALSE(streamed(text).ok);
  }
  const Outcome ok = streamed(" [ \"a\" , {\"text\": \"b\", \"text\": \"c\"} ] \n");
  ASSERT_TRUE(ok.ok);
  ASSERT_EQ(ok.elements.size(), 2u);
  EXPECT_EQ(ok.elements[1]["text"], "c");
}

}  // namespace
}  // namespace echo::prep
