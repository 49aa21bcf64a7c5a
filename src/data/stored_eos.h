// Whether a dataset's documents already end in the EOS (echo_prep --append-eos, Megatron's
// --append-eod): a sampled look at the documents' last tokens, and the one rule echo_train and
// echo_eval use to set LoaderOptions::eos_stored (packed as stored, or an EOS appended to each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset_meta.h"

namespace echo::data {

class IndexedDataset;

// Documents looked at: enough that a dataset mixing documents with and without a final EOS is
// caught unless nearly all have one, few enough to cost milliseconds (one token read each).
inline constexpr size_t kMaxEosChecks = 4096;

// min(num_documents, max_checks) distinct document indices spread evenly over the dataset,
// ascending, always the first and the last.
std::vector<size_t> eos_check_documents(size_t num_documents, size_t max_checks = kMaxEosChecks);

// A checked document that does not end in the EOS.
struct MissingEos {
  size_t document = 0;
  std::optional<int32_t> last_token;  // nullopt: the document is empty
};

// The first of eos_check_documents() whose last token is not eos_id (an empty document has
// none), or nullopt when all of them end in it. Reads only each checked document's last token.
std::optional<MissingEos> find_document_without_eos(const IndexedDataset& ds, int32_t eos_id);

// "ends in token 17" or "is empty", for messages.
std::string describe_missing_eos(const MissingEos& m);

// The loader's eos_stored for `ds` (named `role` in the log, e.g. "data.train"): with a sidecar,
// its append_eos (the loader verifies that claim); without one (Megatron's tools), true when
// every checked document ends in eos_id, which is logged, so --append-eod data does not get a
// second EOS after each document.
bool decide_eos_stored(const IndexedDataset& ds, const std::optional<DatasetMeta>& meta, int32_t eos_id,
                       const std::string& role);

}  // namespace echo::data
