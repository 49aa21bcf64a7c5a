// Moving one parameter between its TP shards and its full tensor, as the TP plan lays it out:
//   column / vocab  rank r holds full rows [r·rows/tp, (r+1)·rows/tp)
//   row             rank r holds full columns [r·cols/tp, (r+1)·cols/tp) of every row
//   replicated*     every rank holds the whole tensor; rank 0's copy is the one saved
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "dist/communicator.h"
#include "model/tp_plan.h"
#include "train/checkpoint/safetensors.h"

namespace echo::train {

// Receives a contiguous piece of a full row-major tensor: (element offset, values).
using PieceSink = std::function<void(int64_t offset, std::span<const float> values)>;

constexpr int64_t kGatherChunkElems = int64_t{1} << 22;  // 16 MiB of fp32 per rank per MPI_Gather

// Collective over tp: every rank passes its shard `local` of `spec` (spec.local_shape(tp.size())).
// On tp rank 0, `sink` receives pieces that cover the full tensor exactly once, in increasing
// offset for row-parallel tensors; other ranks' sink is never called. Sharded tensors move in
// MPI_Gather calls of at most max(chunk_elems, one local row) elements per rank, so memory on
// rank 0 stays at tp chunks whatever the tensor's size. Replicated tensors issue no call.
// NOTE: if sink throws, the other ranks are left inside the gather: callers catch in the sink.
void gather_full_tensor(const model::ParamSpec& spec, std::span<const float> local, const dist::Communicator& tp,
                        const PieceSink& sink, int64_t chunk_elems = kGatherChunkElems);

// This rank's shard of `spec` at (tp, tp_rank), read from the full tensor `name` of `file` (whose
// shape the caller has checked against spec.full_shape) and converted to fp32.
void read_shard(const SafetensorsFile& file, const std::string& name, const model::ParamSpec& spec, int tp, int tp_rank,
                std::span<float> out);

}  // namespace echo::train
