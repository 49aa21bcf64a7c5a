// What the device Echo engine (device_qar.h) keeps on the GPU for the block sites' all-reduce, for
// the memory plan (model/memory_plan.h): the start-up reservation must hold it too, or a run that
// passed the check fails at its first Echo site (found by reading: about 0.4 GiB for Qwen3-0.6B
// at 8 x 2048 tokens, tp 2, beyond the backend's fixed headroom).
#pragma once

#include <cstddef>

#include "core/config/config.h"

namespace echo::comm {

// Bytes for calls of up to n values at a TP group of `tp` ranks: m1 and m2 of each quantized
// direction (forward, and backward unless `forward_only`) and x' and a work copy (f32), and the
// send, receive, own-code and gathered buffers of the two-collective path, counted as four times
// the whole tensor's wire bytes (a bound on their sum: the receive and own-code buffers hold
// segments, the send and gathered ones a whole tensor's codes plus each segment's padding to its
// groups). 0 when the block sites do not run Echo (comm.allreduce echo or
// two_collective) or tp is 1.
size_t device_echo_state_bytes(const config::CommConfig& cfg, int tp, size_t n, bool forward_only);

}  // namespace echo::comm
