// The JSON files a checkpoint or a Hugging Face folder brings (trainer_state.json, config.json)
// are untrusted input: nesting 100,000 deep or broken JSON must be an input error naming the
// file, never a stack overflow or an internal error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
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
  fs::remove_all(dir);
}

}  // namespace
}  // namespace echo::train
