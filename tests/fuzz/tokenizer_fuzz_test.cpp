// Fuzz test of the tokenizer.json reader (HfTokenizer::from_json): a few hundred seeded
// mutants of a small valid tokenizer.json (ids at the edge of int, fractional ids, nested
// normalizer and pre_tokenizer Sequences, broken regexes) each end in success or in an
// echo::InputError, never a signal, a hang or another exception. An accepted tokenizer encodes
// and decodes a few texts (an encode may still refuse a byte its vocab lacks).
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "tokenizer/hf_tokenizer.h"

namespace echo::tokenizer {
namespace {

using Json = nlohmann::json;

// Qwen3's layout with a tiny vocabulary: NFC, Split(regex) + ByteLevel, BPE.
Json seed_tokenizer() {
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  Json vocab = Json::object();
  const char* pieces[] = {"h", "e", "l", "o", "Ġ", "w", "r", "d", "he", "ll", "llo", "hello", "Ġw", "or", "Ġwor", "1"};
  for (int i = 0; i < 16; ++i) vocab[pieces[i]] = i;
  return Json{{"added_tokens", Json::array({Json{{"id", 16}, {"content", "<|endoftext|>"}, {"special", true}},
                                            Json{{"id", 17}, {"content", "<|im_start|>"}, {"lstrip", true}}})},
              {"normalizer", {{"type", "Sequence"}, {"normalizers", Json::array({Json{{"type", "NFC"}}})}}},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers", Json::array({Json{{"type", "Split"},
                                                    {"pattern", {{"Regex", R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|\s+)"}}},
                                                    {"behavior", "Isolated"}},
                                               byte_level})}}},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", Json::array({"h e", "l l", "ll o", "he llo", "Ġ w", "o r", "Ġw or"})}}}};
}

TEST(TokenizerFuzz, MutantsEndInSuccessOrInputError) {
  const std::string seed = seed_tokenizer().dump(1);
  ASSERT_EQ(HfTokenizer::from_json(seed, "seed")->encode("hello world"), (std::vector<int32_t>{11, 14, 2, 7}));
  const std::vector<std::string> tokens = {R"("id")",
                                           R"("vocab")",
                                           R"("merges")",
                                           R"("type")",
                                           R"("Sequence")",
                                           R"("normalizers")",
                                           R"("pretokenizers")",
                                           R"("NFKC")",
                                           R"("Split")",
                                           R"("ByteLevel")",
                                           R"("Regex")",
                                           "2147483646",
                                           "2147483647",
                                           "134217728",
                                           "1.5",
                                           "-1",
                                           "1e10",
                                           "null",
                                           "true",
                                           "[]",
                                           "{}",
                                           R"("(")",
                                           R"("\\p{L}+")",
                                           R"("a b")",
                                           R"("<|endoftext|>")",
                                           R"({"type":"Sequence","normalizers":[)",
                                           R"({"type":"Sequence","pretokenizers":[)",
                                           ",",
                                           ":",
                                           "\"",
                                           "0",
                                           "16"};
  const fuzz::Mutator mutator(seed, tokens);
  const std::vector<std::string> texts = {"hello world", "<|endoftext|>hello", "", "h\xffllo\xc3", "11 1"};
  int encoded = 0;
  const fuzz::Outcome outcome = fuzz::run_mutants(mutator, 400, [&](const fuzz::Mutant& m) {
    const auto tok = HfTokenizer::from_json(m.bytes, "fuzz tokenizer.json");
    for (const std::string& text : texts) {
      std::vector<int32_t> ids;
      try {
        ids = tok->encode(text);
      } catch (const Error&) {
        continue;  // e.g. a byte the mutated vocab lacks, with no unk_token
      }
      ++encoded;
      const std::string back = tok->decode(ids);
      (void)back;
    }
  });
  std::printf("mutants: %d accepted, %d refused\n", outcome.accepted, outcome.refused);
  EXPECT_GT(outcome.accepted, 5);
  EXPECT_GT(outcome.refused, 150);
  EXPECT_GT(encoded, 10);
}

}  // namespace
}  // namespace echo::tokenizer
