// Tests of the tokenizer.json BPE tokenizer on a hand-written tiny vocabulary whose ids are
// worked out by hand below: merge order and ties, Qwen's digit split, NFC, added tokens (never
// split, longest first, lstrip/rstrip, normalized), GPT-2's layout, and load errors; BpeModel's
// bound on one pre-token.
#include "tokenizer/hf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>

#include "../support/scratch_dir.h"
#include "../support/test_util.h"
#include "core/error.h"
#include "tokenizer/bpe_model.h"

namespace echo::tokenizer {

using echo::testing::error_of;
using echo::testing::kind_and_what_of;
using echo::testing::kNoErrorThrown;
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Byte-level spellings: Ġ is the space byte, Ċ the newline, "Ã©" the two bytes of "é" (C3 A9).
Json tiny_vocab() {
  return Json{{"h", 0},  {"e", 1},   {"l", 2},    {"o", 3},      {"Ġ", 4},   {"w", 5},   {"r", 6},     {"d", 7},
              {"he", 8}, {"ll", 9},  {"llo", 10}, {"hello", 11}, {"Ġw", 12}, {"or", 13}, {"Ġwor", 14}, {"Ã", 15},
              {"©", 16}, {"Ã©", 17}, {"1", 18},   {"2", 19},     {"!", 20},  {"Ċ", 21},  {"12", 22},   {"ĠĠ", 23}};
}

// Rank order: merge i has rank i.
Json tiny_merges() {
  return Json::array({Json::array({"h", "e"}), Json::array({"l", "l"}), Json::array({"ll", "o"}),
                      Json::array({"he", "llo"}), Json::array({"Ġ", "w"}), Json::array({"o", "r"}),
                      Json::array({"Ġw", "or"}), Json::array({"Ã", "©"}), Json::array({"Ġ", "Ġ"}),
                      Json::array({"1", "2"})});
}

Json added(const std::string& content, int id, bool special, bool normalized = false, bool lstrip = false,
           bool rstrip = false) {
  return Json{{"id", id},         {"content", content},       {"single_word", false}, {"lstrip", lstrip},
              {"rstrip", rstrip}, {"normalized", normalized}, {"special", special}};
}

// Laid out like Qwen3's tokenizer.json: NFC, Split(Qwen regex) + ByteLevel(use_regex false).
Json qwen_like() {
  const Json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  return Json{{"version", "1.0"},
              {"added_tokens", Json::array({added("<|endoftext|>", 30, true), added("<|end|>", 31, true),
                                            added("[X]", 32, false, false, true, true), added("ö", 33, false, true),
                                            added("<|end|>!", 34, true)})},
              {"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers", Json::array({Json{{"type", "Split"},
                                                    {"pattern", {{"Regex", kQwenPattern}}},
                                                    {"behavior", "Isolated"},
                                                    {"invert", false}},
                                               byte_level})}}},
              {"post_processor", byte_level},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", tiny_vocab()},
                {"merges", tiny_merges()}}}};
}

// Laid out like GPT-2's: no normalizer, ByteLevel(add_prefix_space, use_regex), "a b" merges.
Json gpt2_like() {
  Json j = qwen_like();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  Json merges = Json::array();
  for (const Json& m : tiny_merges()) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  j["model"]["merges"] = merges;
  j["added_tokens"] = Json::array({added("<|endoftext|>", 30, true)});
  return j;
}

std::unique_ptr<HfTokenizer> make(const Json& j) { return HfTokenizer::from_json(j.dump(), "test tokenizer.json"); }

std::vector<int32_t> ids_of(const HfTokenizer& tok, std::string_view text) { return tok.encode(text); }

TEST(HfTokenizer, HandWorkedMerges) {
  const auto tok = make(qwen_like());
  // "hello": h e l l o -> (h e, rank 0) he l l o -> (l l, 1) he ll o -> (ll o, 2) he llo
  //          -> (he llo, 3) hello.  " world": Ġ w o r l d -> (Ġ w, 4) Ġw o r l d -> (o r, 5)
  //          Ġw or l d -> (Ġw or, 6) Ġwor l d.
  EXPECT_THAT(ids_of(*tok, "hello world"), ElementsAre(11, 14, 2, 7));
  // Two equal-rank pairs (l l at 0 and 1): the leftmost merges first.
  EXPECT_THAT(ids_of(*tok, "lll"), ElementsAre(9, 2));
  // One pre-token, two words' worth of merges.
  EXPECT_THAT(ids_of(*tok, "hellohello"), ElementsAre(11, 11));
  // \p{N} splits digits one by one, so the "1 2" merge never applies.
  EXPECT_THAT(ids_of(*tok, "12"), ElementsAre(18, 19));
  // "\s*[\r\n]+" keeps the spaces with the newline; Ġ Ġ merges.
  EXPECT_THAT(ids_of(*tok, "  \n"), ElementsAre(23, 21));
  EXPECT_EQ(tok->decode(ids_of(*tok, "hello world")), "hello world");
  EXPECT_TRUE(ids_of(*tok, "").empty());
  // The cache must give the same answer the second time.
  EXPECT_THAT(ids_of(*tok, "hello world"), ElementsAre(11, 14, 2, 7));
}

TEST(HfTokenizer, NormalizesToNfcBeforeMerging) {
  const auto tok = make(qwen_like());
  // "é" decomposed (e + U+0301) composes to C3 A9 = "Ã©".
  EXPECT_THAT(ids_of(*tok, "e\xcc\x81"), ElementsAre(17));
  EXPECT_THAT(ids_of(*tok, "\xc3\xa9"), ElementsAre(17));
  EXPECT_EQ(tok->decode(ids_of(*tok, "e\xcc\x81")), "\xc3\xa9");
}

TEST(HfTokenizer, AddedTokensAreNeverSplit) {
  const auto tok = make(qwen_like());
  EXPECT_THAT(ids_of(*tok, "hello<|endoftext|>world"), ElementsAre(11, 30, 5, 13, 2, 7));
  EXPECT_THAT(ids_of(*tok, "<|endoftext|><|endoftext|>"), ElementsAre(30, 30));
  EXPECT_THAT(ids_of(*tok, "<|endoftext|>"), ElementsAre(30));
  // Longest first: "<|end|>!" is one token, "<|end|>" followed by a word is another.
  EXPECT_THAT(ids_of(*tok, "<|end|>!"), ElementsAre(34));
  EXPECT_THAT(ids_of(*tok, "<|end|>hello"), ElementsAre(31, 11));
  EXPECT_EQ(tok->decode(ids_of(*tok, "hello<|endoftext|>world")), "hello<|endoftext|>world");
  EXPECT_EQ(tok->eos_id(), 30);
  EXPECT_EQ(tok->vocab_size(), 35);
  EXPECT_EQ(tok->token_to_id("<|end|>"), 31);
  EXPECT_EQ(tok->token_to_id(" w"), 12);
  EXPECT_EQ(tok->token_to_id("nope"), std::nullopt);
}

TEST(HfTokenizer, AddedTokenStripAndNormalizedFlags) {
  const auto tok = make(qwen_like());
  // [X] has lstrip and rstrip: the spaces around it are part of its match.
  EXPECT_THAT(ids_of(*tok, "hello [X] hello"), ElementsAre(11, 32, 11));
  // "ö" is a normalized added token: its decomposed spelling matches after NFC.
  EXPECT_THAT(ids_of(*tok, "hello o\xcc\x88"), ElementsAre(11, 4, 33));
  EXPECT_THAT(ids_of(*tok, "\xc3\xb6"), ElementsAre(33));
}

TEST(HfTokenizer, Gpt2Layout) {
  const auto tok = make(gpt2_like());
  // add_prefix_space: " hello world" -> " hello" " world"; (Ġ h) has no merge.
  EXPECT_THAT(ids_of(*tok, "hello world"), ElementsAre(4, 11, 14, 2, 7));
  // GPT-2's " ?\p{N}+" keeps digits together, so "1 2" merges.
  EXPECT_THAT(ids_of(*tok, "12"), ElementsAre(4, 22));
  EXPECT_EQ(tok->decode(ids_of(*tok, "hello world")), " hello world");
}

TEST(HfTokenizer, IllFormedUtf8BecomesReplacementCharacter) {
  Json j = qwen_like();
  // U+FFFD is EF BF BD = "ï¿½" in byte-level characters.
  j["model"]["vocab"]["ï"] = 40;
  j["model"]["vocab"]["¿"] = 41;
  j["model"]["vocab"]["½"] = 42;
  const auto tok = make(j);
  EXPECT_THAT(ids_of(*tok, "\xff"), ElementsAre(40, 41, 42));
  EXPECT_EQ(tok->decode(ids_of(*tok, "h\xc3")), "h\xef\xbf\xbd");
}

TEST(HfTokenizer, ByteMissingFromVocabIsAnErrorWithoutUnk) {
  const auto tok = make(qwen_like());
  EXPECT_THAT(error_of([&] { tok->encode("z"); }), HasSubstr("byte 0x7a has no token"));
  Json j = qwen_like();
  j["model"]["unk_token"] = "!";
  EXPECT_THAT(ids_of(*make(j), "hz"), ElementsAre(0, 20));
}

// A pre-token of 2^31 bytes is refused by name before any of it is read (merge_word's int32
// indices would wrap). The word is a view of untouched, unreserved pages: no 2 GiB is allocated.
TEST(BpeModel, APreTokenOf2GiBIsRefusedByName) {
  const std::size_t size = std::size_t{1} << 31;
  void* pages = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(pages, MAP_FAILED);
  const BpeModel model({{"a", 0}}, {}, BpeOptions{}, "tokenizer.json");
  std::vector<int32_t> ids;
  EXPECT_THAT(error_of([&] { model.encode_word(std::string_view(static_cast<const char*>(pages), size), ids); }),
              HasSubstr("tokenizer.json: a pre-token of 2147483648 bytes (2 GiB or more without a space"));
  EXPECT_TRUE(ids.empty());
  munmap(pages, size);
  model.encode_word("a", ids);
  EXPECT_THAT(ids, ElementsAre(0));
}

TEST(HfTokenizer, DecodeRejectsUnknownIds) {
  const auto tok = make(qwen_like());
  const std::vector<int32_t> hole = {24};  // between the vocab (0..23) and the added tokens (30..)
  const std::vector<int32_t> past_end = {35};
  EXPECT_THAT(error_of([&] { tok->decode(hole); }), HasSubstr("id 24 at position 0 is not in the vocabulary"));
  EXPECT_THAT(error_of([&] { tok->decode(past_end); }), HasSubstr("not in the vocabulary"));
}

class HfTokenizerFile : public ::testing::Test {
 protected:
  echo::testing::ScratchDir dir_;
};

TEST_F(HfTokenizerFile, LoadsFromFileAndDirectory) {
  const std::string path = dir_.write("tokenizer.json", qwen_like().dump());
  EXPECT_THAT(load_tokenizer(path)->encode("hello world"), ElementsAre(11, 14, 2, 7));
  EXPECT_THAT(load_tokenizer(dir_.str())->encode("hello world"), ElementsAre(11, 14, 2, 7));
}

TEST_F(HfTokenizerFile, ErrorsNameTheFile) {
  const std::string missing = dir_.path("nope.json");
  EXPECT_THAT(error_of([&] { load_tokenizer(missing); }), HasSubstr("'" + missing + "' does not exist"));
  EXPECT_THAT(error_of([&] { load_tokenizer(""); }), HasSubstr("tokenizer spec is empty"));
  // A symbolic link at the name is there: one that leads nowhere, or round in a loop, is named as
  // such (it was "does not exist").
  const std::string dangling = dir_.path("dangling.json"), loop = dir_.path("loop.json");
  std::filesystem::create_symlink(missing, dangling);
  std::filesystem::create_symlink(loop, loop);
  EXPECT_EQ(error_of([&] { load_tokenizer(dangling); }),
            "cannot read tokenizer.json '" + dangling + "': it is a symbolic link to '" + missing +
                "', which does not exist");
  EXPECT_EQ(error_of([&] { load_tokenizer(loop); }),
            "cannot read tokenizer.json '" + loop +
                "': it is a symbolic-link loop (too many levels of symbolic links)");

  const std::string bad_json = dir_.write("bad.json", "{\"model\": ");
  EXPECT_THAT(error_of([&] { load_tokenizer(bad_json); }), HasSubstr("'" + bad_json + "' is not valid JSON"));

  const std::string not_tokenizer = dir_.write("other.json", "{\"hello\": 1}");
  EXPECT_THAT(error_of([&] { load_tokenizer(not_tokenizer); }), HasSubstr("has no \"model\" object"));

  Json word_piece = qwen_like();
  word_piece["model"]["type"] = "WordPiece";
  const std::string wp = dir_.write("wp.json", word_piece.dump());
  EXPECT_THAT(error_of([&] { load_tokenizer(wp); }),
              HasSubstr("tokenizer.json '" + wp + "': model type \"WordPiece\" is not supported"));

  Json bad_merge = qwen_like();
  bad_merge["model"]["merges"].push_back(Json::array({"h", "q"}));
  const std::string bm = dir_.write("bm.json", bad_merge.dump());
  EXPECT_THAT(error_of([&] { load_tokenizer(bm); }), HasSubstr("merge 10 (\"h\" \"q\") uses a token missing"));

  Json lowercase = qwen_like();
  lowercase["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_THAT(error_of([&] { make(lowercase); }), HasSubstr("normalizer type \"Lowercase\" is not supported"));

  Json metaspace = qwen_like();
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  EXPECT_THAT(error_of([&] { make(metaspace); }), HasSubstr("pre_tokenizer type \"Metaspace\" is not supported"));

  Json bad_regex = qwen_like();
  bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_THAT(error_of([&] { make(bad_regex); }), HasSubstr("does not compile"));

  Json wrong_type = qwen_like();
  wrong_type["model"]["vocab"]["h"] = "zero";
  EXPECT_THAT(error_of([&] { make(wrong_type); }), HasSubstr("test tokenizer.json is malformed"));

  Json no_eos = qwen_like();
  no_eos["added_tokens"] = Json::array();
  EXPECT_THAT(error_of([&] { make(no_eos); }), HasSubstr("no EOS token found"));
}

// A Sequence nested `depth` deep around `leaf`, under `list_key` ("normalizers" or "pretokenizers"),
// built as text: a Json value that deep could not even be destroyed safely by the test.
std::string nested_sequence(const std::string& list_key, const std::string& leaf, int depth) {
  std::string text;
  for (int i = 0; i < depth; ++i) text += R"({"type":"Sequence",")" + list_key + R"(":[)";
  text += leaf;
  for (int i = 0; i < depth; ++i) text += "]}";
  return text;
}

// tokenizer.json with `key` replaced by the raw JSON text `value`.
std::string with_raw(Json j, const std::string& key, const std::string& value) {
  j[key] = "@@RAW@@";
  std::string text = j.dump();
  text.replace(text.find("\"@@RAW@@\""), 9, value);
  return text;
}

TEST(HfTokenizer, DeeplyNestedSequencesAreRefusedNotAStackOverflow) {
  // Before: the recursive parse and copy of a 100,000-deep Sequence overflowed the stack.
  for (const auto& [key, list_key, leaf] :
       {std::tuple<std::string, std::string, std::string>{"normalizer", "normalizers", R"({"type":"NFC"})"},
        {"pre_tokenizer", "pretokenizers", R"({"type":"ByteLevel","use_regex":false})"}}) {
    SCOPED_TRACE(key);
    const std::string text = with_raw(qwen_like(), key, nested_sequence(list_key, leaf, 100'000));
    const std::string msg = kind_and_what_of([&] { HfTokenizer::from_json(text, "deep.json"); });
    EXPECT_THAT(msg, HasSubstr("input: deep.json nests arrays/objects more than 128 deep"));
    EXPECT_THAT(msg, Not(HasSubstr("[at ")));
    // A modest nesting, as real files have, still loads and behaves as the flat one.
    const auto tok = HfTokenizer::from_json(with_raw(qwen_like(), key, nested_sequence(list_key, leaf, 20)), "ok");
    if (key == "normalizer") {
      EXPECT_THAT(tok->encode("e\xcc\x81"), ElementsAre(17));
    }
  }
}

TEST(HfTokenizer, IdsMustBeDistinctBoundedIntegers) {
  const auto error_with = [](const std::function<void(Json&)>& edit) {
    Json j = qwen_like();
    edit(j);
    return kind_and_what_of([&] { make(j); });
  };
  // 1.5 used to be truncated to 1, silently giving "e" and "h" ... the same id.
  EXPECT_THAT(error_with([](Json& j) { j["model"]["vocab"]["e"] = 1.5; }),
              HasSubstr("input: test tokenizer.json is malformed: model.vocab[\"e\"] = 1.5 is not an integer id"));
  EXPECT_THAT(error_with([](Json& j) { j["model"]["vocab"]["e"] = 0; }),
              HasSubstr("input: test tokenizer.json: model.vocab[\"e\"] and model.vocab[\"h\"] share id 0"));
  EXPECT_THAT(error_with([](Json& j) { j["added_tokens"][1]["id"] = 30; }),
              HasSubstr("added tokens \"<|endoftext|>\" and \"<|end|>\" share id 30"));
  EXPECT_THAT(error_with([](Json& j) { j["added_tokens"][1]["id"] = 11; }),
              HasSubstr("added token \"<|end|>\" has id 11, which model.vocab gives to \"hello\""));
  EXPECT_THAT(error_with([](Json& j) { j["added_tokens"][1]["id"] = -3; }),
              HasSubstr("the id of added token \"<|end|>\" = -3 is a negative id"));
  // 2^31 - 2 asked for a 64 GB id table (std::bad_alloc), 2^27 for 4 GB.
  EXPECT_THAT(error_with([](Json& j) { j["added_tokens"][1]["id"] = 2147483646; }),
              HasSubstr("the id of added token \"<|end|>\" = 2147483646 is too large: ids up to 2147483646 would "
                        "need a 68.7 GB id table; ids must be at most 16777215"));
  EXPECT_THAT(error_with([](Json& j) { j["model"]["vocab"]["e"] = 134217728; }),
              HasSubstr("model.vocab[\"e\"] = 134217728 is too large: ids up to 134217728 would need a 4.3 GB"));
  // GPT-2 lists <|endoftext|> in the vocab and as an added token with the same id: still fine.
  Json gpt2 = gpt2_like();
  gpt2["model"]["vocab"]["<|endoftext|>"] = 30;
  EXPECT_EQ(make(gpt2)->eos_id(), 30);
}

}  // namespace
}  // namespace echo::tokenizer
