// The output directory of a run: refuse to write over another run unless told (--resume
// continues it, --overwrite replaces it), and say so on every rank at once.
#pragma once

#include <string>

#include "dist/communicator.h"

namespace echo::train {

enum class RunDirMode { fresh, resume, overwrite };

// Collective: rank 0 inspects out_dir and creates it, and every rank throws the same echo::Error
// when out_dir holds another run and mode is fresh (or, for resume, when its checkpoints/ is not
// a directory). Returns true when out_dir holds an earlier run (to resume, or for overwrite to
// clear with clear_run_dir once start-up has succeeded: a failed start keeps the old run).
bool prepare_run_dir(const std::string& out_dir, RunDirMode mode, const dist::Communicator& world);

// Rank 0, for --overwrite, after start-up succeeded: removes the old run's config.yaml,
// metrics.jsonl and checkpoints/.
void clear_run_dir(const std::string& out_dir);

}  // namespace echo::train
