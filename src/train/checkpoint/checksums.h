// Checksums of a training checkpoint (docs/design.md §14): the XXH3-64 of every tensor's raw bytes
// and of each safetensors header, and of the whole JSON files, kept in trainer/checksums.json, so
// a checkpoint that changed after it was written (a flipped bit on disk, a damaged copy) is
// refused instead of loaded as a plausible but wrong model.
//
// trainer/checksums.json (keys sorted; hashes are 16 lowercase hex digits, XXH3_64bits, seed 0):
//   {"format": "echo-checksums", "version": 1, "algorithm": "xxh3-64",
//    "files": {"config.json": "<hash of the file>",
//              "model.safetensors": {"header": "<hash of the 8-byte length + JSON header>",
//                                    "tensors": {"<name>": "<hash of its data bytes>", ...}},
//              "trainer/optimizer.safetensors": {"header": ..., "tensors": {...}},
//              "trainer/trainer_state.json": "<hash of the file>"}}
// Paths are relative to the checkpoint directory. Per tensor rather than per file so a load over
// P ranks can split the hashing (tensor i by rank i % P) and a mismatch names the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "train/checkpoint/safetensors.h"

namespace echo::train {

// XXH3-64 (seed 0) of `bytes`, from the system libxxhash.
uint64_t xxh3_64(std::span<const std::byte> bytes);
uint64_t xxh3_64(std::string_view text);

// 16 lowercase hex digits, no prefix: "2d06800538d394c2".
std::string checksum_hex(uint64_t hash);
// The hash a JSON value records as checksum_hex writes it (16 hex digits, either case); false for
// anything else.
bool parse_checksum_hex(const nlohmann::json& value, uint64_t& out);

// The checksums of one safetensors file.
struct SafetensorsChecksums {
  uint64_t header = 0;                     // every byte before the data section
  std::map<std::string, uint64_t> tensors;  // name -> hash of its data bytes
};

// The contents of trainer/checksums.json: relative path -> checksums.
struct CheckpointChecksums {
  std::map<std::string, SafetensorsChecksums> safetensors;
  std::map<std::string, uint64_t> files;  // files hashed whole (the JSON ones)
};

// Hashes the header and every tensor of `file` (one pass over the mapped file).
SafetensorsChecksums checksum_safetensors(const SafetensorsFile& file);

// The text of trainer/checksums.json for `sums`.
std::string checksums_json(const CheckpointChecksums& sums);

// Parses trainer/checksums.json (untrusted: depth-bounded, every field checked). Throws an
// echo::InputError "checkpoint checksums '<path>' is malformed: <what>" naming the first problem.
CheckpointChecksums parse_checksums(std::string_view text, const std::string& path);

// Which items this rank hashes: item k (counted from first_item over the files of one load) when
// k % num_ranks == rank, so a load over P ranks reads and hashes every tensor once, not P times.
struct ChecksumShare {
  int rank = 0, num_ranks = 1;
  size_t first_item = 0;
};

// Checks the whole file `rel` (relative to ckpt_dir) whose bytes are `bytes` against `sums`.
// Throws an echo::InputError naming ckpt_dir and the file: no entry, or a mismatch.
void verify_file(const CheckpointChecksums& sums, const std::string& ckpt_dir, const std::string& rel,
                 std::string_view bytes);

// Checks the safetensors file `rel`: its header and that sums lists exactly its tensors (on every
// rank, cheap), then the data of this rank's share of its tensors (data order). Throws an
// echo::InputError naming ckpt_dir, the file and the tensor. Returns the number of tensors, the
// items the next file's share starts after.
size_t verify_safetensors(const CheckpointChecksums& sums, const std::string& ckpt_dir, const std::string& rel,
                          const SafetensorsFile& file, const ChecksumShare& share);

// trainer/checksums.json of the checkpoint in `ckpt_dir`, or nullopt when it has none (written
// before checksums existed, or of the layout before trainer/). Throws an echo::InputError naming
// the file when it is malformed or cannot be looked at.
std::optional<CheckpointChecksums> read_checkpoint_checksums(const std::string& ckpt_dir);

}  // namespace echo::train
