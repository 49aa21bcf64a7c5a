// The output directory of a run: refuse to write over another run unless told (--resume
// continues it, --overwrite replaces it), and say so on every rank at once.
#pragma once

#include <string>

#include "dist/communicator.h"

namespace echo::train {

enum class RunDirMode { fresh, resume, overwrite };

// Collective: rank 0 inspects (and for overwrite clears) out_dir, creates it, and every rank
// throws the same echo::Error when out_dir holds another run and mode is fresh. Returns true
// when there is an earlier run to resume.
bool prepare_run_dir(const std::string& out_dir, RunDirMode mode, const dist::Communicator& world);

}  // namespace echo::train
