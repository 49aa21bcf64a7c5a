// Training checkpoints (docs/design.md §14): full, Hugging Face-named fp32 tensors gathered from
// the TP shards, the AdamW moments, and the trainer state, written atomically; loaded into any
// tp × dp layout. The initialisation from a Hugging Face Qwen3 checkpoint is in hf_weights.h.
//
// Layout of <run_dir>/checkpoints/step_<8 digits>/, a clean Hugging Face model folder (the only
// *.safetensors in it is the model, so loaders that glob, like vLLM, pick up nothing else):
//   model.safetensors      every parameter, full tensor, F32, HF name; __metadata__ {"format":"pt"};
//                          a tied lm_head is not written (HF tie_word_embeddings)
//   config.json            a Hugging Face Qwen3Config, so Qwen3ForCausalLM.from_pretrained(dir) loads
//   trainer/optimizer.safetensors  "<name>.exp_avg", "<name>.exp_avg_sq", full tensors, F32
//   trainer/trainer_state.json     step, data_position, consumed_samples, train_data_xxh3, seed, tp, dp,
//   optimizer_step, model shape,
//                                  config_yaml
//   trainer/checksums.json         XXH3-64 of every tensor's bytes and each safetensors header in
//                                  the two .safetensors files, and of the two JSON files whole
//                                  (layout in checksums.h), hashed by the writer from the files
//                                  as written, before COMPLETE
//   COMPLETE               written last; a directory without it is never resumed
// Checkpoints of the older layout (optimizer.safetensors and trainer_state.json beside the model)
// still load.
//
// Integrity: loading verifies the checksums before anything is modified (a mismatch is refused on
// every rank naming the file and tensor), the tensors split over the world: tensor i by world rank
// i % world size. A checkpoint without checksums.json (written before they existed) loads with a
// warning that it cannot be verified.
//
// Atomicity: everything is written into step_<N>.tmp, synced, the COMPLETE marker last; then
// (after the world agrees that the write succeeded) the directory is renamed to step_<N>. A crash
// at any point leaves a .tmp directory, which latest_checkpoint ignores and the next successful
// save removes. A step_<N> without COMPLETE is therefore damage (or the work of an older echo that
// wrote the marker after the rename): it is ignored by latest_checkpoint and refused by
// load_checkpoint, and a --resume refuses to pass over one newer than the latest complete
// checkpoint, whose step a later save would overwrite.
//
// Failure handling: errors are agreed over the world communicator (an all-reduce of a flag and a
// broadcast of the first failing rank's message), so a failure on one rank (a full disk on the
// writer, a bad tensor on a reader) throws the same echo::Error on every rank instead of leaving
// the others waiting in a collective.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/world.h"
#include "model/parameters.h"
#include "train/adamw.h"

namespace echo::train {

struct CheckpointMeta {
  int64_t step = 0;            // training steps completed
  uint64_t data_position = 0;  // the trainer writes the step and checks it (kept for older readers)
  uint64_t seed = 0;
  int tp = 1, dp = 1;       // the layout that wrote it (informational: loading takes any layout)
  std::string config_yaml;  // the effective config (config::to_yaml); may be empty
  // Training samples read before the next step, the data position of a resume (Megatron-LM's
  // consumed_samples): the sum of every step's global batch, which a resume may change. Absent in
  // checkpoints written before 2026-12-06, whose position was step x global_batch.
  std::optional<uint64_t> consumed_samples;
  // data.train's content hash (data/content_hash.h), which a resume compares; absent before 2026-12-06.
  std::optional<uint64_t> train_data_hash;
};

// "<run_dir>/checkpoints/step_00000042"
std::string checkpoint_dir(const std::string& run_dir, int64_t step);
// The longest path a save of a step up to `last_step` names (trainer/optimizer.safetensors in the
// step's .tmp directory; checkpoint_mpi_test walks a saved folder to keep it so): the trainer
// refuses a run_dir that makes it reach PATH_MAX before the first step.
std::string longest_checkpoint_path(const std::string& run_dir, int64_t last_step);

// Writes the checkpoint of `meta.step` as described above and keeps only the newest `keep_last`
// (>= 1) complete checkpoints by step, never deleting the one just written; stale .tmp and
// incomplete directories are removed too. An existing complete checkpoint of the same step is
// replaced. Collective over world.world: the dp_rank 0 ranks gather over world.tp (MPI_Gather,
// one chunk of rows at a time, so memory stays bounded), world rank 0 (tp_rank 0 of dp_rank 0)
// writes; then two agreements on world (each an MPI_Allreduce, plus an MPI_Bcast of the message
// on failure). When it returns on any rank, the checkpoint is complete on disk.
// trainer_state.json records world.layout's tp and dp (meta.tp / meta.dp are not used here).
// Preconditions (checked on every rank before any collective): params and opt are this rank's
// shards for world.layout.tp; meta.config_yaml, when not empty, parses and describes the same
// model as params (config.json takes rope_theta, rms_norm_eps and model.max_position_embeddings
// from it; the config defaults when empty).
void save_checkpoint(const std::string& run_dir, const model::ParameterSet<float>& params, const AdamW& opt,
                     const CheckpointMeta& meta, const dist::World& world, int keep_last);

// The newest (highest step) complete checkpoint directory under run_dir/checkpoints, or nullopt.
// Not collective: reads the directory of the calling rank. NOTE: every rank must see the same
// file system for a resume to agree; where that is not certain, call it on rank 0 and broadcast.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

// Whether `name` is one echo gives a checkpoint directory: step_<8+ digits> of a step, or that
// name with the .tmp of a save in progress. --overwrite removes only these from checkpoints/.
bool is_echo_checkpoint_name(const std::string& name);

// The directories under run_dir/checkpoints named step_* that echo did not name (step_6,
// step_best: a user's copy or rename; .tmp ones excluded), sorted. Every checkpoint function
// ignores them: a save never prunes them, latest_checkpoint never picks one. Not collective.
std::vector<std::string> foreign_step_dirs(const std::string& run_dir);
// Why a step_* name (one foreign_step_dirs lists) is not echo's, in words: not digits after
// step_, fewer than 8 digits, zeros before an 8-digit step, or a step beyond what a run reaches
// (which no renaming makes a checkpoint to resume: `renamable` is false then).
struct ForeignStepName {
  std::string reason;
  bool renamable = true;
};
ForeignStepName foreign_step_reason(const std::string& name);

// The step directories under run_dir/checkpoints that carry no COMPLETE marker (.tmp ones, which a
// save in progress leaves, excluded) and whose step is above `newer_than`, sorted. Throws an
// echo::InputError when run_dir/checkpoints exists but cannot be listed. Not collective.
std::vector<std::string> unfinished_checkpoints(const std::string& run_dir, int64_t newer_than = -1);

// The trainer state of a complete checkpoint (either layout), without loading any tensor; for the
// resume checks that must run before the model is touched. Checks trainer_state.json against
// trainer/checksums.json when there is one. Not collective.
CheckpointMeta read_checkpoint_meta(const std::string& ckpt_dir);

// Loads a checkpoint written by save_checkpoint into this rank's shards, whatever tp and dp wrote
// it: every rank maps the full tensors and takes its shard by ParamSpec::global_index. With
// opt != nullptr also the moments and the optimizer step count. Refuses, on every rank, a
// directory without COMPLETE, a file or tensor that does not match trainer/checksums.json (or a
// malformed one), a missing tensor, an unexpected one (a tied/untied or layer-count mismatch) or
// a shape that differs from the model, naming the tensor and both shapes; nothing is modified
// unless every rank validated everything. Collective over world.world (one
// agreement after validation). Returns the stored meta.
CheckpointMeta load_checkpoint(const std::string& ckpt_dir, model::ParameterSet<float>& params, AdamW* opt,
                               const dist::World& world);

}  // namespace echo::train
