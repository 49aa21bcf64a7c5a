// Dataset sidecars (data/dataset_meta.h): written by echo_prep, checked by echo_train / echo_eval.
#include "data/dataset_meta.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_guard.h"
#include "core/log.h"
#include "core/text_file.h"
#include "data/indexed_dataset.h"

namespace echo::data {
namespace {

using Json = nlohmann::json;

// What to do about a sidecar that cannot be used: it is echo_prep's, so re-preparing rewrites it.
constexpr const char* kMalformedFix =
    "re-prepare the data with echo_prep (which rewrites it), or delete the file to use the dataset unchecked";

std::string prefix_of(const std::string& meta_path) {
  constexpr std::string_view kSuffix = ".meta.json";
  return meta_path.ends_with(kSuffix) ? meta_path.substr(0, meta_path.size() - kSuffix.size()) : meta_path;
}

const Json& field(const Json& j, const char* key, const std::string& path) {
  const auto it = j.find(key);
  ECHO_INPUT_CHECK(it != j.end(), "dataset sidecar '{}' has no \"{}\" field; {}", path, key, kMalformedFix);
  return *it;
}

std::string string_field(const Json& j, const char* key, const std::string& path) {
  const Json& v = field(j, key, path);
  // Bounded: the strings are quoted in every message about the dataset.
  constexpr size_t kMaxChars = 4096;
  ECHO_INPUT_CHECK(v.is_string() && v.get_ref<const std::string&>().size() <= kMaxChars,
                   "dataset sidecar '{}': \"{}\" must be a string of at most {} bytes, got {}; {}", path, key, kMaxChars,
                   json_excerpt(v), kMalformedFix);
  return v.get<std::string>();
}

// An integer in [lo, hi]; a float or a string (2.5, "7") is refused, not truncated.
int64_t int_field(const Json& j, const char* key, int64_t lo, int64_t hi, const std::string& path) {
  const Json& v = field(j, key, path);
  bool ok = false;
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    ok = v.get<uint64_t>() <= static_cast<uint64_t>(hi);
    x = ok ? static_cast<int64_t>(v.get<uint64_t>()) : 0;
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
    ok = true;
  }
  ECHO_INPUT_CHECK(ok && x >= lo && x <= hi, "dataset sidecar '{}': \"{}\" must be an integer in [{}, {}], got {}; {}",
                   path, key, lo, hi, json_excerpt(v), kMalformedFix);
  return x;
}

// "tokenizer 'byte' (vocab 257, eos 256: <source>)", for messages.
std::string describe(const DatasetMeta& m) {
  return fmt::format("tokenizer '{}' (vocab {}, eos {}: {})", m.tokenizer, m.vocab_size, m.eos_id, m.eos_source);
}

}  // namespace

std::string dataset_meta_path(const std::string& prefix) { return prefix + ".meta.json"; }
std::string dataset_meta_tmp_path(const std::string& prefix) { return dataset_meta_path(prefix) + ".tmp"; }

std::string dataset_meta_json(const DatasetMeta& m) {
  nlohmann::ordered_json j = {
      {"format", kDatasetMetaFormat},
      {"version", kDatasetMetaVersion},
      {"tokenizer", m.tokenizer},
      {"tokenizer_sha256", m.tokenizer_sha256.empty() ? nlohmann::ordered_json(nullptr)
                                                      : nlohmann::ordered_json(m.tokenizer_sha256)},
      {"vocab_size", m.vocab_size},
      {"eos_id", m.eos_id},
      {"eos_source", m.eos_source},
      {"append_eos", m.append_eos},
      {"documents", m.documents},
      {"tokens", m.tokens},
  };
  // A tokenizer path or an EOS source may hold bytes that are not UTF-8: replaced, not thrown.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

void write_dataset_meta(const std::string& prefix, const DatasetMeta& meta) {
  const std::string path = dataset_meta_path(prefix), tmp = dataset_meta_tmp_path(prefix);
  const std::string text = dataset_meta_json(meta);
  std::FILE* f = create_fresh_file(tmp);
  // Synced before the rename, as the .bin and .idx are: a crash must not leave an empty sidecar.
  const bool written =
      std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const int err = !written ? write_errno : errno;
    std::remove(tmp.c_str());
    ECHO_RUN_FAIL("{}: write failed: {}", tmp, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    ECHO_RUN_FAIL("cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
  // The new name on disk too, as finalize() does for the .bin and .idx.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), true);
}

DatasetMeta parse_dataset_meta(std::string_view text, const std::string& path) {
  Json j;
  try {
    j = parse_untrusted_json(text, fmt::format("dataset sidecar '{}'", path));
  } catch (const Error& e) {
    rethrow_with_context(e, "", fmt::format("; {}", kMalformedFix));
  }
  ECHO_INPUT_CHECK(j.is_object(), "dataset sidecar '{}' must hold a JSON object, got {}; {}", path, j.type_name(),
                   kMalformedFix);
  const std::string format = string_field(j, "format", path);
  ECHO_INPUT_CHECK(format == kDatasetMetaFormat, "dataset sidecar '{}': \"format\" is \"{}\", not \"{}\"; {}", path,
                   format, kDatasetMetaFormat, kMalformedFix);
  const int64_t version = int_field(j, "version", 1, std::numeric_limits<int32_t>::max(), path);
  ECHO_INPUT_CHECK(version == kDatasetMetaVersion,
                   "dataset sidecar '{}' has version {}, and this echo reads version {}: it was written by another "
                   "echo_prep; use that echo, or {}",
                   path, version, kDatasetMetaVersion, kMalformedFix);
  DatasetMeta m;
  m.path = path;
  m.tokenizer = string_field(j, "tokenizer", path);
  const Json& sha = field(j, "tokenizer_sha256", path);
  ECHO_INPUT_CHECK(sha.is_null() || (sha.is_string() && sha.get<std::string>().size() == 64),
                   "dataset sidecar '{}': \"tokenizer_sha256\" must be null or 64 hex digits, got {}; {}", path,
                   json_excerpt(sha), kMalformedFix);
  if (sha.is_string()) m.tokenizer_sha256 = sha.get<std::string>();
  m.vocab_size = int_field(j, "vocab_size", 1, std::numeric_limits<int32_t>::max(), path);
  m.eos_id = int_field(j, "eos_id", 0, m.vocab_size - 1, path);
  m.eos_source = string_field(j, "eos_source", path);
  const Json& append = field(j, "append_eos", path);
  ECHO_INPUT_CHECK(append.is_boolean(), "dataset sidecar '{}': \"append_eos\" must be true or false, got {}; {}",
                   path, json_excerpt(append), kMalformedFix);
  m.append_eos = append.get<bool>();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  m.documents = static_cast<uint64_t>(int_field(j, "documents", 0, kMax, path));
  m.tokens = static_cast<uint64_t>(int_field(j, "tokens", 0, kMax, path));
  return m;
}

std::optional<DatasetMeta> read_dataset_meta(const std::string& prefix) {
  const std::string path = dataset_meta_path(prefix);
  // NOTE: is_absent looks at the link itself: a dangling or looping symbolic link at the sidecar's
  // name is a sidecar that cannot be read, not "no sidecar", which would leave the data unchecked.
  if (is_absent(path)) return std::nullopt;
  std::string why;
  const std::optional<std::string> text = try_read_text_file(path, why, kMaxDatasetMetaBytes);
  ECHO_INPUT_CHECK(text.has_value(), "cannot read dataset sidecar '{}': {}; {}", path, why, kMalformedFix);
  return parse_dataset_meta(*text, path);
}

std::optional<DatasetMeta> check_dataset_meta(const IndexedDataset& ds, const std::string& role,
                                              const TokenSettings& run) {
  std::optional<DatasetMeta> meta = read_dataset_meta(ds.prefix());
  check_dataset_meta(ds, role, run, meta);
  return meta;
}

void check_dataset_meta(const IndexedDataset& ds, const std::string& role, const TokenSettings& run,
                        const std::optional<DatasetMeta>& meta) {
  if (!meta) {
    ECHO_INFO("data",
              "{} ({}): no {} (not made by echo_prep): the tokenizer and EOS it was made with cannot be checked; "
              "data.eos_id = {} ({}) is trusted to be its EOS",
              role, ds.prefix(), dataset_meta_path(ds.prefix()), run.eos_id, run.eos_source);
    return;
  }
  const DatasetMeta& m = *meta;
  // A sidecar beside other data (the .bin/.idx rewritten by another tool) vouches for nothing.
  // NOTE: the cause is not guessed: echo_prep writes the counts it wrote, so a mismatch is either
  // data rewritten by another tool or a sidecar made or edited by hand (a 0 is typical of those).
  ECHO_INPUT_CHECK(m.documents == ds.num_documents() && m.tokens == ds.num_tokens(),
                   "{} ({}): its sidecar '{}' does not describe this data: it says {} documents and {} tokens, but "
                   "{}.idx holds {} documents and {} tokens (the data was rewritten after echo_prep wrote the sidecar, "
                   "or the sidecar was made or edited by hand); {}",
                   role, ds.prefix(), m.path, m.documents, m.tokens, ds.prefix(), ds.num_documents(), ds.num_tokens(),
                   kMalformedFix);
  std::vector<std::string> problems;
  if (run.vocab_size < m.vocab_size)
    problems.push_back(fmt::format(
        "'model.vocab_size' = {} is smaller than the vocabulary of the tokenizer the data was prepared with ({}): the "
        "model has no rows for ids {}..{}; use a model with model.vocab_size >= {}, or re-prepare the data with "
        "echo_prep and the model's tokenizer",
        run.vocab_size, m.vocab_size, run.vocab_size, m.vocab_size - 1, m.vocab_size));
  if (run.eos_id != m.eos_id)
    problems.push_back(fmt::format(
        "'data.eos_id' = {} ({}) is not the EOS the data was prepared with, {} ({}): documents would be separated by "
        "a token that is not this tokenizer's EOS; pass --set data.eos_id={} (or set it in the config), or "
        "re-prepare the data with echo_prep and the tokenizer whose EOS is {}",
        run.eos_id, run.eos_source, m.eos_id, m.eos_source, m.eos_id, run.eos_id));
  ECHO_INPUT_CHECK(problems.empty(), "{} ({}) was prepared with {}, as its sidecar '{}' records: {}", role,
                   ds.prefix(), describe(m), m.path, fmt::join(problems, "; and "));
  ECHO_INFO("data", "{} ({}): prepared with {}; data.eos_id and model.vocab_size agree", role, ds.prefix(),
            describe(m));
}

void check_same_preparation(const DatasetMeta& a, const std::string& role_a, const DatasetMeta& b,
                            const std::string& role_b) {
  // The tokenizer spec is not compared: one file named by two paths is the same tokenizer.
  const bool same = a.vocab_size == b.vocab_size && a.eos_id == b.eos_id && a.tokenizer_sha256 == b.tokenizer_sha256;
  ECHO_INPUT_CHECK(same,
                   "{} ({}) and {} ({}) were prepared with different tokenizers: {} (sha256 {}, sidecar '{}') vs {} "
                   "(sha256 {}, sidecar '{}'); re-prepare both with one echo_prep run (--output-prefix and "
                   "--valid-prefix)",
                   role_a, prefix_of(a.path), role_b, prefix_of(b.path), describe(a),
                   a.tokenizer_sha256.empty() ? "none" : a.tokenizer_sha256, a.path, describe(b),
                   b.tokenizer_sha256.empty() ? "none" : b.tokenizer_sha256, b.path);
}

}  // namespace echo::data
