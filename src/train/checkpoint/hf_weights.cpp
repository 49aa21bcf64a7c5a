// Hugging Face weight loading (see hf_weights.h).
#include "train/checkpoint/hf_weights.h"

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/json_guard.h"
#include "core/log.h"
#include "core/text_file.h"
#include "dist/agreement.h"
#include "train/checkpoint/agreed_failure.h"
#include "train/checkpoint/checksums.h"
#include "train/checkpoint/layout.h"
#include "train/checkpoint/safetensors.h"
#include "train/checkpoint/tensor_targets.h"

namespace echo::train {
namespace {

namespace fs = std::filesystem;
using ckpt::check_shards;
using ckpt::check_targets;
using ckpt::Failure;
using ckpt::index_of;
using ckpt::param_targets;
using ckpt::read_targets;
using ckpt::summarize;
using ckpt::Target;
using ckpt::TensorFiles;
using ckpt::throw_if;

// The files of a Hugging Face checkpoint and which tensor lives in which.
struct HfCheckpoint {
  std::string source;  // for messages
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  TensorFiles tensors;
};

HfCheckpoint open_hf(const std::string& path) {
  HfCheckpoint ck;
  fs::path p(path);
  std::error_code ec;  // the non-throwing forms: a bad name ends in the file's own "cannot open" message
  if (fs::is_directory(p, ec)) {
    // A dangling link (a Hugging Face cache whose blob was removed) counts as there, and its
    // reader then says why it cannot be opened.
    const bool index = !is_absent((p / "model.safetensors.index.json").string());
    const bool single = !is_absent((p / "model.safetensors").string());
    // NOTE: transformers loads model.safetensors when both are there; taking the index would load
    // other weights than it does, with no error.
    ECHO_INPUT_CHECK(!(index && single),
                     "'{}' holds both model.safetensors and model.safetensors.index.json, which may be different "
                     "weights: remove one (transformers would load model.safetensors)",
                     path);
    ECHO_INPUT_CHECK(index || single, "'{}' holds neither model.safetensors nor model.safetensors.index.json", path);
    p /= index ? "model.safetensors.index.json" : "model.safetensors";
  }
  ck.source = p.string();
  if (p.extension() != ".json") {
    ck.files.push_back(std::make_unique<SafetensorsFile>(p.string()));
    ck.tensors = index_of(*ck.files.back());
    return ck;
  }
  nlohmann::json index = read_untrusted_json_file(p.string(), fmt::format("safetensors index '{}'", p.string()));
  ECHO_INPUT_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                   "safetensors index '{}' has no 'weight_map' object", p.string());
  std::map<std::string, const SafetensorsFile*> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    ECHO_INPUT_CHECK(file.is_string(), "safetensors index '{}': weight_map entry '{}' is not a file name", p.string(),
                     name);
    const std::string rel = file.get<std::string>();
    // NOTE: lexical, so a Hugging Face cache snapshot (links into ../../blobs) still loads; an
    // index naming /etc/x or ../other/x would read weights from outside the model folder.
    const fs::path rel_path = fs::path(rel).lexically_normal();
    ECHO_INPUT_CHECK(!rel.empty() && rel_path.is_relative() && *rel_path.begin() != "..",
                     "safetensors index '{}' maps tensor '{}' to '{}', which is not a file in its folder", p.string(),
                     name, rel);
    auto it = by_file.find(rel);
    if (it == by_file.end()) {
      // The checked (normalized) path is the one opened: "sub/../x" with sub a link does not leave.
      ck.files.push_back(std::make_unique<SafetensorsFile>((p.parent_path() / rel_path).string()));
      it = by_file.emplace(rel, ck.files.back().get()).first;
    }
    ECHO_INPUT_CHECK(it->second->contains(name),
                     "safetensors index '{}' maps tensor '{}' to '{}', which does not hold it", p.string(), name,
                     it->second->path());
    ck.tensors[name] = it->second;
  }
  return ck;
}

// The model of one of our checkpoints (trainer/checksums.json beside it) is verified as a resume
// verifies it, split over comm's ranks; any other Hugging Face folder has no checksums to check.
void verify_if_ours(const HfCheckpoint& ck, const dist::Communicator* comm) {
  if (ck.files.size() != 1) return;
  const SafetensorsFile& file = *ck.files.front();
  const fs::path model_path(file.path());
  if (model_path.filename() != ckpt::kModelFile) return;
  const fs::path dir = model_path.has_parent_path() ? model_path.parent_path() : fs::path(".");
  const std::optional<CheckpointChecksums> sums = read_checkpoint_checksums(dir.string());
  if (!sums) return;
  const ChecksumShare share{comm ? comm->rank() : 0, comm ? comm->size() : 1, 0};
  verify_safetensors(*sums, dir.string(), ckpt::kModelFile, file, share);
}

void load_hf(const std::string& path, model::ParameterSet<float>& params, int tp, int tp_rank,
             const dist::Communicator* comm) {
  std::string error;
  HfCheckpoint ck;
  std::vector<Target> targets;
  try {
    check_shards(params, nullptr, tp);
    ck = open_hf(path);
    verify_if_ours(ck, comm);
    targets = param_targets(params);
    const bool tied = summarize(params).tie_embeddings;
    ECHO_INPUT_CHECK(tied || ck.tensors.count("lm_head.weight"),
                     "'{}' has no lm_head.weight but the model has tie_embeddings = false (a tied checkpoint? set "
                     "model.tie_embeddings: true)",
                     ck.source);
    // Harmless extras: a tied lm_head (transformers ignores it too) and old RoPE buffers.
    std::set<std::string> ignored;
    for (const auto& [name, file] : ck.tensors)
      if ((tied && name == "lm_head.weight") || name.ends_with("rotary_emb.inv_freq")) ignored.insert(name);
    check_targets(ck.tensors, targets, ignored, ck.source);
    if (tied && ck.tensors.count("lm_head.weight"))
      ECHO_WARN("train", "'{}' has lm_head.weight but the model ties it to the embedding: ignored", ck.source);
  } catch (const std::exception& e) {
    error = fmt::format("cannot load Hugging Face weights: {}", dist::error_text(e));
  }
  throw_if(comm ? dist::agree(*comm, error, "the run.init_from load's agreement on its files") : error, Failure::load);
  error = read_targets(ck.tensors, targets, tp, tp_rank);
  if (!error.empty()) error = "cannot load Hugging Face weights: " + error;
  throw_if(comm ? dist::agree(*comm, error, "the run.init_from load's agreement on its reads") : error, Failure::load);
  params.refresh_compute_weights();
  ECHO_INFO("train", "initialised {} parameters from {}", targets.size(), ck.source);
}

}  // namespace

void load_hf_weights(const std::string& path, model::ParameterSet<float>& params, const dist::World& world) {
  load_hf(path, params, world.layout.tp, world.layout.tp_rank, &world.world);
}

void load_hf_weights(const std::string& path, model::ParameterSet<float>& params) {
  load_hf(path, params, 1, 0, nullptr);
}

}  // namespace echo::train
