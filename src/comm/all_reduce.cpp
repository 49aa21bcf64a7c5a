// Tensor entry point of the all-reduce interface and the site names used in errors and logs.
#include "comm/all_reduce.h"

#include "core/error.h"

namespace echo::comm {

const char* to_string(Direction d) { return d == Direction::forward ? "forward" : "backward"; }

std::string to_string(const Site& s) { return fmt::format("{} site {}", to_string(s.direction), s.index); }

void AllReduce::all_reduce(Tensor& x, Site site) {
  ECHO_CHECK(x.dtype() == DType::f32, "all-reduce at {} needs an fp32 tensor, got {}", to_string(site),
             to_string(x.dtype()));
  ECHO_CHECK(x.device() == Device::cpu, "the MPI all-reduce at {} needs a cpu tensor", to_string(site));
  ECHO_CHECK(x.is_contiguous(), "all-reduce at {} needs a contiguous tensor", to_string(site));
  all_reduce(std::span<float>(x.data<float>(), static_cast<size_t>(x.numel())), site);
}

}  // namespace echo::comm
