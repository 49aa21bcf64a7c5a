// Shared by the trainer tests: a scratch directory, the same on every rank, holding small random
// indexed datasets whose documents repeat a pattern (so the loss can fall).
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "../support/mpi_util.h"

namespace echo::testing {

// Rank 0 creates <tmp>/<prefix>_<tag>_<pid>/data/<split>.{bin,idx} for each split (60 documents
// over ids 0..56 from `seed`; `edit(doc_idx, doc)` may change a document) and broadcasts the path.
inline std::string make_scratch_datasets(const std::string& prefix, const std::string& tag, uint64_t seed,
                                         const std::vector<std::string>& splits,
                                         const std::function<void(int, std::vector<int32_t>&)>& edit = {}) {
  namespace fs = std::filesystem;
  std::string dir;
  if (world_rank() == 0) {
    dir = fs::temp_directory_path() / (prefix + "_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir + "/data");
    std::mt19937_64 gen(seed);
    for (const std::string& split : splits) {
      data::IndexedDatasetWriter w(dir + "/data/" + split);
      for (int d = 0; d < 60; ++d) {
        std::vector<int32_t> doc(5 + gen() % 40);
        const int32_t base = static_cast<int32_t>(gen() % 50);
        for (size_t i = 0; i < doc.size(); ++i) doc[i] = base + static_cast<int32_t>(i % 7);
        if (edit) edit(d, doc);
        w.add_document(doc);
      }
      w.finalize();
    }
  }
  int len = static_cast<int>(dir.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dir.resize(len);
  MPI_Bcast(dir.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  return dir;
}

}  // namespace echo::testing
