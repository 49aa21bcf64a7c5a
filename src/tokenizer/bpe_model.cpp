// Byte-level BPE merges with a sharded, bounded word cache.
#include "tokenizer/bpe_model.h"

#include <bit>
#include <functional>
#include <queue>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace echo::tokenizer {

// Words -> ids, split into shards with one mutex each so encoding threads rarely contend. A shard
// that fills up is emptied (simpler than LRU; natural text refills the hot words at once).
class BpeModel::Cache {
 public:
  static constexpr std::size_t kNumShards = 64;
  static constexpr std::size_t kShardCapacity = 4096;
  // Long words rarely repeat; caching them would only evict the short ones that do.
  static constexpr std::size_t kMaxWordBytes = 256;

  bool lookup(std::string_view word, std::vector<int32_t>& out) {
    if (word.size() > kMaxWordBytes) return false;
    Shard& shard = shard_for(word);
    std::lock_guard lock(shard.mutex);
    const auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view word, const int32_t* ids, std::size_t n) {
    if (word.size() > kMaxWordBytes) return;
    std::string key(word);  // allocate before taking the lock
    std::vector<int32_t> value(ids, ids + n);
    Shard& shard = shard_for(word);
    std::lock_guard lock(shard.mutex);
    if (shard.map.size() >= kShardCapacity) shard.map.clear();
    shard.map.emplace(std::move(key), std::move(value));
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  Shard& shard_for(std::string_view word) {
    // NOTE: the shard index uses the hash's high bits; the map buckets use the low ones.
    return shards_[(std::hash<std::string_view>{}(word) >> 40) % kNumShards];
  }
  std::array<Shard, kNumShards> shards_;
};

BpeModel::MergeTable::MergeTable(std::size_t num_merges) {
  std::size_t capacity = 16;
  while (capacity < 2 * num_merges) capacity *= 2;
  entries_.resize(capacity);
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
}

void BpeModel::MergeTable::insert(int32_t left, int32_t right, int32_t rank, int32_t id) {
  const uint64_t k = key(left, right);
  for (std::size_t i = slot(k);; i = (i + 1) & mask_) {
    if (entries_[i].key == k) return;
    if (entries_[i].key == kEmpty) {
      entries_[i] = Entry{k, rank, id};
      return;
    }
  }
}

const BpeModel::MergeTable::Entry* BpeModel::MergeTable::find(int32_t left, int32_t right) const {
  const uint64_t k = key(left, right);
  for (std::size_t i = slot(k);; i = (i + 1) & mask_) {
    if (entries_[i].key == k) return &entries_[i];
    if (entries_[i].key == kEmpty) return nullptr;
  }
}

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& what)
    : vocab_(std::move(vocab)),
      merges_(merges.size()),
      options_(options),
      what_(what),
      cache_(std::make_unique<Cache>()) {
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, kByteToCodepoint[b]);
    const auto it = vocab_.find(ch);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto a = vocab_.find(left), b = vocab_.find(right), ab = vocab_.find(left + right);
    ECHO_INPUT_CHECK(a != vocab_.end() && b != vocab_.end(),
                     "{}: merge {} ({:?} {:?}) uses a token missing from model.vocab", what, rank, left, right);
    ECHO_INPUT_CHECK(ab != vocab_.end(), "{}: merge {} ({:?} {:?}) makes {:?}, which is missing from model.vocab", what,
                     rank, left, right, left + right);
    merges_.insert(a->second, b->second, static_cast<int32_t>(rank), ab->second);
  }
}

BpeModel::~BpeModel() = default;

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  // merge_word indexes symbols with int32 (half the memory of size_t per byte of a long word).
  ECHO_INPUT_CHECK(word.size() <= static_cast<std::size_t>(INT32_MAX),
                   "{}: a pre-token of {} bytes (2 GiB or more without a space, digit or punctuation that the "
                   "pre-tokenizer splits at) is longer than BPE encodes, 2^31 - 1 bytes: split the document",
                   what_, word.size());
  if (cache_->lookup(word, out)) return;
  const std::size_t start = out.size();
  if (options_.ignore_merges) {
    const auto it = vocab_.find(bytes_to_byte_level(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      cache_->insert(word, out.data() + start, 1);
      return;
    }
  }
  merge_word(word, out);
  cache_->insert(word, out.data() + start, out.size() - start);
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
    bool alive;
  };
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    const auto byte = static_cast<unsigned char>(word[i]);
    int32_t id = byte_ids_[byte];
    if (id < 0) {
      ECHO_INPUT_CHECK(options_.unk_id >= 0,
                       "{}: byte 0x{:02x} has no token in model.vocab and the model has no unk_token", what_, byte);
      id = options_.unk_id;
    }
    symbols[i] = Symbol{id, i - 1, i + 1 < n ? i + 1 : -1, true};
  }

  struct Candidate {
    int32_t rank;
    int32_t pos;  // the left symbol
    int32_t id;   // what the pair merges into
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    if (const auto* m = merges_.find(symbols[left].id, symbols[right].id)) queue.push(Candidate{m->rank, left, m->id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    // Stale entry: the left symbol was absorbed, or either side changed since the push.
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const auto* m = merges_.find(left.id, right.id);
    if (m == nullptr || m->rank != top.rank) continue;
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace echo::tokenizer
