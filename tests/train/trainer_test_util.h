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

#include "data/dataset_meta.h"
#include "data/indexed_dataset.h"
#include "../support/mpi_util.h"
#include "../support/scratch_dir.h"

namespace echo::testing {

// Rank 0 creates <tmp>/<prefix>_<tag>_<pid>/data/<split>.{bin,idx} for each split (60 documents
// over ids 0..56 from `seed`; `edit(doc_idx, doc)` may change a document) and broadcasts the path.
// The directory is removed when the test program exits.
inline std::string make_scratch_datasets(const std::string& prefix, const std::string& tag, uint64_t seed,
                                         const std::vector<std::string>& splits,
                                         const std::function<void(int, std::vector<int32_t>&)>& edit = {}) {
  namespace fs = std::filesystem;
  std::string dir;
  if (world_rank() == 0) {
    dir = fs::temp_directory_path() / (prefix + "_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir + "/data");
    remove_at_exit(dir);
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

// Rank 0 writes the sidecar echo_prep would write beside `prefix` (data/dataset_meta.h) for a
// tokenizer of `vocab` ids whose EOS is `eos`, once every rank is done with the old one; every
// rank returns once it is in place.
inline void write_scratch_sidecar(const std::string& prefix, int64_t vocab, int64_t eos,
                                  const std::string& tokenizer_sha256 = std::string(64, 'a'),
                                  bool append_eos = false) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    const auto ds = data::IndexedDataset::open(prefix);
    data::DatasetMeta m;
    m.tokenizer = "test-tokenizer.json";
    m.tokenizer_sha256 = tokenizer_sha256;
    m.vocab_size = vocab;
    m.eos_id = eos;
    m.eos_source = "special added token \"<|test|>\"";
    m.append_eos = append_eos;
    m.documents = ds.num_documents();
    m.tokens = ds.num_tokens();
    data::write_dataset_meta(prefix, m);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace echo::testing
