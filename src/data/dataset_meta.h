// The sidecar echo_prep writes beside each dataset, PREFIX.meta.json: which tokenizer and EOS the
// token ids were made with. Why: the loader packs data.eos_id between documents, and nothing in
// PREFIX.bin/.idx says which id that must be; a config whose data.eos_id belongs to another
// tokenizer trains silently on the wrong separator whenever the id lies inside the vocabulary.
// echo_train and echo_eval read the sidecar and refuse a data.eos_id or model.vocab_size that does
// not fit the data (docs/design.md §14). Megatron's loader opens only PREFIX.bin and PREFIX.idx,
// so it never sees the sidecar; a dataset without one (made by Megatron's tools, or before echo
// wrote sidecars) is accepted with a log line that its EOS cannot be checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace echo::data {

class IndexedDataset;

inline constexpr const char* kDatasetMetaFormat = "echo-dataset-meta";
inline constexpr int kDatasetMetaVersion = 1;
// A sidecar is a few hundred bytes; a larger file at that name is not one.
inline constexpr size_t kMaxDatasetMetaBytes = 1 << 20;

struct DatasetMeta {
  std::string tokenizer;         // echo_prep's --tokenizer as given: "byte" or a path
  std::string tokenizer_sha256;  // of the tokenizer.json read; empty for "byte" (nothing read)
  int64_t vocab_size = 0;        // the tokenizer's: one past its largest id
  int64_t eos_id = -1;           // the document separator the data was made for
  std::string eos_source;        // why that token (tokenizer/hf_eos.h's rule, or --eos-token)
  bool append_eos = false;       // echo_prep --append-eos: documents already end in eos_id
  uint64_t documents = 0;        // of PREFIX.idx, to spot a sidecar left beside other data
  uint64_t tokens = 0;
  std::string path;  // the sidecar read from (not written); names it in errors
};

// PREFIX.meta.json.
std::string dataset_meta_path(const std::string& prefix);
// PREFIX.meta.json.tmp: where write_dataset_meta writes before its rename.
std::string dataset_meta_tmp_path(const std::string& prefix);

// The sidecar's JSON text (format, version, then the fields above but path).
std::string dataset_meta_json(const DatasetMeta& meta);

// Writes PREFIX.meta.json through a temporary file and a rename, like the .idx: a reader sees the
// old sidecar, none, or the whole new one. Throws echo::RunError naming the file on failure.
void write_dataset_meta(const std::string& prefix, const DatasetMeta& meta);

// Parses sidecar text read from `path`; throws echo::InputError naming `path`, the problem and
// the fix for text that is not JSON, not this format or version, or lacks or mistypes a field.
DatasetMeta parse_dataset_meta(std::string_view text, const std::string& path);

// The sidecar of PREFIX, or nullopt when there is none.
std::optional<DatasetMeta> read_dataset_meta(const std::string& prefix);

// What the run does with the data: the EOS it packs and the rows its model has.
struct TokenSettings {
  int64_t eos_id = -1;
  std::string eos_source;  // where eos_id came from, for messages ("data.eos_id of the config")
  int64_t vocab_size = 0;  // model.vocab_size
};

// Reads `ds`'s sidecar and refuses (echo::InputError naming `role` ("data.train"), the sidecar,
// each value with its source, and the fix) a run whose data.eos_id differs from the data's EOS,
// whose model.vocab_size is below the tokenizer's, or a sidecar whose document and token counts
// are not ds's (it was left beside other data). Returns the sidecar; without one, logs that the
// EOS cannot be checked and returns nullopt.
std::optional<DatasetMeta> check_dataset_meta(const IndexedDataset& ds, const std::string& role,
                                              const TokenSettings& run);
// The same checks of a sidecar already read (read_dataset_meta(ds.prefix())).
void check_dataset_meta(const IndexedDataset& ds, const std::string& role, const TokenSettings& run,
                        const std::optional<DatasetMeta>& meta);

// Refuses two datasets of one run (train and valid) prepared with different tokenizers or EOS.
void check_same_preparation(const DatasetMeta& a, const std::string& role_a, const DatasetMeta& b,
                            const std::string& role_b);

}  // namespace echo::data
