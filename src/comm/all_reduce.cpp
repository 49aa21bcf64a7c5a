// Tensor entry point of the all-reduce interface and the site names used in errors and logs.
#include "comm/all_reduce.h"

#include "comm/segment_reduce.h"
#include "core/error.h"

namespace echo::comm {

const char* to_string(Direction d) { return d == Direction::forward ? "forward" : "backward"; }

std::string to_string(const Site& s) { return fmt::format("{} site {}", to_string(s.direction), s.index); }

void AllReduce::all_reduce(Tensor& x, Site site) {
  ECHO_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16,
             "all-reduce at {} needs an f32 or bf16 tensor, got {}", to_string(site), x.describe());
  ECHO_CHECK(x.is_contiguous(), "all-reduce at {} needs a contiguous tensor, got {}", to_string(site), x.describe());
  if (x.is_cpu() && x.dtype() == DType::f32) {
    all_reduce(std::span<float>(x.data<float>(), static_cast<size_t>(x.numel())), site);
    return;
  }
  // Host-staged: a device or bf16 tensor is summed as fp32 on the host and written back (rounded
  // once to bf16). NOTE: Tensor's device copies run on the legacy default stream, which orders
  // them after the CUDA backend's (blocking) stream.
  Tensor host = x.to(Device::cpu).to(DType::f32);
  all_reduce(std::span<float>(host.data<float>(), static_cast<size_t>(host.numel())), site);
  x.copy_from(host.to(x.dtype()));
}

std::string describe(const AllReduce& ar) {
  return ar.engine() ? ar.name() + " over " + ar.engine()->transport() : ar.name();
}

}  // namespace echo::comm
