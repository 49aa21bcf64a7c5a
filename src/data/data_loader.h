// The training data loader (docs/design.md §3, §12): packs the documents of an indexed dataset
// into fixed-length samples, orders them by a seeded per-epoch permutation and hands each DP rank
// its disjoint share of every global batch (every TP rank of a DP group gets the same batch).
//
// Packing. The stream is doc_0 EOS doc_1 EOS ... doc_{D-1} EOS (N + D tokens for N tokens in
// D documents), or the N stored tokens alone when the documents already end in EOS (eos_stored). Sample k is
// stream[k*L, k*L + L + 1) for seq_len L: inputs are its first L tokens, targets its last L, so consecutive samples
// overlap by one token (as Megatron's GPTDataset and llm.c) and no token position is lost as a target.
// samples_per_epoch = floor((stream length - 1) / L); the tail that does not fill a sample is dropped. Documents are
// not cut at sample boundaries: a long document continues in the next sample of the stream.
//
// Order. Global sample g belongs to epoch e = g / S (S = samples_per_epoch) and is packed sample
// SamplePermutation(S, seed + e)(g % S): every epoch covers all samples once in a fresh order, and
// the map depends only on (dataset, seq_len, seed), not on the parallel layout or the machine.
// The permutation of the epoch last asked for is cached (4 bytes per sample), guarded by a mutex
// so that const calls stay safe from several threads; a sequential run rebuilds it once per epoch.
//
// Batches. A global batch is G = micro_batch * num_micro * dp_size consecutive global samples
// from the count of samples consumed before it (the trainer's consumed_samples, kept in its
// checkpoints, so a resume with another G goes on where the run stopped). DP rank r owns the
// contiguous block of micro_batch*num_micro samples at r*micro_batch*num_micro in it, micro-batch
// m being the m-th run of micro_batch samples, so DP ranks see disjoint samples and together the
// whole global batch; tp_rank plays no part.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/indexed_dataset.h"

namespace echo::data {

struct LoaderOptions {
  int64_t seq_len = 0;  // tokens per training sequence
  uint64_t seed = 0;    // shuffle seed; epoch e is shuffled with seed + e
  // Appended after every document, unless eos_stored.
  int32_t eos_id = 0;
  int dp_rank = 0, dp_size = 1;
  // The documents already end in eos_id (echo_prep --append-eos, Megatron's --append-eod): the
  // stream is the stored tokens as they are. echo_train and echo_eval set it by one rule
  // (data/stored_eos.h); the constructor refuses it, naming the document, when a sampled
  // document does not end in eos_id.
  bool eos_stored = false;
  // The model's vocabulary (model.vocab_size): every batch's ids are checked against it, 0: not.
  int64_t vocab_size = 0;
};

class DataLoader {
 public:
  // NOTE: keeps a reference to `ds`, which must outlive the loader.
  DataLoader(const IndexedDataset& ds, LoaderOptions opt);
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  const LoaderOptions& options() const { return opt_; }
  uint64_t samples_per_epoch() const { return num_samples_; }
  // Tokens in the packed stream: documents plus one EOS each (unless stored).
  uint64_t stream_length() const { return stream_length_; }

  // The global sample with this index (any index: epochs wrap): tokens and targets, seq_len each.
  void sample(uint64_t global_index, int32_t* tokens, int32_t* targets) const;

  // This DP rank's micro-batch `micro` of the global batch that starts at global sample
  // `batch_start` (the samples consumed before it): global samples batch_start + dp_rank *
  // micro_batch * num_micro + micro * micro_batch + [0, micro_batch). tokens and targets are
  // resized to (micro_batch, seq_len), row-major. Throws an InputError naming the .bin when it was
  // rewritten in place since the dataset was opened, or when an id lies outside [0, vocab_size)
  // (see check_batch).
  void micro_batch(uint64_t batch_start, int micro, int micro_batch, int num_micro, std::vector<int32_t>& tokens,
                   std::vector<int32_t>& targets) const;

  // Packed stream tokens [pos, pos + count) (documents with EOS after each), for tests and tools.
  void read_stream(uint64_t pos, size_t count, int32_t* out) const;

 private:
  struct OrderCache;  // the cached epoch permutation and its mutex
  // Packed sample index of global sample `global_index`.
  uint64_t packed_index(uint64_t global_index) const;
  // The batch just read is data the run checked at start-up (check_token_range scanned every
  // token): a .bin rewritten in place since then (cp over it keeps the inode, and the mapping is
  // shared) is refused, and so is an id outside the vocabulary, which only such a rewrite brings.
  void check_batch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) const;

  const IndexedDataset* ds_;
  LoaderOptions opt_;
  uint64_t stream_length_ = 0;
  uint64_t num_samples_ = 0;
  std::unique_ptr<OrderCache> cache_;  // behind a pointer so the loader stays movable
};

}  // namespace echo::data
