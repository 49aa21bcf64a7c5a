// The replicated weights (the blocks' RMSNorm weights, the final norm, q_norm, k_norm) must
// stay identical on every rank of a TP group; drift there is a silent bug. This check hashes
// them and compares the hashes across the group.
#pragma once

#include <string>

#include "dist/communicator.h"
#include "model/parameters.h"

namespace echo::model {

// Names of the replicated parameters whose values differ somewhere in the TP group (empty when
// all agree). Collective over tp.
template <class T>
std::vector<std::string> diverged_replicas(const ParameterSet<T>& params, const dist::Communicator& tp);

}  // namespace echo::model
