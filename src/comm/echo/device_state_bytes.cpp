// device_echo_state_bytes (device_state_bytes.h): in step with CudaDeviceEcho's buffers.
#include "comm/echo/device_state_bytes.h"

#include <algorithm>

#include "comm/echo/quantize.h"

namespace echo::comm {

size_t device_echo_state_bytes(const config::CommConfig& cfg, int tp, size_t n, bool forward_only) {
  // two_collective is Echo's arithmetic over the unpipelined path: the same engine and buffers.
  const bool echo =
      cfg.allreduce == config::AllReduceKind::echo || cfg.allreduce == config::AllReduceKind::two_collective;
  if (!echo || tp <= 1 || n == 0) return 0;
  const size_t directions = (cfg.forward ? 1 : 0) + (cfg.backward && !forward_only ? 1 : 0);
  if (directions == 0) return 0;
  // The widest codec any site uses: early_site_8bit gives the first sites 8 bits.
  const int bits = cfg.early_site_8bit ? std::max(cfg.bits, 8) : cfg.bits;
  const size_t wire = bits >= 16 ? 2 * n : wire_bytes(n, cfg.quant_spec(bits));
  const size_t f32 = n * sizeof(float);
  return directions * 2 * f32 + 2 * f32 + 4 * wire;
}

}  // namespace echo::comm
