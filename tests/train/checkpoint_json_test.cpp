// The JSON files a checkpoint or a Hugging Face folder brings (trainer_state.json, config.json)
// are untrusted input: nesting 100,000 deep or broken JSON must be an input error naming the
// file, never a stack overflow or an internal error.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/error.h"
#include "train/checkpoint/checkpoint.h"
#include "train/hf_config.h"

namespace echo::train {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("echo_ckpt_json_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// The message of the InputError `f` throws ("" when it throws nothing or something else).
template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (...) {
    return "<not an InputError>";
  }
  return "<nothing thrown>";
}

TEST(CheckpointJson, HuggingFaceConfigIsReadAndBoundedInDepth) {
  const fs::path dir = scratch("hf");
  write(dir / "config.json", "{\"max_position_embeddings\": " + nested(100000) + "}");
  std::string m = input_error_of([&] { check_init_from_config(dir.string(), config::ModelConfig{}); });
  EXPECT_NE(m.find("nests"), std::string::npos) << m;
  EXPECT_NE(m.find((dir / "config.json").string()), std::string::npos) << m;

  write(dir / "config.json", "{\"max_position_embeddings\": 40960");
  m = input_error_of([&] { check_init_from_config(dir.string(), config::ModelConfig{}); });
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;

  // Absent, config.json says nothing; a directory or a FIFO there cannot be read and says so
  // (it was taken for an absent one).
  fs::remove(dir / "config.json");
  EXPECT_EQ(check_init_from_config(dir.string(), config::ModelConfig{}), std::nullopt);
  fs::create_directory(dir / "config.json");
  EXPECT_EQ(input_error_of([&] { check_init_from_config(dir.string(), config::ModelConfig{}); }),
            "cannot read run.init_from's config '" + (dir / "config.json").string() + "': it is a directory");
  fs::remove(dir / "config.json");
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  EXPECT_EQ(input_error_of([&] { check_init_from_config(dir.string(), config::ModelConfig{}); }),
            "cannot read run.init_from's config '" + (dir / "config.json").string() + "': it is not a regular file");
  fs::remove_all(dir);
}

TEST(CheckpointJson, TrainerStateIsBoundedInDepthAndNamed) {
  const fs::path dir = scratch("state");
  std::string m = input_error_of([&] { read_checkpoint_meta(dir.string()); });
  EXPECT_NE(m.find("incomplete"), std::string::npos) << m;
  write(dir / "COMPLETE", "");
  write(dir / "trainer" / "trainer_state.json", "{\"format\": " + nested(100000) + "}");
  m = input_error_of([&] { read_checkpoint_meta(dir.string()); });
  EXPECT_NE(m.find("nests"), std::string::npos) << m;
  EXPECT_NE(m.find("trainer_state.json"), std::string::npos) << m;

  write(dir / "trainer" / "trainer_state.json", R"({"format": "something else"})");
  m = input_error_of([&] { read_checkpoint_meta(dir.string()); });
  EXPECT_NE(m.find("malformed"), std::string::npos) << m;
  EXPECT_EQ(m.find("[at "), std::string::npos) << m;

  // A directory or a FIFO at trainer_state.json is a state that cannot be read, not a missing one
  // ("has no trainer/trainer_state.json: not an echo training checkpoint", before).
  const fs::path state = dir / "trainer" / "trainer_state.json";
  fs::remove(state);
  fs::create_directory(state);
  EXPECT_EQ(input_error_of([&] { read_checkpoint_meta(dir.string()); }),
            "cannot read '" + state.string() + "': it is a directory");
  fs::remove(state);
  ASSERT_EQ(::mkfifo(state.c_str(), 0600), 0);
  EXPECT_EQ(input_error_of([&] { read_checkpoint_meta(dir.string()); }),
            "cannot read '" + state.string() + "': it is not a regular file");
  fs::remove(state);
  m = input_error_of([&] { read_checkpoint_meta(dir.string()); });
  EXPECT_NE(m.find("has no trainer/trainer_state.json"), std::string::npos) << m;
  fs::remove_all(dir);
}

// A hand-edited trainer_state.json: integers must be written as integers and lie in range. Before,
// step 2.5 and tp 2.0 were truncated, data_position -1 and seed 2^64 + 5 wrapped or rounded, and
// dp = 2^40 was refused as "'dp' = 0".
TEST(CheckpointJson, TrainerStateIntegersAreIntegersInRange) {
  const fs::path dir = scratch("state_values");
  write(dir / "COMPLETE", "");
  const nlohmann::json good = {{"format", "echo-checkpoint"}, {"version", 1}, {"step", 4},
                               {"data_position", 4},             {"seed", 7},    {"tp", 2},
                               {"dp", 1},                        {"config_yaml", ""}, {"optimizer_step", 4}};
  const auto read_with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = good;
    j[key] = value;
    write(dir / "trainer" / "trainer_state.json", j.dump());
    return input_error_of([&] { read_checkpoint_meta(dir.string()); });
  };
  const std::string malformed =
      "trainer state '" + (dir / "trainer" / "trainer_state.json").string() + "' is malformed: ";
  EXPECT_EQ(read_with("seed", 7), "<nothing thrown>") << "the state as the trainer writes it";
  EXPECT_EQ(read_checkpoint_meta(dir.string()).seed, 7u);
  const std::pair<std::pair<const char*, nlohmann::json>, std::string> cases[] = {
      {{"step", 2.5}, "'step' = 2.5 is not an integer"},
      {{"step", "4"}, "'step' = \"4\" is not an integer"},
      {{"tp", 2.0}, "'tp' = 2.0 is not an integer"},
      {{"data_position", -1}, "'data_position' = -1 is negative"},
      // Beyond 64 bits nlohmann reads a float: too large (or negative), not "not an integer".
      {{"data_position", 1e300}, "'data_position' = 1e+300 is over "},
      {{"data_position", -1e300}, "'data_position' = -1e+300 is negative"},
      {{"step", 1.5e19}, "'step' = 1.5e+19 is not an integer"},
      // Just below int64's range nlohmann reads a float too: negative, not "not an integer".
      {{"step", nlohmann::json::parse("-9223372036854775809")}, "'step' = -9.223372036854776e+18 is negative"},
      {{"optimizer_step", uint64_t{1} << 63}, "'optimizer_step' = 9223372036854775808 is over 9223372036854775807"},
      {{"optimizer_step", -7}, "'optimizer_step' = -7 is negative"},
      {{"seed", nlohmann::json::parse("18446744073709551621")},
       "'seed' = 1.8446744073709552e+19 is over 18446744073709551615"},
      {{"dp", int64_t{1} << 40}, "'dp' = 1099511627776 is over 2147483647"},
      {{"dp", 0}, "'dp' = 0 must be >= 1"},
      {{"tp", -2}, "'tp' = -2 is negative"},
      {{"step", uint64_t{1} << 63}, "'step' = 9223372036854775808 is over 9223372036854775807"},
  };
  for (const auto& [change, needle] : cases) {
    const std::string m = read_with(change.first, change.second);
    EXPECT_EQ(m.rfind(malformed + needle, 0), 0u) << needle << "\n" << m;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace echo::train
