// DataLoader: packing, per-epoch sample order and the DP split (design in data_loader.h).
#include "data/data_loader.h"

#include <algorithm>
#include <limits>
#include <mutex>

#include "core/error.h"
#include "data/dataset_meta.h"
#include "data/sample_permutation.h"
#include "data/stored_eos.h"

namespace echo::data {

struct DataLoader::OrderCache {
  std::mutex mutex;
  uint64_t epoch = 0;
  std::shared_ptr<const SamplePermutation> order;  // null until the first sample
};

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

DataLoader::DataLoader(const IndexedDataset& ds, LoaderOptions opt)
    : ds_(&ds), opt_(opt), cache_(std::make_unique<OrderCache>()) {
  ECHO_CHECK(opt_.seq_len >= 1, "{}: data loader: seq_len must be at least 1, got {}", ds.prefix(), opt_.seq_len);
  ECHO_CHECK(opt_.dp_size >= 1, "{}: data loader: dp_size must be at least 1, got {}", ds.prefix(), opt_.dp_size);
  ECHO_CHECK(opt_.dp_rank >= 0 && opt_.dp_rank < opt_.dp_size, "{}: data loader: dp_rank {} out of range [0, {})",
             ds.prefix(), opt_.dp_rank, opt_.dp_size);
  ECHO_CHECK(opt_.eos_id >= 0, "{}: data loader: eos_id must be a token id >= 0, got {}", ds.prefix(), opt_.eos_id);
  ECHO_INPUT_CHECK(ds.num_documents() > 0, "{}: empty dataset (0 documents)", ds.prefix());
  if (opt_.eos_stored) {
    // Packed as stored, a document without its EOS runs into the next one unseparated; a sampled
    // check (one token per document looked at) catches a sidecar that claims what is not so.
    if (const auto missing = find_document_without_eos(ds, opt_.eos_id))
      ECHO_INPUT_FAIL(
          "{}: the documents are taken to end in the EOS {} (its sidecar {} says \"append_eos\": true), but "
          "document {} of {} {}: packed as stored, it would run into the next document without a separator; "
          "re-prepare the data with echo_prep, or delete the sidecar to have the EOS appended after each document",
          ds.prefix(), opt_.eos_id, dataset_meta_path(ds.prefix()), missing->document, ds.num_documents(),
          describe_missing_eos(*missing));
  }
  stream_length_ = static_cast<uint64_t>(ds.num_tokens()) + (opt_.eos_stored ? 0 : ds.num_documents());
  const uint64_t seq_len = static_cast<uint64_t>(opt_.seq_len);
  // NOTE: stream_length_ >= 1, so this cannot wrap: appending gives each of the >= 1 documents an
  // EOS, and stored, the first document (always checked above) ends in one.
  num_samples_ = (stream_length_ - 1) / seq_len;
  ECHO_INPUT_CHECK(
      num_samples_ >= 1,
      "{}: too little data: {} tokens in {} documents pack (with EOS) into a stream of {} tokens, fewer than "
      "one sample of seq_len + 1 = {} tokens",
      ds.prefix(), ds.num_tokens(), ds.num_documents(), stream_length_, seq_len + 1);
  ECHO_INPUT_CHECK(num_samples_ <= std::numeric_limits<uint32_t>::max(),
                   "{}: {} samples of seq_len {} per epoch; the epoch order holds at most 2^32 - 1", ds.prefix(),
                   num_samples_, seq_len);
}

void DataLoader::read_stream(uint64_t pos, size_t count, int32_t* out) const {
  ECHO_CHECK(pos <= stream_length_ && count <= stream_length_ - pos,
             "{}: stream range [{}, {}) out of range ({} tokens)", ds_->prefix(), pos, pos + count, stream_length_);
  if (opt_.eos_stored) {  // the stored tokens are the stream
    ds_->copy_tokens(pos, count, out);
    return;
  }
  // Document d occupies stream [offsets[d] + d, offsets[d+1] + d + 1): its tokens, then EOS.
  const auto offsets = ds_->document_offsets();
  const size_t num_docs = ds_->num_documents();
  // The document holding `pos`: the last d with offsets[d] + d <= pos.
  size_t lo = 0, hi = num_docs;  // invariant: start(lo) <= pos, answer in [lo, hi)
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (offsets[mid] + mid <= pos)
      lo = mid;
    else
      hi = mid;
  }
  size_t doc = lo;
  while (count > 0) {
    const uint64_t doc_start = offsets[doc] + doc;
    const uint64_t doc_len = offsets[doc + 1] - offsets[doc];
    const uint64_t in_doc = pos - doc_start;  // 0..doc_len; doc_len is the EOS
    if (in_doc < doc_len) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(doc_len - in_doc, count));
      ds_->copy_tokens(offsets[doc] + in_doc, n, out);
      out += n;
      pos += n;
      count -= n;
    } else {
      *out++ = opt_.eos_id;
      ++pos;
      --count;
      ++doc;
    }
  }
}

uint64_t DataLoader::packed_index(uint64_t global_index) const {
  const uint64_t epoch = global_index / num_samples_;
  std::shared_ptr<const SamplePermutation> order;
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (!cache_->order || cache_->epoch != epoch) {
      cache_->order = std::make_shared<const SamplePermutation>(num_samples_, opt_.seed + epoch);
      cache_->epoch = epoch;
    }
    order = cache_->order;  // a reader keeps its epoch alive even if another thread moves on
  }
  return (*order)(global_index % num_samples_);
}

void DataLoader::sample(uint64_t global_index, int32_t* tokens, int32_t* targets) const {
  ECHO_CHECK(tokens != nullptr && targets != nullptr, "{}: sample(): null output buffer", ds_->prefix());
  const uint64_t packed = packed_index(global_index);
  const size_t seq_len = static_cast<size_t>(opt_.seq_len);
  const uint64_t start = packed * seq_len;
  read_stream(start, seq_len, tokens);
  std::copy(tokens + 1, tokens + seq_len, targets);
  read_stream(start + seq_len, 1, targets + seq_len - 1);
}

void DataLoader::micro_batch(uint64_t batch_start, int micro, int micro_batch, int num_micro,
                             std::vector<int32_t>& tokens, std::vector<int32_t>& targets) const {
  ECHO_CHECK(micro_batch >= 1, "{}: micro_batch must be at least 1, got {}", ds_->prefix(), micro_batch);
  ECHO_CHECK(num_micro >= 1, "{}: num_micro must be at least 1, got {}", ds_->prefix(), num_micro);
  ECHO_CHECK(micro >= 0 && micro < num_micro, "{}: micro-batch {} out of range [0, {})", ds_->prefix(), micro,
             num_micro);
  const uint64_t per_rank = static_cast<uint64_t>(micro_batch) * static_cast<uint64_t>(num_micro);
  const uint64_t first = batch_start + static_cast<uint64_t>(opt_.dp_rank) * per_rank +
                         static_cast<uint64_t>(micro) * static_cast<uint64_t>(micro_batch);
  const size_t seq_len = static_cast<size_t>(opt_.seq_len);
  tokens.resize(static_cast<size_t>(micro_batch) * seq_len);
  targets.resize(static_cast<size_t>(micro_batch) * seq_len);
  for (int b = 0; b < micro_batch; ++b)
    sample(first + static_cast<uint64_t>(b), tokens.data() + b * seq_len, targets.data() + b * seq_len);
  check_batch(tokens, targets);
}

void DataLoader::check_batch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) const {
  constexpr const char* kAdvice =
      "the batches read since then may not be the data the run started on (echo_prep replaces a dataset "
      "by writing new files and renaming them, which is safe; copying over the files is not): restore the data "
      "and --resume from a checkpoint saved before the change";
  const std::string changed = ds_->bin_change_since_open();
  ECHO_INPUT_CHECK(changed.empty(), "dataset '{}': {} changed while this run was reading it ({}); {}", ds_->prefix(),
                   ds_->bin_path(), changed, kAdvice);
  if (opt_.vocab_size <= 0) return;
  for (const std::vector<int32_t>* ids : {&tokens, &targets})
    for (const int32_t id : *ids)
      ECHO_INPUT_CHECK(id >= 0 && id < opt_.vocab_size,
                       "dataset '{}': token id {} read from {} lies outside [0, 'model.vocab_size' = {}), though every "
                       "token was checked when the run opened it: the file changed under the run; {}",
                       ds_->prefix(), id, ds_->bin_path(), opt_.vocab_size, kAdvice);
}

}  // namespace echo::data
