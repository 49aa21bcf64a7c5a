// NcclAllReduce: ncclAllReduce over the group's NcclGroup.
#include "comm/nccl_all_reduce.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "comm/nccl_group.h"
#include "core/error.h"
#include "dist/mpi_check.h"

namespace echo::comm {

NcclAllReduce::NcclAllReduce(const dist::Communicator& group, ExactPrecision precision)
    : group_(NcclGroup::for_group(group)), precision_(precision), size_(group.size()) {}

NcclAllReduce::~NcclAllReduce() = default;

void NcclAllReduce::all_reduce(Tensor& x, Site site) {
  ECHO_CHECK(x.is_cuda() && x.is_contiguous(), "the NCCL all-reduce at {} needs a contiguous device tensor, got {}",
             to_string(site), x.describe());
  ECHO_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16,
             "the NCCL all-reduce at {} needs an f32 or bf16 tensor, got {}", to_string(site), x.describe());
  const size_t n = static_cast<size_t>(x.numel());
  if (precision_ == ExactPrecision::bf16 || x.dtype() == DType::f32) {
    group_->all_reduce(x.raw(), n, x.dtype(), backend::ReduceOp::sum, cudaStreamLegacy);
    return;
  }
  // NOTE: NCCL's bf16 sum rounds at every hop of the ring; the fp32 sum of a bf16 tensor rounds once.
  work_.reduce(x, [&](float* values, size_t count) {
    group_->all_reduce(values, count, DType::f32, backend::ReduceOp::sum, cudaStreamLegacy);
  });
}

void NcclAllReduce::all_reduce(std::span<float> x, Site site) {
  (void)x;
  ECHO_FAIL("the NCCL all-reduce at {} was given host memory; it sums device tensors only", to_string(site));
}

size_t NcclAllReduce::wire_bytes_per_rank(size_t n, Site) const {
  const size_t wire_bytes = precision_ == ExactPrecision::bf16 ? 2 : 4;
  return size_ <= 1 ? 0 : 2 * (static_cast<size_t>(size_) - 1) * n * wire_bytes / static_cast<size_t>(size_);
}

bool ranks_have_distinct_gpus(const dist::Communicator& group) {
  // "<host>/<pci bus id>" of this rank's current device, fixed width for MPI_Allgather.
  std::array<char, 192> mine{};
  int device = 0;
  char bus[64] = {};
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess)
    std::snprintf(bus, sizeof bus, "unknown-device");
  char host[100] = {};
  gethostname(host, sizeof host - 1);
  std::snprintf(mine.data(), mine.size(), "%s/%s", host, bus);
  std::vector<char> all(mine.size() * static_cast<size_t>(group.size()));
  MPI_CHECK(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(),
                          static_cast<int>(mine.size()), MPI_CHAR, group.get()));
  std::vector<std::string> ids;
  for (int r = 0; r < group.size(); ++r) ids.emplace_back(all.data() + static_cast<size_t>(r) * mine.size());
  std::sort(ids.begin(), ids.end());
  return std::adjacent_find(ids.begin(), ids.end()) == ids.end();
}

}  // namespace echo::comm
