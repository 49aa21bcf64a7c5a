// CpuBackend's memory accounting: the scratch it takes by itself, and the start-up check of the
// plan against the host's memory (host_memory_check.h).
#include <algorithm>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host_memory_check.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/log.h"

namespace echo::backend {

CpuBackend::CpuBackend(int ranks_on_node) : ranks_on_node_(ranks_on_node) {
  ECHO_CHECK(ranks_on_node >= 1, "CpuBackend: ranks on the node must be at least 1, got {}", ranks_on_node);
}

size_t CpuBackend::workspace_bytes(int64_t, int64_t seq, int64_t, int64_t, int64_t, int64_t) const {
  // backend/cpu/attention.cpp: forward holds one (seq, seq) matrix, backward two (P and dP), per
  // head in turn, whatever the batch and heads; they are not tensors, so the plan must add them.
  return 2 * static_cast<size_t>(seq) * static_cast<size_t>(seq) * sizeof(float);
}

quant::Int8LinearScratch CpuBackend::int8_scratch_bytes(const quant::Int8LinearConfig& cfg, int64_t rows,
                                                        int64_t in, int64_t out, int64_t) const {
  // backend/cpu/int8_linear.cpp's heap buffers, freed by the end of the call: backward's G' (f32),
  // Q (int8) and, with EC, E (f32), all (rows, out), beside one int32 GEMM result at a time, dX's
  // (rows, in) or dW's (out, in), and the row maxima, (rows + out) f32; forward's (rows, out) int32
  // result is smaller than these. With them quickstart in int8 peaks as far above its plan as in
  // bf16 (the measurements in docs/design.md).
  const auto r = static_cast<size_t>(rows), i = static_cast<size_t>(in), o = static_cast<size_t>(out);
  const size_t per_output = sizeof(float) + sizeof(int8_t) + (cfg.ec != config::EcMode::none ? sizeof(float) : 0);
  return {per_output * r * o + sizeof(int32_t) * std::max(r, o) * i + sizeof(float) * (r + o), 0};
}

void CpuBackend::reserve(size_t bytes, const std::string& what, const std::string& levers) {
  const std::optional<size_t> available = host_memory_available_bytes();
  if (!available) {
    // NOTE: never refuse on unknown: a container without /proc/meminfo must still train.
    log::get("backend")->warn("cannot read MemAvailable from /proc/meminfo: not checking that {} ({} rank(s) on "
                              "this node) fits in host memory", what, ranks_on_node_);
    return;
  }
  check_fits_host_memory(bytes, ranks_on_node_, *available, what, levers);
}

}  // namespace echo::backend
