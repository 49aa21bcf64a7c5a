// Checkpoint checksums: XXH3-64 hashing, trainer/checksums.json and verification (see checksums.h).
#include "train/checkpoint/checksums.h"

#include <xxhash.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/json_guard.h"
#include "core/text_file.h"
#include "train/checkpoint/layout.h"

namespace echo::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "echo-checksums";
constexpr int kVersion = 1;
constexpr const char* kAlgorithm = "xxh3-64";
constexpr const char* kCorrupted =
    "the file changed after it was written (disk or copy corruption); use an older checkpoint (to resume from "
    "one, move the damaged step_* folder out of checkpoints/)";

std::string mismatch(const std::string& ckpt_dir, const std::string& what, uint64_t stored, uint64_t computed) {
  return fmt::format("'{}': {} does not match its checksum (stored 0x{}, computed 0x{}): {}", ckpt_dir, what,
                     checksum_hex(stored), checksum_hex(computed), kCorrupted);
}

}  // namespace

uint64_t xxh3_64(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

uint64_t xxh3_64(std::string_view text) { return XXH3_64bits(text.data(), text.size()); }

std::string checksum_hex(uint64_t hash) { return fmt::format("{:016x}", hash); }

bool parse_checksum_hex(const nlohmann::json& value, uint64_t& out) {
  if (!value.is_string()) return false;
  const std::string& s = value.get_ref<const std::string&>();
  if (s.size() != 16) return false;
  uint64_t h = 0;
  for (char c : s) {
    int digit;
    if (c >= '0' && c <= '9')
      digit = c - '0';
    else if (c >= 'a' && c <= 'f')
      digit = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      digit = c - 'A' + 10;
    else
      return false;
    h = (h << 4) | static_cast<uint64_t>(digit);
  }
  out = h;
  return true;
}

SafetensorsChecksums checksum_safetensors(const SafetensorsFile& file) {
  SafetensorsChecksums out;
  out.header = xxh3_64(file.header_bytes());
  for (const auto& name : file.names()) out.tensors[name] = xxh3_64(file.bytes(name));
  return out;
}

std::string checksums_json(const CheckpointChecksums& sums) {
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  // One sorted list of paths, whichever kind each is, so the layout does not depend on the kind.
  std::set<std::string> paths;
  for (const auto& [rel, _] : sums.safetensors) paths.insert(rel);
  for (const auto& [rel, _] : sums.files) paths.insert(rel);
  for (const auto& rel : paths) {
    if (const auto it = sums.files.find(rel); it != sums.files.end()) {
      files[rel] = checksum_hex(it->second);
      continue;
    }
    const SafetensorsChecksums& st = sums.safetensors.at(rel);
    nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
    for (const auto& [name, hash] : st.tensors) tensors[name] = checksum_hex(hash);
    files[rel] = {{"header", checksum_hex(st.header)}, {"tensors", std::move(tensors)}};
  }
  const nlohmann::ordered_json j = {
      {"format", kFormat}, {"version", kVersion}, {"algorithm", kAlgorithm}, {"files", std::move(files)}};
  return j.dump(1) + "\n";
}

CheckpointChecksums parse_checksums(std::string_view text, const std::string& path) {
  const nlohmann::json j = parse_untrusted_json(text, fmt::format("checkpoint checksums '{}'", path));
  auto bad = [&](const std::string& what) {
    ECHO_INPUT_FAIL("checkpoint checksums '{}' is malformed: {}", path, what);
  };
  if (!j.is_object()) bad("not a JSON object");
  if (!j.contains("format") || j["format"] != kFormat) bad(fmt::format("'format' is not \"{}\"", kFormat));
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kVersion)
    bad(fmt::format("'version' is not {} (written by a newer echo?)", kVersion));
  if (!j.contains("algorithm") || j["algorithm"] != kAlgorithm)
    bad(fmt::format("'algorithm' is not \"{}\"", kAlgorithm));
  if (!j.contains("files") || !j["files"].is_object() || j["files"].empty()) bad("'files' is not a non-empty object");

  CheckpointChecksums sums;
  for (const auto& [rel, entry] : j["files"].items()) {
    uint64_t hash = 0;
    if (entry.is_string()) {
      if (!parse_checksum_hex(entry, hash)) bad(fmt::format("the checksum of '{}' is not 16 hex digits", rel));
      sums.files[rel] = hash;
      continue;
    }
    if (!entry.is_object() || !entry.contains("header") || !entry.contains("tensors") || !entry["tensors"].is_object())
      bad(fmt::format("the entry of '{}' is neither a checksum nor an object with 'header' and 'tensors'", rel));
    SafetensorsChecksums st;
    if (!parse_checksum_hex(entry["header"], st.header))
      bad(fmt::format("the header checksum of '{}' is not 16 hex digits", rel));
    for (const auto& [name, value] : entry["tensors"].items()) {
      if (!parse_checksum_hex(value, hash))
        bad(fmt::format("the checksum of tensor '{}' of '{}' is not 16 hex digits", name, rel));
      st.tensors[name] = hash;
    }
    sums.safetensors[rel] = std::move(st);
  }
  return sums;
}

void verify_file(const CheckpointChecksums& sums, const std::string& ckpt_dir, const std::string& rel,
                 std::string_view bytes) {
  const auto it = sums.files.find(rel);
  ECHO_INPUT_CHECK(it != sums.files.end(), "'{}': trainer/checksums.json has no checksum for {}", ckpt_dir, rel);
  const uint64_t computed = xxh3_64(bytes);
  if (computed != it->second) ECHO_INPUT_FAIL("{}", mismatch(ckpt_dir, rel, it->second, computed));
}

size_t verify_safetensors(const CheckpointChecksums& sums, const std::string& ckpt_dir, const std::string& rel,
                          const SafetensorsFile& file, const ChecksumShare& share) {
  ECHO_CHECK(share.num_ranks >= 1 && share.rank >= 0 && share.rank < share.num_ranks, "bad checksum share {} of {}",
             share.rank, share.num_ranks);
  const auto it = sums.safetensors.find(rel);
  ECHO_INPUT_CHECK(it != sums.safetensors.end(), "'{}': trainer/checksums.json has no entry for {}", ckpt_dir, rel);
  const SafetensorsChecksums& stored = it->second;
  // The header first: a changed name or offset would otherwise surface as a confusing shape error.
  const uint64_t header = xxh3_64(file.header_bytes());
  if (header != stored.header)
    ECHO_INPUT_FAIL("{}", mismatch(ckpt_dir, fmt::format("the header of {}", rel), stored.header, header));
  const std::vector<std::string> names = file.names();
  for (const auto& name : names)
    ECHO_INPUT_CHECK(stored.tensors.count(name), "'{}': trainer/checksums.json has no checksum for tensor '{}' of {}",
                     ckpt_dir, name, rel);
  if (stored.tensors.size() != names.size()) {
    const std::set<std::string> present(names.begin(), names.end());
    for (const auto& [name, _] : stored.tensors)
      ECHO_INPUT_CHECK(present.count(name),
                       "'{}': trainer/checksums.json lists tensor '{}' of {}, which the file does not hold", ckpt_dir,
                       name, rel);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if ((share.first_item + i) % static_cast<size_t>(share.num_ranks) != static_cast<size_t>(share.rank)) continue;
    const uint64_t want = stored.tensors.at(names[i]);
    const uint64_t got = xxh3_64(file.bytes(names[i]));
    if (got != want)
      ECHO_INPUT_FAIL("{}", mismatch(ckpt_dir, fmt::format("tensor '{}' in {}", names[i], rel), want, got));
  }
  return names.size();
}

std::optional<CheckpointChecksums> read_checkpoint_checksums(const std::string& ckpt_dir) {
  const fs::path path = fs::path(ckpt_dir) / ckpt::kTrainerDir / ckpt::kChecksumsFile;
  // Only a file that is not there means "written before checksums": anything else at its name (a
  // dangling link, a directory, an entry that cannot be looked at) is read, and refused, rather
  // than loading the checkpoint unverified.
  if (is_absent(path.string())) return std::nullopt;
  return parse_checksums(read_text_file(path.string(), fmt::format("checkpoint checksums '{}'", path.string())),
                         path.string());
}

}  // namespace echo::train
