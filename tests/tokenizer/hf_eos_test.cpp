// The EOS rule of tokenizer/hf_eos.h on small tokenizer.json files: an ordinary vocab entry
// spelled "</s>" is never taken (before: it silently was), a non-special added token neither;
// tokenizer_config.json's eos_token and --eos-token name it instead; special <|endoftext|> wins
// over Qwen's eos_token <|im_end|>; and the real Qwen3 tokenizer still gives 151643.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../support/log_capture.h"
#include "../support/scratch_dir.h"
#include "../support/test_util.h"
#include "tokenizer/hf_tokenizer.h"

namespace echo::tokenizer {
namespace {

namespace fs = std::filesystem;
using echo::testing::error_of;
using echo::testing::kind_and_what_of;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

Json added(const std::string& content, int id, bool special) {
  return Json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// Byte-level BPE over one pre-token (ByteLevel without its regex), whose merges build "</s>" out
// of text: the vocab entry "</s>" (id 6) is what encoding the HTML-ish text "</s>" gives.
Json html_vocab(Json added_tokens = Json::array()) {
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  return Json{
      {"added_tokens", added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"<", 0}, {"/", 1}, {"s", 2}, {">", 3}, {"</", 4}, {"</s", 5}, {"</s>", 6}, {"h", 7}}},
        {"merges", Json::array({Json::array({"<", "/"}), Json::array({"</", "s"}), Json::array({"</s", ">"})})}}}};
}

class HfEos : public ::testing::Test {
 protected:
  std::string tokenizer_json(const Json& j) { return dir_.write("tokenizer.json", j.dump()); }
  echo::testing::ScratchDir dir_;
};

TEST_F(HfEos, AnOrdinaryVocabEntryIsRefused) {
  const std::string path = tokenizer_json(html_vocab());
  // The reason: BPE produces it from text inside documents.
  EXPECT_THAT(HfTokenizer::from_file(path, "</s>")->encode("</s>"), ElementsAre(6));
  const std::string msg = kind_and_what_of([&] { load_tokenizer(path); });
  EXPECT_THAT(msg, HasSubstr("input: tokenizer.json '" + path +
                             "': no EOS token found: none of <|endoftext|>, "
                             "<|end_of_text|>, </s>, <eos> is a special added token; \"</s>\" is only an ordinary "
                             "vocab entry (id 6)"));
  EXPECT_THAT(msg,
              HasSubstr("there is no tokenizer_config.json beside it ('" + dir_.path("tokenizer_config.json") + "')"));
  EXPECT_THAT(msg, HasSubstr("echo_prep --eos-token TEXT"));
  // From text there is no file beside it to read.
  EXPECT_THAT(error_of([&] { HfTokenizer::from_json(html_vocab().dump(), "t.json"); }),
              HasSubstr("and no tokenizer_config.json was given"));
}

TEST_F(HfEos, TokenizerConfigNamesTheEos) {
  const std::string path = tokenizer_json(html_vocab());
  const std::string config = dir_.write("tokenizer_config.json", R"({"eos_token": "</s>", "bos_token": null})");
  echo::testing::LogCapture log;
  const auto tok = HfTokenizer::from_file(path);
  EXPECT_EQ(tok->eos_id(), 6);
  EXPECT_EQ(tok->eos_source(), "eos_token of tokenizer_config.json '" + config + "' = \"</s>\"");
  // Taken as the file says, with the warning --eos-token gets: BPE also emits this id from text.
  EXPECT_THAT(log.text(), HasSubstr("eos_token of tokenizer_config.json '" + config +
                                    "' names the EOS \"</s>\", an ordinary vocab entry of tokenizer.json '" + path +
                                    "' (id 6), not a special token"));
  // transformers' AddedToken object form; the directory spec finds both files.
  dir_.write("tokenizer_config.json", R"({"eos_token": {"__type": "AddedToken", "content": "h", "special": true}})");
  EXPECT_EQ(load_tokenizer(dir_.str())->eos_id(), 7);
}

TEST_F(HfEos, TokenizerConfigErrorsNameTheFileKeyAndValue) {
  const std::string path = tokenizer_json(html_vocab());
  const std::string config = dir_.path("tokenizer_config.json");
  dir_.write("tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
  EXPECT_THAT(error_of([&] { load_tokenizer(path); }), HasSubstr("eos_token of tokenizer_config.json '" + config +
                                                                 "' names the EOS \"<|im_end|>\", which is "
                                                                 "not a token of tokenizer.json '" +
                                                                 path + "'"));
  dir_.write("tokenizer_config.json", R"({"eos_token": 5})");
  EXPECT_THAT(error_of([&] { load_tokenizer(path); }),
              HasSubstr("tokenizer_config.json '" + config + "': eos_token = 5 is neither a token's text"));
  dir_.write("tokenizer_config.json", R"({"eos_token": {"content": ""}})");
  EXPECT_THAT(error_of([&] { load_tokenizer(path); }), HasSubstr("eos_token = {\"content\": \"\"} is neither"));
  dir_.write("tokenizer_config.json", R"({"model_max_length": 8})");
  EXPECT_THAT(error_of([&] { load_tokenizer(path); }),
              HasSubstr("and tokenizer_config.json '" + config + "' names no eos_token"));
  dir_.write("tokenizer_config.json", "[1]");
  EXPECT_THAT(error_of([&] { load_tokenizer(path); }), HasSubstr("'" + config + "' is not a JSON object"));
  dir_.write("tokenizer_config.json", std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_THAT(kind_and_what_of([&] { load_tokenizer(path); }),
              HasSubstr("input: tokenizer_config.json '" + config + "' nests arrays/objects more than 128 deep"));
}

// Only an absent tokenizer_config.json is "no tokenizer_config.json beside it": a directory, a
// FIFO or a dangling symbolic link at the name is one that cannot be read, and says so (before,
// each was reported as missing).
TEST_F(HfEos, ATokenizerConfigThatCannotBeReadIsNotCalledMissing) {
  const std::string path = tokenizer_json(html_vocab());
  const std::string config = dir_.path("tokenizer_config.json");
  const std::string cannot_read = "input: cannot read tokenizer_config.json '" + config + "': ";
  fs::create_directory(config);
  EXPECT_EQ(kind_and_what_of([&] { load_tokenizer(path); }), cannot_read + "it is a directory");
  fs::remove(config);
  ASSERT_EQ(::mkfifo(config.c_str(), 0600), 0);
  EXPECT_EQ(kind_and_what_of([&] { load_tokenizer(path); }), cannot_read + "it is not a regular file");
  fs::remove(config);
  fs::create_symlink(dir_.path("nowhere.json"), config);
  EXPECT_EQ(kind_and_what_of([&] { load_tokenizer(path); }),
            cannot_read + "it is a symbolic link to '" + dir_.path("nowhere.json") + "', which does not exist");
}

TEST_F(HfEos, EosTokenOverride) {
  const std::string path = tokenizer_json(html_vocab());
  {
    echo::testing::LogCapture log;
    const auto tok = load_tokenizer(path, "</s>");
    EXPECT_EQ(tok->eos_id(), 6);
    EXPECT_EQ(tok->eos_source(), "--eos-token \"</s>\"");
    // Taken, but an ordinary vocab entry is text BPE also emits: said in a warning.
    EXPECT_THAT(log.text(),
                HasSubstr("--eos-token names the EOS \"</s>\", an ordinary vocab entry of tokenizer.json '" + path +
                          "' (id 6), not a special token"));
  }
  // It wins over a special added token and over tokenizer_config.json.
  tokenizer_json(html_vocab(Json::array({added("<|endoftext|>", 8, true)})));
  dir_.write("tokenizer_config.json", R"({"eos_token": "h"})");
  EXPECT_EQ(load_tokenizer(path, "</s>")->eos_id(), 6);
  EXPECT_EQ(load_tokenizer(path)->eos_id(), 8);
  {
    echo::testing::LogCapture log;
    EXPECT_EQ(load_tokenizer(path, "<|endoftext|>")->eos_id(), 8);
    EXPECT_EQ(log.text().find("not a special token"), std::string::npos) << "a special token is no surprise";
  }
  EXPECT_THAT(error_of([&] { load_tokenizer(path, "<nope>"); }),
              HasSubstr("--eos-token names the EOS \"<nope>\", which is not a token of tokenizer.json '" + path + "'"));
  EXPECT_EQ(load_tokenizer("byte", "<|endoftext|>")->eos_id(), 256);
  EXPECT_THAT(error_of([&] { load_tokenizer("byte", "</s>"); }),
              HasSubstr("--eos-token \"</s>\": the byte tokenizer's EOS is fixed (<|endoftext|> = id 256)"));
}

TEST_F(HfEos, OnlySpecialAddedTokensCount) {
  const std::string path = tokenizer_json(html_vocab(Json::array({added("<|endoftext|>", 8, false)})));
  EXPECT_THAT(error_of([&] { load_tokenizer(path); }),
              HasSubstr("; \"<|endoftext|>\" is an added token (id 8) but not special; \"</s>\" is only an ordinary "
                        "vocab entry (id 6)"));
  {
    echo::testing::LogCapture log;
    EXPECT_EQ(load_tokenizer(path, "<|endoftext|>")->eos_id(), 8) << "named, it is taken";
    EXPECT_THAT(log.text(), HasSubstr("--eos-token names the EOS \"<|endoftext|>\", a non-special added token of "
                                      "tokenizer.json '" +
                                      path + "' (id 8), not a special token"));
  }
  // The candidates' order: <|end_of_text|> before </s>, both special.
  tokenizer_json(html_vocab(Json::array({added("</s>", 9, true), added("<|end_of_text|>", 8, true)})));
  EXPECT_EQ(load_tokenizer(path)->eos_id(), 8);
}

// Qwen's tokenizer_config.json names <|im_end|> (the chat-turn end); documents need <|endoftext|>.
TEST_F(HfEos, SpecialEndOfTextWinsOverQwensChatEosToken) {
  const std::string path =
      tokenizer_json(html_vocab(Json::array({added("<|endoftext|>", 8, true), added("<|im_end|>", 9, true)})));
  dir_.write("tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
  const auto tok = load_tokenizer(path);
  EXPECT_EQ(tok->eos_id(), 8);
  EXPECT_EQ(tok->eos_source(), "special added token \"<|endoftext|>\"");
}

TEST_F(HfEos, RealQwen3TokenizerKeepsEndOfText) {
  const char* env = std::getenv("ECHO_QWEN3_TOKENIZER");
  const fs::path real = env && *env ? fs::path(env)
                                    : fs::path(__FILE__).parent_path().parent_path().parent_path() /
                                          "data/tokenizer/qwen3/tokenizer.json";
  if (!fs::exists(real)) {
    if (std::getenv("ECHO_REQUIRE_TOKENIZER")) FAIL() << real << " is missing (scripts/get_data.sh fetches it)";
    GTEST_SKIP() << real << " is missing (scripts/get_data.sh fetches it)";
  }
  // Beside Qwen3's own tokenizer_config.json, which names <|im_end|> (151645).
  fs::create_symlink(fs::absolute(real), dir_.path("tokenizer.json"));
  dir_.write("tokenizer_config.json", R"({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})");
  const auto tok = load_tokenizer(dir_.str());
  EXPECT_EQ(tok->eos_id(), 151643);
  EXPECT_EQ(tok->eos_source(), "special added token \"<|endoftext|>\"");
  EXPECT_EQ(load_tokenizer(dir_.str(), "<|im_end|>")->eos_id(), 151645);
}

}  // namespace
}  // namespace echo::tokenizer
