// The JSON files a checkpoint or a Hugging Face folder brings (trainer_state.json, config.json)
// are untrusted input: nesting 100,000 deep or broken JSON must be an input error naming the
// file, never a stack overflow or an internal error.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "core/error.h"
#include "train/checkpoint/checkpoint.h"

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
  write(dir / "config.json", R"({"model_type": "qwen3", "max_position_embeddings": 32768})");
  EXPECT_EQ(hf_max_position_embeddings(dir.string()), 32768);

  write(dir / "config.json", "{\"max_position_embeddings\": " + nested(100000) + "}");
  std::string m = input_error_of([&] { hf_max_position_embeddings(dir.string()); });
  EXPECT_NE(m.find("nests"), std::string::npos) << m;
  EXPECT_NE(m.find((dir / "config.json").string()), std::string::npos) << m;

  write(dir / "config.json", "{\"max_position_embeddings\": 40960");
  m = input_error_of([&] { hf_max_position_embeddings(dir.string()); });
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;

  // Absent, config.json says nothing; a directory or a FIFO there cannot be read and says so
  // (it was taken for an absent one).
  fs::remove(dir / "config.json");
  EXPECT_EQ(hf_max_position_embeddings(dir.string()), std::nullopt);
  fs::create_directory(dir / "config.json");
  EXPECT_EQ(input_error_of([&] { hf_max_position_embeddings(dir.string()); }),
            "cannot read Hugging Face config '" + (dir / "config.json").string() + "': it is a directory");
  fs::remove(dir / "config.json");
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  EXPECT_EQ(input_error_of([&] { hf_max_position_embeddings(dir.string()); }),
            "cannot read Hugging Face config '" + (dir / "config.json").string() + "': it is not a regular file");
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

}  // namespace
}  // namespace echo::train
