// Resume checks: both configs flattened to "section.key" -> YAML scalar text and compared.
#include "train/resume_check.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/same_file.h"
#include "train/checkpoint/checksums.h"

namespace echo::train {

namespace fs = std::filesystem;
namespace {

// Keys whose change a resume refuses: everything that shapes the model's function and what the
// data loader feeds it. model.init_std / scale_output_init only matter at step 0, and
// max_position_embeddings only labels config.json.
constexpr const char* kFixedKeys[] = {
    "model.vocab_size", "model.vocab_pad_multiple", "model.hidden",   "model.ffn",         "model.layers",
    "model.heads",      "model.kv_heads",           "model.head_dim", "model.rope_base",   "model.norm_eps",
    "model.tie_embeddings", "data.train",           "data.seq_len",   "data.eos_id",
};

void flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else if (node.IsScalar()) {
    out[prefix] = node.Scalar();
  }
}

std::map<std::string, std::string> flat(const config::Config& cfg) {
  std::map<std::string, std::string> out;
  flatten(YAML::Load(config::to_yaml(cfg)), "", out);
  return out;
}

// A dataset prefix under another spelling ("./data/x", an absolute path, a symlinked directory)
// is the same data: compared by the .bin file it names, not by the text.
bool is_data_key(const std::string& key) { return key == "data.train" || key == "data.valid"; }

bool same_dataset(const std::string& key, const std::string& a, const std::string& b) {
  return is_data_key(key) && !a.empty() && !b.empty() && same_file(a + ".bin", b + ".bin");
}

// What a change to `key` does to the data a resumed run reads; "" for other keys.
std::string consequence(const std::string& key) {
  if (key == "train.global_batch")
    return " (the data goes on from the samples the checkpoint consumed, none skipped or read again; "
           "train.steps, the learning-rate schedule and the intervals count steps, and each step left reads the new "
           "batch)";
  if (key == "run.seed")
    return " (the seed draws the order of the samples in each epoch: the rest of this epoch follows another order, "
           "so some of its samples are read again and others skipped)";
  return {};
}

bool is_fixed(const std::string& key) {
  for (const char* k : kFixedKeys)
    if (key == k) return true;
  return false;
}

}  // namespace

std::optional<config::Config> recorded_config(const std::string& saved_yaml, const std::string& ckpt_dir) {
  if (saved_yaml.empty()) return std::nullopt;
  try {
    return config::parse_config(saved_yaml, ckpt_dir + " (its config_yaml)");
  } catch (const Error& e) {
    ECHO_INPUT_FAIL("cannot resume from '{}': its recorded config does not load: {}", ckpt_dir, e.message());
  }
}

std::vector<std::string> check_resume_config(const std::optional<config::Config>& saved, const config::Config& now,
                                             const std::string& ckpt_dir, const TrainDataHashes& data) {
  std::string refused;
  std::vector<std::string> changed;
  const std::string old_train = saved ? saved->data.train : std::string("(not recorded)");
  if (data.recorded && data.now) {
    // The same file under another spelling (data/./train) is data rewritten in place, not moved.
    const bool same_place = old_train == now.data.train || same_file(old_train + ".bin", now.data.train + ".bin");
    const std::string hashes =
        fmt::format("content hash {} -> {}", checksum_hex(*data.recorded), checksum_hex(*data.now));
    if (*data.recorded != *data.now)
      refused = same_place ? fmt::format("'data.train': {} holds other data than when the checkpoint was saved ({})",
                                         now.data.train, hashes)
                           : fmt::format("'data.train': {} -> {} ({})", old_train, now.data.train, hashes);
    else if (old_train != now.data.train)
      changed.push_back(fmt::format("'data.train': {} -> {} (the same data: its content hash {} is the checkpoint's)",
                                    old_train, now.data.train, checksum_hex(*data.now)));
  }
  if (!saved) {
    ECHO_INPUT_CHECK(refused.empty(), "cannot resume from '{}': the run was trained with other data ({})", ckpt_dir,
                     refused);
    return changed;
  }
  const auto before = flat(*saved), after = flat(now);
  for (const auto& [key, value] : after) {
    const auto it = before.find(key);
    const std::string old = it == before.end() ? "(unset)" : it->second;
    if (key == "data.train" && data.recorded) continue;  // compared by content above
    if (old == value || same_dataset(key, old, value)) continue;
    // A data prefix that names no .bin is named by the data's own check ("... does not exist"), not
    // called other data.
    std::error_code ec;
    if (is_data_key(key) && !value.empty() && !fs::exists(value + ".bin", ec)) continue;
    const std::string line = fmt::format("'{}': {} -> {}", key, old, value);
    if (is_fixed(key))
      refused += (refused.empty() ? "" : ", ") + line;
    else
      changed.push_back(line + consequence(key));
  }
  ECHO_INPUT_CHECK(refused.empty(),
                   "cannot resume from '{}': the run was trained with another model or data ({}); resume with the "
                   "checkpoint's values, or start a new run in another run.out_dir with run.init_from pointing at the "
                   "checkpoint (--overwrite of this run deletes its checkpoints: copy the checkpoint out first)",
                   ckpt_dir, refused);
  return changed;
}

}  // namespace echo::train
