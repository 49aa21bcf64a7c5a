// What a --resume may change. The checkpoint fixes the model and the data it was trained on: a
// resume that changes them (another shape, another dataset, another packing) would train a
// different run under the old one's name, so it is refused, naming every such key. Anything else
// (the seed, the learning rate, the number of steps, the layout...) may change, with a warning.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace echo::train {

// The config a checkpoint recorded (its config_yaml), parsed; nullopt when it recorded none.
// Throws echo::InputError naming `ckpt_dir` when it does not load.
std::optional<config::Config> recorded_config(const std::string& saved_yaml, const std::string& ckpt_dir);

// The training data's content hash (data/content_hash.h): the one the checkpoint recorded
// (nullopt in one written before 2026-12-06) and the one data.train has now (nullopt before the
// data is read: then a recorded hash's data.train is not compared, so a changed model is refused
// before a scan of the whole dataset).
struct TrainDataHashes {
  std::optional<uint64_t> recorded;
  std::optional<uint64_t> now;
};

// Compares the effective config `now` with the one a checkpoint recorded (`saved`, from
// recorded_config; nothing to compare when nullopt). Throws echo::InputError naming `ckpt_dir`
// and every refused key with both values; returns one "key: old -> new" line per other change.
// data.train is compared by content when the checkpoint recorded its hash (moved data resumes,
// data re-prepared in place is refused), else by the file its prefix names.
std::vector<std::string> check_resume_config(const std::optional<config::Config>& saved, const config::Config& now,
                                             const std::string& ckpt_dir, const TrainDataHashes& data = {});

}  // namespace echo::train
