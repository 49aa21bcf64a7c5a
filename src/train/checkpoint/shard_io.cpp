// TP shard <-> full tensor: chunked gathers for saving, index-mapped reads for loading.
#include "train/checkpoint/shard_io.h"

#include <mpi.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::train {

void gather_full_tensor(const model::ParamSpec& spec, std::span<const float> local, const dist::Communicator& tp,
                        const PieceSink& sink, int64_t chunk_elems) {
  const int num_ranks = tp.size();
  ECHO_CHECK(static_cast<int64_t>(local.size()) == spec.local_numel(num_ranks),
             "tensor '{}': the shard holds {} elements, but shape {} at tp = {} has {}", spec.name, local.size(),
             format_shape(spec.local_shape(num_ranks)), num_ranks, spec.local_numel(num_ranks));
  const bool sharded = spec.shard == model::ShardKind::column || spec.shard == model::ShardKind::vocab ||
                       spec.shard == model::ShardKind::row;
  if (!sharded || num_ranks == 1) {
    if (tp.rank() == 0) sink(0, local);
    return;
  }
  const auto shape = spec.local_shape(num_ranks);
  ECHO_CHECK(shape.size() == 2, "tensor '{}': sharded tensors must be matrices, got shape {}", spec.name,
             format_shape(spec.full_shape));
  const int64_t rows = shape[0], cols = shape[1];
  const int64_t chunk_rows = std::max<int64_t>(1, chunk_elems / std::max<int64_t>(cols, 1));
  ECHO_CHECK(chunk_rows * cols <= INT32_MAX, "tensor '{}': a row of {} elements is too long for one MPI_Gather",
             spec.name, cols);
  const bool root = tp.rank() == 0;
  std::vector<float> recv(root ? static_cast<size_t>(std::min(chunk_rows, rows) * cols * num_ranks) : 0);
  std::vector<float> full_rows;  // row-parallel: the assembled full rows of one chunk
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t nr = std::min(chunk_rows, rows - r0);
    const int count = static_cast<int>(nr * cols);
    // Slow: tp rank 0 writes each chunk to disk before it comes to the next gather.
    const dist::CollectiveScope watched("the checkpoint save's shard gather (MPI_Gather to tp rank 0)", tp,
                                        dist::Patience::slow);
    MPI_CHECK(MPI_Gather(local.data() + r0 * cols, count, MPI_FLOAT, recv.data(), count, MPI_FLOAT, 0, tp.get()));
    if (!root) continue;
    if (spec.shard == model::ShardKind::row) {
      // (nr, cols) blocks in rank order -> (nr, cols * tp) full rows
      const int64_t full_cols = cols * num_ranks;
      full_rows.resize(static_cast<size_t>(nr * full_cols));
      for (int r = 0; r < num_ranks; ++r)
        for (int64_t i = 0; i < nr; ++i)
          std::copy_n(recv.data() + r * count + i * cols, cols, full_rows.data() + i * full_cols + r * cols);
      sink(r0 * full_cols, full_rows);
    } else {
      // rank r's local rows [r0, r0 + nr) are full rows r * rows + [r0, r0 + nr)
      for (int r = 0; r < num_ranks; ++r)
        sink((r * rows + r0) * cols, std::span<const float>(recv.data() + static_cast<size_t>(r) * count, count));
    }
  }
}

void read_shard(const SafetensorsFile& file, const std::string& name, const model::ParamSpec& spec, int tp, int tp_rank,
                std::span<float> out) {
  const int64_t n = spec.local_numel(tp);
  ECHO_CHECK(static_cast<int64_t>(out.size()) == n, "tensor '{}': the shard holds {} elements, expected {} at tp = {}",
             name, out.size(), n, tp);
  // Copy maximal runs of consecutive global indices (whole shard for column/vocab/replicated,
  // one local row for row-parallel).
  int64_t i = 0;
  while (i < n) {
    const int64_t g = spec.global_index(i, tp, tp_rank);
    int64_t j = i + 1;
    while (j < n && spec.global_index(j, tp, tp_rank) == g + (j - i)) ++j;
    file.read_f32(name, g, out.subspan(static_cast<size_t>(i), static_cast<size_t>(j - i)));
    i = j;
  }
}

}  // namespace echo::train
