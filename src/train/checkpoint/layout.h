// The names inside a checkpoint folder (layout in checkpoint.h; docs/design.md §14), shared by
// the writer, the loaders and the checksum reader.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace echo::train::ckpt {

inline constexpr const char* kModelFile = "model.safetensors";
// The trainer's own files live in a subfolder, so the checkpoint directory stays a clean Hugging
// Face model folder: loaders that glob "*.safetensors" (vLLM, converters) see only the model.
inline constexpr const char* kTrainerDir = "trainer";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kStateFile = "trainer_state.json";
inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kChecksumsFile = "checksums.json";  // in kTrainerDir (checksums.h)
inline constexpr const char* kCompleteFile = "COMPLETE";
inline constexpr const char* kMomentSuffix[2] = {".exp_avg", ".exp_avg_sq"};  // optimizer tensor names

// The checkpoint-relative path of a file in the trainer folder, as trainer/checksums.json names it.
inline std::string trainer_rel(const char* file) { return fmt::format("{}/{}", kTrainerDir, file); }

}  // namespace echo::train::ckpt
