// echo_eval's EOS for a Hugging Face folder (train/hf_config.h): config.json's eos_token_id (an
// integer, or a list decided by the folder's tokenizer.json), then generation_config.json's, then
// the tokenizer's; refused, naming --set data.eos_id=N, when none says. Before, a list or a
// missing key silently left echo's Qwen3 default 151643.
#include "train/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "../support/log_capture.h"
#include "../support/scratch_dir.h"
#include "../support/test_util.h"

namespace echo::train {
namespace {

using echo::testing::error_of;
using echo::testing::kind_and_what_of;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kVocab = 64;

// A byte-level BPE tokenizer.json whose special added tokens are <|endoftext|> = 30 and
// <|im_end|> = 31 (Qwen's pair, at small ids); `special` false makes neither count as an EOS.
std::string tokenizer_json(bool special = true) {
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  auto added = [&](const char* content, int id) {
    return Json{{"id", id}, {"content", content}, {"normalized", false}, {"special", special}};
  };
  return Json{{"added_tokens", Json::array({added("<|endoftext|>", 30), added("<|im_end|>", 31)})},
              {"pre_tokenizer", byte_level},
              {"decoder", byte_level},
              {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}}}, {"merges", Json::array()}}}}
      .dump();
}

class HfFolderEos : public ::testing::Test {
 protected:
  // config.json with eos_token_id = `eos` (none when null).
  void config(const Json& eos) {
    Json j = {{"model_type", "qwen3"}, {"vocab_size", kVocab}};
    if (!eos.is_null()) j["eos_token_id"] = eos;
    dir_.write("config.json", j.dump());
  }
  HfEos eos() const { return hf_eos_id(dir_.str(), kVocab); }
  echo::testing::ScratchDir dir_;
};

TEST_F(HfFolderEos, IntegerFromConfigJson) {
  config(63);
  EXPECT_EQ(eos().id, 63);
  EXPECT_EQ(eos().source, "'" + dir_.path("config.json") + "' eos_token_id = 63");
  config(64);
  EXPECT_THAT(kind_and_what_of([&] { eos(); }),
              HasSubstr("input: '" + dir_.path("config.json") +
                        "': eos_token_id = 64: 64 is outside the model's "
                        "vocabulary [0, 64) (config.json vocab_size); pass --set data.eos_id=N"));
}

// Qwen3's chat models: config.json says <|im_end|>, the tokenizer's EOS is <|endoftext|>. The
// file decides, and the log says how to pick the other.
TEST_F(HfFolderEos, AnIntegerThatIsNotTheTokenizersIsKeptAndSaid) {
  config(31);
  dir_.write("tokenizer.json", tokenizer_json());
  {
    echo::testing::LogCapture log;
    EXPECT_EQ(eos().id, 31);
    EXPECT_THAT(log.text(), HasSubstr("'" + dir_.path("config.json") + "' eos_token_id = 31 is not the EOS 30 of "
                                      "tokenizer.json '" + dir_.path("tokenizer.json") +
                                      "': special added token \"<|endoftext|>\": evaluating with 31; if the "
                                      "data's documents are separated by 30, pass --set data.eos_id=30"));
  }
  config(30);
  echo::testing::LogCapture log;
  EXPECT_EQ(eos().id, 30);
  EXPECT_THAT(log.text(), Not(HasSubstr("is not the EOS")));
}

TEST_F(HfFolderEos, ListIsDecidedByTheFoldersTokenizer) {
  // Qwen3's order: the chat end first, the document separator second.
  config(Json::array({31, 30}));
  EXPECT_THAT(error_of([&] { eos(); }),
              HasSubstr("'" + dir_.path("config.json") +
                        "': eos_token_id = [31, 30] lists several ids, and the folder has "
                        "no tokenizer.json ('" +
                        dir_.path("tokenizer.json") + "') to tell which one separates documents"));
  dir_.write("tokenizer.json", tokenizer_json());
  const HfEos e = eos();
  EXPECT_EQ(e.id, 30);
  EXPECT_THAT(e.source, HasSubstr("eos_token_id = [31, 30], the EOS of tokenizer.json '" + dir_.path("tokenizer.json") +
                                  "': special added token \"<|endoftext|>\""));
  // One distinct id needs no tokenizer.
  config(Json::array({5, 5}));
  EXPECT_EQ(eos().id, 5);
  // The tokenizer's EOS must be among them.
  config(Json::array({31, 2}));
  EXPECT_THAT(error_of([&] { eos(); }), HasSubstr("eos_token_id = [31, 2] does not hold the EOS 30 of tokenizer.json"));
  // A tokenizer without a certain EOS: its refusal, and the way around it.
  config(Json::array({31, 30}));
  dir_.write("tokenizer.json", tokenizer_json(false));
  const std::string msg = error_of([&] { eos(); });
  EXPECT_THAT(msg, HasSubstr("no EOS token found"));
  EXPECT_THAT(msg, HasSubstr("; to evaluate without it, pass --set data.eos_id=N"));
}

TEST_F(HfFolderEos, GenerationConfigWhenConfigJsonHasNone) {
  config(nullptr);
  dir_.write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": 9})");
  EXPECT_EQ(eos().id, 9);
  EXPECT_EQ(eos().source, "'" + dir_.path("generation_config.json") + "' eos_token_id = 9");
  dir_.write("tokenizer.json", tokenizer_json());
  dir_.write("generation_config.json", R"({"eos_token_id": [31, 30]})");
  EXPECT_EQ(eos().id, 30);
  // config.json's own value comes first.
  config(7);
  EXPECT_EQ(eos().id, 7);
}

TEST_F(HfFolderEos, TokenizerJsonWhenNeitherConfigSays) {
  config(nullptr);
  dir_.write("tokenizer.json", tokenizer_json());
  EXPECT_EQ(eos().id, 30);
  EXPECT_EQ(eos().source,
            "tokenizer.json '" + dir_.path("tokenizer.json") + "': special added token \"<|endoftext|>\"");
  EXPECT_THAT(error_of([&] { hf_eos_id(dir_.str(), 16); }),
              HasSubstr("the EOS 30 of tokenizer.json '" + dir_.path("tokenizer.json") +
                        "': special added token \"<|endoftext|>\" is outside the model's vocabulary [0, 16)"));
}

TEST_F(HfFolderEos, NothingSaysSoItIsRefused) {
  config(nullptr);
  EXPECT_THAT(
      kind_and_what_of([&] { eos(); }),
      HasSubstr("input: Hugging Face folder '" + dir_.str() +
                "' does not say which token is the EOS (no "
                "eos_token_id in config.json, no generation_config.json, no tokenizer.json), and echo's default "
                "(Qwen3's 151643) would be a guess; pass --set data.eos_id=N"));
  dir_.write("generation_config.json", R"({"eos_token_id": null})");
  EXPECT_THAT(error_of([&] { eos(); }), HasSubstr("(no eos_token_id in config.json, no eos_token_id in "
                                                  "generation_config.json, no tokenizer.json)"));
}

TEST_F(HfFolderEos, MalformedValuesNameTheFileKeyAndValue) {
  config("</s>");
  EXPECT_THAT(error_of([&] { eos(); }), HasSubstr("'" + dir_.path("config.json") +
                                                  "': eos_token_id = \"</s>\" is neither "
                                                  "a token id nor a list of them; pass --set data.eos_id=N"));
  config(Json::array());
  EXPECT_THAT(error_of([&] { eos(); }), HasSubstr("eos_token_id = [] is neither a token id"));
  config(Json::array({1, 2.5}));
  EXPECT_THAT(error_of([&] { eos(); }), HasSubstr("eos_token_id = [1, 2.5] holds 2.5, which is not a token id"));
  config(-1);
  EXPECT_THAT(error_of([&] { eos(); }), HasSubstr("eos_token_id = -1: -1 is outside"));
  config(nullptr);
  dir_.write("generation_config.json", std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_THAT(kind_and_what_of([&] { eos(); }), HasSubstr("input: '" + dir_.path("generation_config.json") +
                                                          "' nests arrays/objects more than 128 deep"));
}

// config.json keys that change the forward pass echo does not implement are refused, not read as
// the plain model (a wrong loss, exit 0, before); the values a Qwen3 release writes pass.
TEST_F(HfFolderEos, ConfigJsonOfAnotherArchitectureIsRefused) {
  const Json qwen3 = {{"model_type", "qwen3"},       {"vocab_size", kVocab},          {"hidden_size", 32},
                      {"intermediate_size", 48},     {"num_hidden_layers", 2},        {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},    {"head_dim", 8},                 {"hidden_act", "silu"},
                      {"rope_scaling", nullptr},     {"attention_bias", false},       {"use_sliding_window", false},
                      {"tie_word_embeddings", true}};
  dir_.write("config.json", qwen3.dump());
  EXPECT_TRUE(config_from_hf(dir_.str()).model.tie_embeddings);
  const std::string what = "Hugging Face config '" + dir_.path("config.json") + "': ";
  const std::pair<Json, std::string> cases[] = {
      {{{"rope_scaling", {{"type", "yarn"}, {"factor", 4}}}}, "'rope_scaling' = {\"factor\": 4, \"type\": \"yarn\"} scales RoPE"},
      {{{"attention_bias", true}}, "'attention_bias' = true adds q/k/v/o biases"},
      {{{"hidden_act", "gelu"}}, "'hidden_act' = \"gelu\" is not silu"},
      {{{"use_sliding_window", true}}, "'use_sliding_window' = true limits attention"},
      {{{"tie_word_embeddings", "true"}}, "'tie_word_embeddings' = \"true\" is not true or false"},
  };
  for (const auto& [change, needle] : cases) {
    Json j = qwen3;
    j.update(change);
    dir_.write("config.json", j.dump());
    EXPECT_THAT(kind_and_what_of([&] { config_from_hf(dir_.str()); }), HasSubstr("input: " + what + needle)) << needle;
  }
}

// Only an absent config.json, generation_config.json or tokenizer.json is "no config.json" (or
// skipped): a directory or a FIFO at the name cannot be read and says so. Before, config_from_hf
// called it missing and hf_eos_id went on to the next file as if it were absent.
TEST_F(HfFolderEos, AFileThatCannotBeReadIsNotCalledMissing) {
  const std::string file = dir_.path("config.json");
  fs::create_directory(file);
  EXPECT_EQ(kind_and_what_of([&] { config_from_hf(dir_.str()); }),
            "input: cannot read Hugging Face config '" + file + "': it is a directory");
  EXPECT_EQ(kind_and_what_of([&] { eos(); }), "input: cannot read '" + file + "': it is a directory");
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  EXPECT_EQ(kind_and_what_of([&] { config_from_hf(dir_.str()); }),
            "input: cannot read Hugging Face config '" + file + "': it is not a regular file");
  fs::remove(file);
  config(nullptr);
  const std::string generation = dir_.path("generation_config.json");
  fs::create_directory(generation);
  EXPECT_EQ(kind_and_what_of([&] { eos(); }), "input: cannot read '" + generation + "': it is a directory");
  fs::remove(generation);
  const std::string tokenizer = dir_.path("tokenizer.json");
  fs::create_directory(tokenizer);
  EXPECT_THAT(kind_and_what_of([&] { eos(); }),
              HasSubstr("input: cannot read tokenizer.json '" + tokenizer +
                        "': it is a directory; to evaluate without it, pass --set data.eos_id=N"));
}

// A float key that is not a number ("rope_theta": "10000") is refused by name; it used to leave
// echo's default (1e6) in place silently.
TEST_F(HfFolderEos, FloatKeysThatAreNotNumbersAreRefused) {
  const Json qwen3 = {{"model_type", "qwen3"}, {"vocab_size", kVocab},     {"hidden_size", 32},
                      {"intermediate_size", 48}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
  const std::string what = "input: Hugging Face config '" + dir_.path("config.json") + "': ";
  for (const char* key : {"rope_theta", "rms_norm_eps"}) {
    Json j = qwen3;
    j[key] = "10000";
    dir_.write("config.json", j.dump());
    EXPECT_THAT(kind_and_what_of([&] { config_from_hf(dir_.str()); }),
                HasSubstr(what + "'" + key + "' = \"10000\" is not a number"));
  }
  Json j = qwen3;
  j["rope_theta"] = 10000;
  j["rms_norm_eps"] = 1e-5;
  dir_.write("config.json", j.dump());
  EXPECT_EQ(config_from_hf(dir_.str()).model.rope_base, 10000);
  EXPECT_EQ(config_from_hf(dir_.str()).model.norm_eps, 1e-5);
}

// run.init_from: the folder's config.json is read with echo_eval's checks and compared with the
// config's model section. Before, all but max_position_embeddings was ignored: rope_theta 10000,
// gelu or another shape's config trained silently with the YAML's values, and a context of 2^31
// passed start-up and failed the first checkpoint save (4294967360 wrapped to 64).
class InitFromConfig : public ::testing::Test {
 protected:
  InitFromConfig() {
    model_.vocab_size = 64;
    model_.vocab_pad_multiple = 32;
    model_.hidden = 32;
    model_.ffn = 48;
    model_.layers = 2;
    model_.heads = 4;
    model_.kv_heads = 2;
    model_.head_dim = 8;
    model_.tie_embeddings = true;
  }
  // The config.json of model_, changed by `change`.
  void write(const Json& change = Json::object()) {
    Json j = {{"model_type", "qwen3"},       {"vocab_size", 64},           {"hidden_size", 32},
              {"intermediate_size", 48},     {"num_hidden_layers", 2},     {"num_attention_heads", 4},
              {"num_key_value_heads", 2},    {"head_dim", 8},              {"hidden_act", "silu"},
              {"rope_theta", 1000000.0},     {"rms_norm_eps", 1e-6},       {"tie_word_embeddings", true},
              {"max_position_embeddings", 4096}};
    j.update(change);
    dir_.write("config.json", j.dump());
  }
  std::string refusal() {
    return kind_and_what_of([&] { check_init_from_config(dir_.path("model.safetensors"), model_); });
  }
  config::ModelConfig model_;
  echo::testing::ScratchDir dir_;
};

TEST_F(InitFromConfig, AMatchingConfigGivesItsContext) {
  EXPECT_EQ(check_init_from_config(dir_.str(), model_), std::nullopt) << "no config.json: nothing to check";
  write();
  EXPECT_EQ(check_init_from_config(dir_.str(), model_), 4096);
  EXPECT_EQ(check_init_from_config(dir_.path("model.safetensors"), model_), 4096);
  Json j = {{"model_type", "qwen3"},    {"vocab_size", 64},       {"hidden_size", 32},
            {"intermediate_size", 48},  {"num_hidden_layers", 2}, {"num_attention_heads", 4},
            {"num_key_value_heads", 2}, {"head_dim", 8},          {"tie_word_embeddings", true}};
  dir_.write("config.json", j.dump());  // no rope_theta, rms_norm_eps or context: not compared
  model_.rope_base = 10000;
  EXPECT_EQ(check_init_from_config(dir_.str(), model_), std::nullopt);
}

TEST_F(InitFromConfig, AnotherModelIsRefusedNamingBothValuesAndTheFix) {
  const std::string what = "input: run.init_from's config '" + dir_.path("config.json") + "': ";
  const std::pair<Json, std::string> cases[] = {
      {{{"rope_theta", 10000}}, "'rope_theta' = 10000, but the config's model.rope_base = 1000000"},
      {{{"rms_norm_eps", 1e-5}}, "'rms_norm_eps' = 1e-05, but the config's model.norm_eps = 1e-06"},
      {{{"hidden_size", 64}}, "'hidden_size' = 64, but the config's model.hidden = 32"},
      {{{"num_hidden_layers", 3}}, "'num_hidden_layers' = 3, but the config's model.layers = 2"},
      {{{"num_attention_heads", 2}}, "'num_attention_heads' = 2, but the config's model.heads = 4"},
      {{{"num_key_value_heads", 4}}, "'num_key_value_heads' = 4, but the config's model.kv_heads = 2"},
      {{{"head_dim", 16}}, "'head_dim' = 16, but the config's model.head_dim = 8"},
      {{{"intermediate_size", 96}}, "'intermediate_size' = 96, but the config's model.ffn = 48"},
      {{{"tie_word_embeddings", false}}, "'tie_word_embeddings' = false, but the config's model.tie_embeddings = true"},
      {{{"vocab_size", 72}}, "'vocab_size' = 72, but the config's model.vocab_size (padded) = 64"},
  };
  for (const auto& [change, needle] : cases) {
    write(change);
    EXPECT_THAT(refusal(), HasSubstr(what + needle)) << needle;
  }
  write({{"rope_theta", 10000}});
  EXPECT_THAT(refusal(), HasSubstr("pass --set model.rope_base=10000 "));
  write({{"vocab_size", 72}});
  EXPECT_THAT(refusal(), HasSubstr("pass --set model.vocab_size=72 --set model.vocab_pad_multiple=1 "));
}

TEST_F(InitFromConfig, WhatEchoEvalRefusesIsRefused) {
  const std::string what = "input: run.init_from's config '" + dir_.path("config.json") + "': ";
  const std::pair<Json, std::string> cases[] = {
      {{{"model_type", "llama"}}, "model_type \"llama\" is not qwen3"},
      {{{"hidden_act", "gelu"}}, "'hidden_act' = \"gelu\" is not silu"},
      {{{"attention_bias", true}}, "'attention_bias' = true adds q/k/v/o biases"},
      {{{"use_sliding_window", true}}, "'use_sliding_window' = true limits attention"},
      {{{"rope_scaling", {{"type", "yarn"}, {"factor", 4}}}}, "'rope_scaling' = {\"factor\": 4, \"type\": \"yarn\"}"},
      {{{"rope_theta", "10000"}}, "'rope_theta' = \"10000\" is not a number"},
      {{{"max_position_embeddings", 2147483648}}, "'max_position_embeddings' = 2147483648 is out of range [1, 1073741824]"},
      {{{"max_position_embeddings", -5}}, "'max_position_embeddings' = -5 is out of range [1, 1073741824]"},
      {{{"max_position_embeddings", 4294967360}}, "'max_position_embeddings' = 4294967360 is out of range"},
      {{{"max_position_embeddings", 4096.5}}, "'max_position_embeddings' = 4096.5 is not an integer"},
      // A float past any integer was called "missing".
      {{{"max_position_embeddings", 1e20}}, "'max_position_embeddings' = 1e+20 is not an integer"},
  };
  for (const auto& [change, needle] : cases) {
    write(change);
    EXPECT_THAT(refusal(), HasSubstr(what + needle)) << needle;
  }
  // Without model_type the file is not known to be Qwen3's (a Llama config with the key deleted).
  write();
  Json unnamed = Json::parse(echo::testing::read_file(dir_.path("config.json")));
  unnamed.erase("model_type");
  dir_.write("config.json", unnamed.dump());
  EXPECT_THAT(refusal(), HasSubstr(what + "'model_type' is missing"));
}

TEST(OverridesSet, FindsTheKeyDottedOrInAFlowMap) {
  EXPECT_TRUE(config::overrides_set({"comm.bits=8", "data.eos_id=5"}, "data.eos_id"));
  EXPECT_TRUE(config::overrides_set({"data={eos_id: 5, seq_len: 8}"}, "data.eos_id"));
  EXPECT_FALSE(config::overrides_set({"data.seq_len=8", "comm={bits: 8}"}, "data.eos_id"));
  EXPECT_FALSE(config::overrides_set({}, "data.eos_id"));
  EXPECT_THAT(error_of([] { config::overrides_set({"data.eos_id"}, "data.eos_id"); }), HasSubstr("malformed override"));
}

// echo_eval lets the data's sidecar settle an EOS no one chose: a config file's default is not a
// choice.
TEST_F(HfFolderEos, ConfigFileSetsOnlyWhatTheFileSays) {
  const std::string yaml = dir_.write("c.yaml", "model: {vocab_size: 64}\ndata:\n  seq_len: 16\n  eos_id: 5\n");
  EXPECT_TRUE(config::config_file_sets(yaml, "data.eos_id"));
  EXPECT_TRUE(config::config_file_sets(yaml, "model.vocab_size"));
  EXPECT_FALSE(config::config_file_sets(yaml, "model.hidden"));
  EXPECT_FALSE(config::config_file_sets(dir_.write("d.yaml", "data: {seq_len: 16, eos_id: null}\n"), "data.eos_id"));
  EXPECT_THAT(error_of([&] { config::config_file_sets(dir_.path("none.yaml"), "data.eos_id"); }),
              HasSubstr(dir_.path("none.yaml") + ": cannot open config file: No such file or directory"));
}

}  // namespace
}  // namespace echo::train
