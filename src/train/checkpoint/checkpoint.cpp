// Checkpoint save and resume (protocol in checkpoint.h).
#include "train/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/config/config.h"
#include "core/error.h"
#include "core/json_guard.h"
#include "core/log.h"
#include "core/text_file.h"
#include "dist/agreement.h"
#include "dist/mpi_check.h"
#include "train/checkpoint/agreed_failure.h"
#include "train/checkpoint/checksums.h"
#include "train/checkpoint/layout.h"
#include "train/checkpoint/safetensors.h"
#include "train/checkpoint/shard_io.h"
#include "train/checkpoint/tensor_targets.h"
#include "train/divergence.h"

namespace echo::train {
namespace {

namespace fs = std::filesystem;
using namespace ckpt;  // the folder's names, the tensor targets and the agreed failure
using dist::agree;
using dist::error_text;

constexpr const char* kStateFormat = "echo-checkpoint";
constexpr int kStateVersion = 1;
constexpr std::string_view kStepPrefix = "step_";
constexpr std::string_view kTmpSuffix = ".tmp";

// ---- files ----------------------------------------------------------------------------------------

void write_file_synced(const fs::path& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    ECHO_RUN_CHECK(out.good(), "cannot create '{}': {}", path.string(), std::strerror(errno));
    out << text;
    out.flush();
    ECHO_RUN_CHECK(out.good(), "cannot write '{}': {}", path.string(), std::strerror(errno));
  }
  echo::fsync_path(path.string(), false);
}

std::string read_text(const fs::path& path) {
  return read_text_file(path.string(), fmt::format("'{}'", path.string()));
}

// The name echo gives step `step`'s checkpoint directory: step_00000042.
std::string step_dir_name(int64_t step) { return fmt::format("{}{:08d}", kStepPrefix, step); }

// The step of a directory named as echo names them (step_dir_name), nullopt for anything else:
// ".tmp" names, and "step_6" or "step_000000006", which echo never writes (a user's copy or
// rename). NOTE: only echo's own names count, so a save never prunes a folder it did not make
// and a resume never picks one up by accident.
std::optional<int64_t> parse_step_dir(const std::string& name) {
  if (name.size() <= kStepPrefix.size() || name.compare(0, kStepPrefix.size(), kStepPrefix) != 0) return std::nullopt;
  const std::string digits = name.substr(kStepPrefix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  const int64_t step = std::stoll(digits);
  if (name != step_dir_name(step)) return std::nullopt;
  return step;
}

// The step of a folder echo named: step_dir_name, or that name with the .tmp of a save in progress
// (`tmp` then set); nullopt for any other name.
std::optional<int64_t> echo_checkpoint_step(const std::string& name, bool& tmp) {
  tmp = name.size() > kTmpSuffix.size() && name.ends_with(kTmpSuffix);
  return parse_step_dir(tmp ? name.substr(0, name.size() - kTmpSuffix.size()) : name);
}

bool is_complete(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kCompleteFile, ec);
}

// ---- the model, as its parameters describe it -----------------------------------------------------

nlohmann::json shape_json(const ShapeSummary& s) {
  return {{"vocab_size", s.vocab},  {"hidden", s.hidden},
          {"ffn", s.ffn},           {"layers", s.layers},
          {"heads", s.heads},       {"kv_heads", s.kv_heads},
          {"head_dim", s.head_dim}, {"tie_embeddings", s.tie_embeddings}};
}

// The effective config, or the defaults when the trainer passed none. A config that disagrees
// with the parameters is a caller bug that would make config.json lie: refuse it.
config::Config checked_config(const std::string& yaml, const ShapeSummary& s) {
  if (yaml.empty()) return config::Config{};
  config::Config cfg = config::parse_config(yaml, "<checkpoint config_yaml>");
  const auto& m = cfg.model;
  const bool same = m.padded_vocab() == s.vocab && m.hidden == s.hidden && m.ffn == s.ffn && m.layers == s.layers &&
                    m.heads == s.heads && m.kv_heads == s.kv_heads && m.head_dim == s.head_dim &&
                    m.tie_embeddings == s.tie_embeddings;
  if (!same) {
    const ShapeSummary c{m.padded_vocab(), m.hidden,   m.ffn,      m.layers,
                         m.heads,          m.kv_heads, m.head_dim, m.tie_embeddings};
    ECHO_FAIL("the checkpoint's config_yaml describes another model ({}) than the parameters ({})",
              shape_json(c).dump(), shape_json(s).dump());
  }
  return cfg;
}

// A transformers Qwen3Config for the checkpoint, so Qwen3ForCausalLM.from_pretrained(dir) works.
std::string hf_config_json(const ShapeSummary& s, const config::Config& cfg) {
  nlohmann::ordered_json j = {{"architectures", {"Qwen3ForCausalLM"}},
                              {"model_type", "qwen3"},
                              {"vocab_size", s.vocab},
                              {"hidden_size", s.hidden},
                              {"intermediate_size", s.ffn},
                              {"num_hidden_layers", s.layers},
                              {"num_attention_heads", s.heads},
                              {"num_key_value_heads", s.kv_heads},
                              {"head_dim", s.head_dim},
                              {"hidden_act", "silu"},
                              {"max_position_embeddings", cfg.model.max_position_embeddings},
                              {"rms_norm_eps", cfg.model.norm_eps},
                              {"rope_theta", cfg.model.rope_base},
                              {"rope_scaling", nullptr},
                              {"attention_bias", false},
                              {"attention_dropout", 0.0},
                              {"initializer_range", cfg.model.init_std},
                              {"tie_word_embeddings", s.tie_embeddings},
                              // The separator the data loader packed between documents: echo_eval
                              // on this folder as a Hugging Face one takes it from here.
                              {"eos_token_id", cfg.data.eos_id},
                              {"torch_dtype", "float32"},
                              {"use_cache", true}};
  return j.dump(2) + "\n";
}

// The trainer state's `key` as written: a JSON integer (2.0 is refused, not truncated) in [min, max].
uint64_t state_integer(const nlohmann::json& j, const char* key, uint64_t min, uint64_t max) {
  const nlohmann::json& v = j.at(key);
  // nlohmann reads an integer beyond 64 bits (beyond int64 when negative) as a float: that one is
  // too large or negative, not a fraction.
  const bool over = v.is_number_float() && v.get<double>() >= 0x1p64;
  const bool below = v.is_number_float() && v.get<double>() <= -0x1p63;
  ECHO_INPUT_CHECK(!over, "'{}' = {} is over {}", key, v.dump(), max);
  ECHO_INPUT_CHECK(!below, "'{}' = {} is negative", key, v.dump());
  ECHO_INPUT_CHECK(v.is_number_integer(), "'{}' = {} is not an integer", key, v.dump());
  ECHO_INPUT_CHECK(v.is_number_unsigned(), "'{}' = {} is negative", key, v.dump());
  const uint64_t u = v.get<uint64_t>();
  ECHO_INPUT_CHECK(u >= min, "'{}' = {} must be >= {}", key, v.dump(), min);
  ECHO_INPUT_CHECK(u <= max, "'{}' = {} is over {}", key, v.dump(), max);
  return u;
}

// The trainer state in `text`, read from `path`.
CheckpointMeta parse_state(const fs::path& path, const std::string& text, int64_t& optimizer_step) {
  const nlohmann::json j = parse_untrusted_json(text, fmt::format("trainer state '{}'", path.string()));
  try {
    ECHO_CHECK(j.is_object() && j.value("format", "") == kStateFormat, "not an echo trainer state");
    ECHO_CHECK(j.at("version").get<int>() == kStateVersion, "version {} is not {}", j.at("version").dump(),
               kStateVersion);
    constexpr uint64_t kInt64Max = std::numeric_limits<int64_t>::max(), kIntMax = std::numeric_limits<int>::max();
    CheckpointMeta meta;
    meta.step = static_cast<int64_t>(state_integer(j, "step", 0, kInt64Max));
    meta.data_position = state_integer(j, "data_position", 0, std::numeric_limits<uint64_t>::max());
    if (j.contains("consumed_samples"))
      meta.consumed_samples = state_integer(j, "consumed_samples", 0, std::numeric_limits<uint64_t>::max());
    if (j.contains("train_data_xxh3")) {
      uint64_t hash = 0;
      ECHO_INPUT_CHECK(parse_checksum_hex(j.at("train_data_xxh3"), hash), "'train_data_xxh3' = {} is not 16 hex digits",
                       j.at("train_data_xxh3").dump());
      meta.train_data_hash = hash;
    }
    meta.seed = state_integer(j, "seed", 0, std::numeric_limits<uint64_t>::max());
    meta.tp = static_cast<int>(state_integer(j, "tp", 1, kIntMax));
    meta.dp = static_cast<int>(state_integer(j, "dp", 1, kIntMax));
    meta.config_yaml = j.at("config_yaml").get<std::string>();
    // Not compared with the step here: the trainer's relation (one optimizer step per training
    // step) is checked where it resumes; a checkpoint as such may hold any count.
    optimizer_step = static_cast<int64_t>(state_integer(j, "optimizer_step", 0, kInt64Max));
    // The directory's name and the state inside it must agree on the step (a copied or edited folder).
    const std::string dir_name = path.parent_path().filename() == kTrainerDir
                                     ? path.parent_path().parent_path().filename().string()
                                     : path.parent_path().filename().string();
    if (const auto named = parse_step_dir(dir_name))
      ECHO_INPUT_CHECK(*named == meta.step, "'step' = {} but the checkpoint directory is {}", meta.step, dir_name);
    return meta;
  } catch (const nlohmann::json::exception& e) {
    ECHO_INPUT_FAIL("trainer state '{}' is malformed: {}", path.string(), json_error_text(e));
  } catch (const Error& e) {
    ECHO_INPUT_FAIL("trainer state '{}' is malformed: {}", path.string(), e.message());
  }
}

// Where a checkpoint keeps the optimizer moments and the trainer state: <dir>/trainer/, or <dir>
// itself for checkpoints written before the subfolder existed (still loadable, same files).
// NOTE: anything at the state's name counts (is_absent, not is_regular_file): a directory or a
// FIFO there is refused by its reader as unreadable, not called a missing trainer state.
fs::path trainer_files(const fs::path& dir) {
  if (!is_absent((dir / kTrainerDir / kStateFile).string())) return dir / kTrainerDir;
  if (!is_absent((dir / kStateFile).string())) {
    ECHO_INFO("train", "checkpoint '{}' has the old layout (trainer files beside model.safetensors): loading it",
              dir.string());
    return dir;
  }
  ECHO_INPUT_FAIL(
      "checkpoint '{}' has no {}/{}: not an echo training checkpoint (a Hugging Face model folder? use "
      "run.init_from)",
      dir.string(), kTrainerDir, kStateFile);
}

// Removes stale .tmp / incomplete checkpoints and all but the newest keep_last complete ones
// (never `current`). Best effort: a failure is a warning, the new checkpoint is already complete.
void prune(const fs::path& root, const fs::path& current, int keep_last) {
  std::vector<std::pair<int64_t, fs::path>> complete;
  std::vector<fs::path> stale;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory(ec) || entry.path() == current) continue;
    bool tmp = false;
    const auto step = echo_checkpoint_step(name, tmp);
    if (!step) continue;
    if (tmp || !is_complete(entry.path()))
      stale.push_back(entry.path());
    else
      complete.emplace_back(*step, entry.path());
  }
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  // The current checkpoint counts as one of the kept ones.
  for (size_t i = static_cast<size_t>(std::max(keep_last - 1, 0)); i < complete.size(); ++i)
    stale.push_back(complete[i].second);
  for (const auto& dir : stale) {
    fs::remove_all(dir, ec);
    if (ec) ECHO_WARN("train", "could not remove old checkpoint '{}': {}", dir.string(), ec.message());
  }
}

// Puts the finished tmp_dir in place as final_dir. A save of a step already on disk (after a
// resume from it) swaps the two directories in one renameat2(RENAME_EXCHANGE), then removes the
// older save, now under the .tmp name: a crash at any point leaves a complete checkpoint of the
// step (a stale .tmp is pruned by the next save). A file system that cannot exchange (NFS) gets
// remove-then-rename, with that short window.
void publish(const fs::path& tmp_dir, const fs::path& final_dir) {
  std::error_code ec;
  if (!fs::exists(final_dir, ec)) {
    fs::rename(tmp_dir, final_dir);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp_dir, ec);
    if (ec) ECHO_WARN("train", "could not remove the replaced checkpoint '{}': {}", tmp_dir.string(), ec.message());
    return;
  }
  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
}

// config.json is hashed at save, but a load does not read it (trainer_state.json holds the config)
// and a user may edit it for transformers: a change is said, not refused. "" when it matches.
std::string hf_config_change(const CheckpointChecksums& sums, const std::string& ckpt_dir, const fs::path& dir) {
  const auto stored = sums.files.find(kHfConfigFile);
  if (stored == sums.files.end()) return {};
  const fs::path path = dir / kHfConfigFile;
  std::error_code error;
  const char* what = nullptr;
  if (!fs::is_regular_file(path, error)) {
    what = "is missing or not a file";
  } else {
    try {
      if (xxh3_64(read_text(path)) != stored->second) what = "does not match its checksum (edited or damaged)";
    } catch (const Error&) {
      what = "cannot be read";
    }
  }
  if (what == nullptr) return {};
  return fmt::format(
      "checkpoint '{}': {} {}; echo does not read it (trainer/{} holds the config), but Hugging Face "
      "tools loading this folder do",
      ckpt_dir, kHfConfigFile, what, kStateFile);
}

// A resume trains on from the checkpoint's tensors as master weights and moments, and echo
// writes them all as F32: another dtype means the file was replaced (a bf16 export copied over
// it) and resuming would go on from rounded weights without a word. echo_eval reads any float.
void check_resume_dtypes(const SafetensorsFile& file, bool moments) {
  for (const std::string& name : file.names()) {
    const StTensorInfo& info = file.info(name);
    if (info.dtype == StDtype::f32) continue;
    const std::string what = fmt::format(
        "'{}': tensor '{}' is {}, but echo writes every tensor of a checkpoint as F32: the file was "
        "replaced",
        file.path(), name, st_dtype_name(info.dtype));
    if (moments)
      ECHO_INPUT_FAIL(
          "{}, and a resume would train on with rounded AdamW moments; restore the file echo wrote, or "
          "start a new run from the checkpoint's weights with run.init_from (without its moments)",
          what);
    ECHO_INPUT_FAIL(
        "{} (by a {} export?), and a resume would train on from rounded weights; start a new run from "
        "these weights with run.init_from instead",
        what, st_dtype_name(info.dtype));
  }
}

}  // namespace

std::string checkpoint_dir(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / step_dir_name(step)).string();
}

std::string longest_checkpoint_path(const std::string& run_dir, int64_t last_step) {
  // The optimizer file in the trainer folder of the save's .tmp directory: the files are written
  // there under their final names (no temp names inside), then the folder is renamed.
  return (fs::path(checkpoint_dir(run_dir, last_step) + std::string(kTmpSuffix)) / kTrainerDir / kOptimizerFile)
      .string();
}

void save_checkpoint(const std::string& run_dir, const model::ParameterSet<float>& params, const AdamW& opt,
                     const CheckpointMeta& meta, const dist::World& world, int keep_last) {
  // Preconditions, identical on every rank: failing here needs no agreement.
  ECHO_CHECK(keep_last >= 1, "keep_last = {} must be >= 1", keep_last);
  ECHO_CHECK(meta.step >= 0, "checkpoint step {} must be >= 0", meta.step);
  ECHO_CHECK(!run_dir.empty(), "the run directory is empty");
  const dist::Layout& layout = world.layout;
  check_shards(params, &opt, layout.tp);
  const ShapeSummary shape = summarize(params);
  const config::Config cfg = checked_config(meta.config_yaml, shape);

  const fs::path root = fs::path(run_dir) / "checkpoints";
  const fs::path final_dir = checkpoint_dir(run_dir, meta.step);
  const fs::path tmp_dir = final_dir.string() + std::string(kTmpSuffix);
  const bool writer = layout.rank == 0;  // tp_rank 0 of dp_rank 0
  std::string error;

  std::optional<SafetensorsWriter> model_out, opt_out;
  if (writer) {
    try {
      fs::create_directories(root);
      fs::remove_all(tmp_dir);
      fs::create_directory(tmp_dir);
      fs::create_directory(tmp_dir / kTrainerDir);
      std::vector<StTensorSpec> model_specs, opt_specs;
      for (size_t i = 0; i < params.size(); ++i) {
        const auto& spec = *params[i].spec;
        model_specs.push_back({spec.name, StDtype::f32, spec.full_shape});
        for (const char* suffix : kMomentSuffix)
          opt_specs.push_back({spec.name + suffix, StDtype::f32, spec.full_shape});
      }
      model_out.emplace((tmp_dir / kModelFile).string(), model_specs, StMetadata{{"format", "pt"}});
      opt_out.emplace((tmp_dir / kTrainerDir / kOptimizerFile).string(), opt_specs, StMetadata{{"format", "pt"}});
    } catch (const std::exception& e) {
      error = fmt::format("cannot start checkpoint '{}': {}", tmp_dir.string(), error_text(e));
    }
  }

  // DP replicas are identical: only dp_rank 0 gathers. The writer keeps taking part in every
  // gather after a write error (the sink swallows it) so no TP peer is left waiting.
  if (layout.dp_rank == 0) {
    auto sink_into = [&](std::optional<SafetensorsWriter>& out, size_t tensor_idx) -> PieceSink {
      return [&out, tensor_idx, &error](int64_t offset, std::span<const float> values) {
        if (!error.empty()) return;
        try {
          out->write(tensor_idx, offset, values);
        } catch (const std::exception& e) {
          error = error_text(e);
        }
      };
    };
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& spec = *params[i].spec;
      // Host copies (the tensors themselves on the CPU backend).
      auto& be = params.backend();
      gather_full_tensor(spec, host_span<float>(be.to_host(params[i].value)), world.tp, sink_into(model_out, i));
      gather_full_tensor(spec, host_span<float>(be.to_host(opt.exp_avg(i))), world.tp, sink_into(opt_out, 2 * i));
      gather_full_tensor(spec, host_span<float>(be.to_host(opt.exp_avg_sq(i))), world.tp,
                         sink_into(opt_out, 2 * i + 1));
    }
  }

  if (writer && error.empty()) {
    try {
      model_out->close();
      opt_out->close();
      nlohmann::ordered_json state = {{"format", kStateFormat},
                                      {"version", kStateVersion},
                                      {"step", meta.step},
                                      {"data_position", meta.data_position}};
      if (meta.consumed_samples) state["consumed_samples"] = *meta.consumed_samples;
      if (meta.train_data_hash) state["train_data_xxh3"] = checksum_hex(*meta.train_data_hash);
      state["seed"] = meta.seed;
      state["tp"] = layout.tp;
      state["dp"] = layout.dp;
      state["optimizer_step"] = opt.step_count();
      state["model"] = shape_json(shape);
      state["config_yaml"] = meta.config_yaml;
      const std::string state_text = state.dump(2) + "\n", config_text = hf_config_json(shape, cfg);
      write_file_synced(tmp_dir / kTrainerDir / kStateFile, state_text);
      write_file_synced(tmp_dir / kHfConfigFile, config_text);
      // Hashed from the files as written (mapped back, still in the page cache), so the sums
      // cover what is on disk; the JSON files from the text just written, which is the same.
      CheckpointChecksums sums;
      constexpr auto kWhole = data::MappedFile::Access::whole_file;  // every byte hashed once
      sums.safetensors[kModelFile] = checksum_safetensors(SafetensorsFile((tmp_dir / kModelFile).string(), kWhole));
      sums.safetensors[trainer_rel(kOptimizerFile)] =
          checksum_safetensors(SafetensorsFile((tmp_dir / kTrainerDir / kOptimizerFile).string(), kWhole));
      sums.files[kHfConfigFile] = xxh3_64(config_text);
      sums.files[trainer_rel(kStateFile)] = xxh3_64(state_text);
      write_file_synced(tmp_dir / kTrainerDir / kChecksumsFile, checksums_json(sums));
      echo::fsync_path((tmp_dir / kTrainerDir).string(), true);
      // The marker goes in before the rename: a .tmp directory never counts, whatever it holds,
      // so the checkpoint appears complete in one step.
      write_file_synced(tmp_dir / kCompleteFile, fmt::format("step {}\n", meta.step));
      echo::fsync_path(tmp_dir.string(), true);
    } catch (const std::exception& e) {
      error = fmt::format("cannot write checkpoint '{}': {}", tmp_dir.string(), error_text(e));
    }
  }
  model_out.reset();
  opt_out.reset();

  // Barrier 1: every file of the checkpoint is on disk in the .tmp directory.
  std::string agreed = agree(world.world, error, "the checkpoint save's first barrier (every file written)");
  if (!agreed.empty()) {
    if (writer) {
      std::error_code ec;
      fs::remove_all(tmp_dir, ec);
    }
    throw_if(agreed, Failure::save);
  }

  if (writer) {
    try {
      publish(tmp_dir, final_dir);
      echo::fsync_path(root.string(), true);
      prune(root, final_dir, keep_last);
      ECHO_INFO("train", "saved checkpoint of step {} to {}", meta.step, final_dir.string());
    } catch (const std::exception& e) {
      error = fmt::format("cannot complete checkpoint '{}': {}", final_dir.string(), error_text(e));
    }
  }
  // Barrier 2: the checkpoint is complete (visible to latest_checkpoint) when any rank returns.
  throw_if(agree(world.world, error, "the checkpoint save's second barrier (the checkpoint published)"), Failure::save);
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  std::optional<std::pair<int64_t, fs::path>> best;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory(ec)) continue;
    const auto step = parse_step_dir(entry.path().filename().string());
    if (!step || !is_complete(entry.path())) continue;
    if (!best || *step > best->first) best.emplace(*step, entry.path());
  }
  if (!best) return std::nullopt;
  return best->second.string();
}

bool is_echo_checkpoint_name(const std::string& name) {
  bool tmp = false;
  return echo_checkpoint_step(name, tmp).has_value();
}

std::vector<std::string> foreign_step_dirs(const std::string& run_dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && name.starts_with(kStepPrefix) && !name.ends_with(kTmpSuffix) && !parse_step_dir(name))
      found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

ForeignStepName foreign_step_reason(const std::string& name) {
  const std::string digits = name.substr(std::min(name.size(), kStepPrefix.size()));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return {"not step_ followed by digits"};
  if (digits.size() < 8) return {fmt::format("{} digits, where echo writes at least 8", digits.size())};
  const size_t significant = digits.size() - std::min(digits.find_first_not_of('0'), digits.size() - 1);
  if (significant > 18) return {fmt::format("a step of {} digits, beyond any run's train.steps", significant), false};
  if (significant < digits.size() && digits.size() > 8)
    return {fmt::format("zeros before the step, where echo writes {}", step_dir_name(std::stoll(digits)))};
  return {"not a name echo gives"};
}

std::vector<std::string> unfinished_checkpoints(const std::string& run_dir, int64_t newer_than) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::vector<std::string> found;
  std::error_code ec;
  if (!fs::exists(root, ec)) return found;
  fs::directory_iterator it(root, ec);
  ECHO_INPUT_CHECK(!ec, "cannot list the checkpoints in {}: {}", root.string(), ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    ECHO_INPUT_CHECK(!ec, "cannot list the checkpoints in {}: {}", root.string(), ec.message());
    const auto step = parse_step_dir(it->path().filename().string());
    if (step && *step > newer_than && !is_complete(it->path())) found.push_back(it->path().string());
  }
  ECHO_INPUT_CHECK(!ec, "cannot list the checkpoints in {}: {}", root.string(), ec.message());
  std::sort(found.begin(), found.end());
  return found;
}

namespace {

// Checksums came first (2026-12-02): a state with a field of 2026-12-06 was written with them, so a
// missing checksums.json was removed, and with it every check of the tensors (a swapped or edited
// tensor loaded with a warning calling the checkpoint old).
void refuse_removed_checksums(bool has_checksums, const CheckpointMeta& meta, const std::string& ckpt_dir) {
  ECHO_INPUT_CHECK(has_checksums || (!meta.consumed_samples && !meta.train_data_hash),
                   "checkpoint '{}' has no {}/{}, but its trainer state records {}, which only trainers that write "
                   "checksums record: the file was removed, and without it nothing verifies the tensors; put it "
                   "back, or use another checkpoint",
                   ckpt_dir, kTrainerDir, kChecksumsFile,
                   meta.consumed_samples ? "consumed_samples" : "train_data_xxh3");
}

}  // namespace

CheckpointMeta read_checkpoint_meta(const std::string& ckpt_dir) {
  const fs::path dir(ckpt_dir);
  ECHO_INPUT_CHECK(is_complete(dir), "checkpoint '{}' is incomplete (no {} marker): it was not fully written", ckpt_dir,
                   kCompleteFile);
  int64_t optimizer_step = 0;
  const fs::path state_path = trainer_files(dir) / kStateFile;
  const std::string state_text = read_text(state_path);
  const auto sums = read_checkpoint_checksums(dir.string());
  if (sums) verify_file(*sums, ckpt_dir, trainer_rel(kStateFile), state_text);
  CheckpointMeta meta = parse_state(state_path, state_text, optimizer_step);
  refuse_removed_checksums(sums.has_value(), meta, ckpt_dir);
  return meta;
}

CheckpointMeta load_checkpoint(const std::string& ckpt_dir, model::ParameterSet<float>& params, AdamW* opt,
                               const dist::World& world) {
  const int tp = world.layout.tp, tp_rank = world.layout.tp_rank;
  const fs::path dir(ckpt_dir);
  std::string error;
  CheckpointMeta meta;
  int64_t optimizer_step = 0;
  std::optional<SafetensorsFile> model_file, opt_file;
  TensorFiles model_index, opt_index;
  std::vector<Target> model_targets, opt_targets;
  bool verified = false;
  std::string hf_config_note;  // rank 0
  try {
    ECHO_INPUT_CHECK(fs::is_directory(dir), "checkpoint directory '{}' does not exist", ckpt_dir);
    ECHO_INPUT_CHECK(is_complete(dir), "checkpoint '{}' is incomplete (no {} marker): it was not fully written",
                     ckpt_dir, kCompleteFile);
    check_shards(params, opt, tp);
    const fs::path trainer_dir = trainer_files(dir);
    // Each file is checked against its checksums before it is parsed, so a corrupt one is named as
    // such rather than by whatever its damage breaks. The trainer state is tiny: every rank hashes
    // it; the tensors are split over the world (tensor i by world rank i % world size), and a
    // mismatch found on any rank reaches every rank through the agreement below. config.json is
    // only compared, with a warning (hf_config_change).
    const std::optional<CheckpointChecksums> sums = read_checkpoint_checksums(dir.string());
    verified = sums.has_value();
    if (sums && world.world.rank() == 0) hf_config_note = hf_config_change(*sums, ckpt_dir, dir);
    ChecksumShare share{world.world.rank(), world.world.size(), 0};
    const std::string state_text = read_text(trainer_dir / kStateFile);
    if (sums) {
      verify_file(*sums, ckpt_dir, trainer_rel(kStateFile), state_text);
    }
    meta = parse_state(trainer_dir / kStateFile, state_text, optimizer_step);
    refuse_removed_checksums(sums.has_value(), meta, ckpt_dir);
    model_file.emplace((dir / kModelFile).string());
    if (sums) share.first_item += verify_safetensors(*sums, ckpt_dir, kModelFile, *model_file, share);
    model_index = index_of(*model_file);
    model_targets = param_targets(params);
    check_targets(model_index, model_targets, {}, model_file->path());
    if (opt != nullptr) {
      check_resume_dtypes(*model_file, /*moments=*/false);
      opt_file.emplace((trainer_dir / kOptimizerFile).string());
      if (sums) verify_safetensors(*sums, ckpt_dir, trainer_rel(kOptimizerFile), *opt_file, share);
      opt_index = index_of(*opt_file);
      for (size_t i = 0; i < params.size(); ++i) {
        const auto& spec = *params[i].spec;
        opt_targets.push_back(make_target(spec.name + kMomentSuffix[0], &spec, opt->exp_avg(i)));
        opt_targets.push_back(make_target(spec.name + kMomentSuffix[1], &spec, opt->exp_avg_sq(i)));
      }
      check_targets(opt_index, opt_targets, {}, opt_file->path());
      check_resume_dtypes(*opt_file, /*moments=*/true);
    }
  } catch (const std::exception& e) {
    error = fmt::format("cannot load checkpoint: {}", error_text(e));
  }
  throw_if(agree(world.world, error, "the checkpoint load's agreement on its files"), Failure::load);
  if (!verified && world.world.rank() == 0)
    ECHO_WARN("train",
              "checkpoint '{}' has no {}/{} (written before checkpoints carried checksums): its contents cannot be "
              "verified",
              ckpt_dir, kTrainerDir, kChecksumsFile);
  if (!hf_config_note.empty()) ECHO_WARN("train", "{}", hf_config_note);

  std::string read_error = read_targets(model_index, model_targets, tp, tp_rank);
  if (read_error.empty() && opt != nullptr) read_error = read_targets(opt_index, opt_targets, tp, tp_rank);
  throw_if(agree(world.world, read_error.empty() ? "" : "cannot load checkpoint: " + read_error,
                 "the checkpoint load's agreement on its reads"),
           Failure::load);
  params.refresh_compute_weights();
  if (opt != nullptr) opt->set_step_count(optimizer_step);
  ECHO_INFO("train", "loaded checkpoint of step {} (written at tp = {}, dp = {}) from {}", meta.step, meta.tp, meta.dp,
            ckpt_dir);
  return meta;
}

}  // namespace echo::train
