// Whether a program's output (--json, --csv, --dump-batch) would overwrite a file that a run, a
// checkpoint or a dataset needs, and the names of a run directory's own files that this depends on
// (train/run_dir.h writes them). An output once replaced the newest checkpoint's model.safetensors,
// a run's metrics (killing the live run) and a training set's .bin, with exit status 0.
#pragma once

#include <string>

namespace echo {

// The lock file rank 0 holds in a run directory while it trains (train::RunDirLock): what marks a
// folder as a run directory.
inline constexpr const char* kRunLockFile = ".echo_train.lock";
// What a run writes beside its lock file, and what --overwrite clears (train::clear_run_dir).
inline constexpr const char* kRunEntries[] = {"config.yaml", "metrics.jsonl", "checkpoints"};

// Why an existing file at `path` (links followed) is one a run, a checkpoint or a dataset needs,
// or "": a weights file (*.safetensors, a sharded index), a dataset's .bin, .idx or .meta.json
// (beside its .bin and .idx), or, in a run directory (a folder holding the lock file), its
// config.yaml, metrics.jsonl, lock file or anything under checkpoints/. A path that does not exist
// is never needed.
std::string needed_file(const std::string& path);

}  // namespace echo
