// Byte-level BPE: a word (the bytes of one pre-token) -> ids, by applying merges in rank order,
// with a shared cache of words already seen.
//
// Algorithm (as Hugging Face tokenizers' Word::merge_all): start from one symbol per byte (its
// byte-level character's vocab id); keep a min-heap of adjacent pairs keyed by (merge rank,
// position); pop the best pair, skip it when either side was merged away since it was pushed,
// else merge and push the two new neighbour pairs. Ties go to the leftmost pair, which is what
// GPT-2's reference and the HF/JS implementations produce. O(n log n) per word.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace echo::tokenizer {

struct BpeOptions {
  // When set, a word that is itself in the vocab is one id, without merging (Llama 3 style).
  bool ignore_merges = false;
  // Vocab id used for a byte whose character is not in the vocab; -1: that is an error.
  int32_t unk_id = -1;
};

class BpeModel {
 public:
  // `vocab`: byte-level strings -> ids. `merges`: pairs in rank order (rank = index). Throws
  // echo::Error (prefixed with `what`) for a merge whose parts or result are not in the vocab.
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options, const std::string& what);
  ~BpeModel();

  // Appends the ids of `word` (raw bytes; the byte-level mapping is applied here). Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  // (left id, right id) -> (rank, merged id) in one open-addressing table (linear probing,
  // at most half full): a lookup is one or two cache lines, where std::unordered_map chases a
  // node pointer; merge lookups are most of the encoding time.
  class MergeTable {
   public:
    struct Entry {
      uint64_t key = kEmpty;
      int32_t rank = 0;
      int32_t id = 0;
    };
    explicit MergeTable(std::size_t num_merges);
    // Keeps the first insert of a key (the best rank), as the reference implementations do.
    void insert(int32_t left, int32_t right, int32_t rank, int32_t id);
    const Entry* find(int32_t left, int32_t right) const;

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are < 2^31, so no pair has this key
    static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
    std::size_t slot(uint64_t k) const { return (k * 0x9E3779B97F4A7C15ull) >> shift_; }
    std::vector<Entry> entries_;
    std::size_t mask_ = 0;
    int shift_ = 0;
  };
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_{};  // vocab id of each byte's character, -1 when absent
  BpeOptions options_;
  std::string what_;

  class Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace echo::tokenizer
