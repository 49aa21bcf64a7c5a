// The sampled check that documents end in the EOS, and the eos_stored rule (data/stored_eos.h).
#include "data/stored_eos.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "data/indexed_dataset.h"

namespace echo::data {

std::vector<size_t> eos_check_documents(size_t num_documents, size_t max_checks) {
  ECHO_CHECK(max_checks >= 2, "eos_check_documents: max_checks must be at least 2, got {}", max_checks);
  const size_t n = std::min(num_documents, max_checks);
  std::vector<size_t> docs(n);
  // Document i * (D - 1) / (n - 1): 0 and D - 1 at the ends, strictly increasing since n <= D.
  // 128-bit so that i * (D - 1) cannot wrap for any D.
  for (size_t i = 0; i < n; ++i)
    docs[i] = n == 1 ? 0 : static_cast<size_t>(static_cast<unsigned __int128>(i) * (num_documents - 1) / (n - 1));
  return docs;
}

std::optional<MissingEos> find_document_without_eos(const IndexedDataset& ds, int32_t eos_id) {
  const auto offsets = ds.document_offsets();
  for (const size_t d : eos_check_documents(ds.num_documents())) {
    if (offsets[d + 1] == offsets[d]) return MissingEos{d, std::nullopt};
    int32_t last = 0;
    ds.copy_tokens(offsets[d + 1] - 1, 1, &last);
    if (last != eos_id) return MissingEos{d, last};
  }
  return std::nullopt;
}

std::string describe_missing_eos(const MissingEos& m) {
  return m.last_token ? fmt::format("ends in token {}", *m.last_token) : std::string("is empty");
}

bool decide_eos_stored(const IndexedDataset& ds, const std::optional<DatasetMeta>& meta, int32_t eos_id,
                       const std::string& role) {
  if (meta) {
    // Obeyed, but said: text whose documents end in the EOS's own spelling (a literal
    // "<|endoftext|>" in the JSONL) is tokenized to the EOS, so the loader adds a second one.
    if (!meta->append_eos && ds.num_documents() > 0 && !find_document_without_eos(ds, eos_id))
      ECHO_WARN("data",
                "{} ({}): all {} documents checked (of {}) already end in data.eos_id = {}, but its sidecar '{}' says "
                "the EOS was not stored (\"append_eos\": false), so a second one is packed after each; if the text "
                "itself ends in the EOS token, remove it from the documents and run echo_prep again",
                role, ds.prefix(), eos_check_documents(ds.num_documents()).size(), ds.num_documents(), eos_id,
                meta->path);
    return meta->append_eos;
  }
  // NOTE: documents of a dataset without the EOS end in ordinary text, so all of up to 4096
  // sampled ones ending in eos_id means the EOS is stored; appending would put two in a row.
  if (ds.num_documents() == 0 || find_document_without_eos(ds, eos_id)) return false;
  ECHO_INFO("data",
            "{} ({}): all {} documents checked (of {}) already end in data.eos_id = {} (prepared with the EOS "
            "stored, as Megatron's --append-eod does): packed as stored, without a second EOS after each",
            role, ds.prefix(), eos_check_documents(ds.num_documents()).size(), ds.num_documents(), eos_id);
  return true;
}

}  // namespace echo::data
