// The run configuration (docs/design.md §13): one plain struct per YAML section, loaded once
// from a file plus `--set a.b=c` overrides, validated with errors that name the file, the line
// and the dotted key. Key names are the contract with scripts and sweeps: add keys, rename none.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/quant_spec.h"

namespace echo::config {

// ---- enums: enumerators are spelled as in YAML (except `auto`, a C++ keyword) ----------------

enum class Device : uint8_t { cpu, cuda };
enum class AllReduceKind : uint8_t { exact, exact_fp32, echo, two_collective };
enum class Transport : uint8_t { mpi, shm, cuda_ipc, automatic };
enum class LinearMode : uint8_t { bf16, int8 };
enum class BackwardRounding : uint8_t { rtne, sr_independent, s3r };
enum class ThresholdMode : uint8_t { per_token, per_example, independent };
enum class EcMode : uint8_t { none, dx_only, two_way };
enum class LrDecay : uint8_t { cosine, linear, constant };

// YAML spelling of each enumerator, indexed by its value (enumerators are 0, 1, 2, ...).
template <class E>
struct EnumNames;
template <>
struct EnumNames<Device> {
  static constexpr std::array<std::string_view, 2> kNames{"cpu", "cuda"};
};
template <>
struct EnumNames<AllReduceKind> {
  static constexpr std::array<std::string_view, 4> kNames{"exact", "exact_fp32", "echo", "two_collective"};
};
template <>
struct EnumNames<Transport> {
  static constexpr std::array<std::string_view, 4> kNames{"mpi", "shm", "cuda_ipc", "auto"};
};
template <>
struct EnumNames<LinearMode> {
  static constexpr std::array<std::string_view, 2> kNames{"bf16", "int8"};
};
template <>
struct EnumNames<BackwardRounding> {
  static constexpr std::array<std::string_view, 3> kNames{"rtne", "sr_independent", "s3r"};
};
template <>
struct EnumNames<ThresholdMode> {
  static constexpr std::array<std::string_view, 3> kNames{"per_token", "per_example", "independent"};
};
template <>
struct EnumNames<EcMode> {
  static constexpr std::array<std::string_view, 3> kNames{"none", "dx_only", "two_way"};
};
template <>
struct EnumNames<LrDecay> {
  static constexpr std::array<std::string_view, 3> kNames{"cosine", "linear", "constant"};
};
template <>
struct EnumNames<QuantPolicy> {
  static constexpr std::array<std::string_view, 3> kNames{"symmetric", "asym_naive", "asym_zero_aware"};
};

template <class E>
concept ConfigEnum = requires {
  EnumNames<E>::kNames;
};

template <ConfigEnum E>
constexpr std::string_view to_string(E value) {
  // NOTE: a value cast from a bad integer (a corrupt file, a test) must not index past the table.
  const auto index = static_cast<std::size_t>(value);
  if (index >= std::size(EnumNames<E>::kNames)) return "<invalid>";
  return EnumNames<E>::kNames[index];
}

// The enumerator spelled `text`, or nullopt when there is none.
template <ConfigEnum E>
constexpr std::optional<E> try_parse(std::string_view text) {
  const auto& names = EnumNames<E>::kNames;
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  return std::nullopt;
}

// "exact, exact_fp32, echo, two_collective": the allowed spellings, for error messages.
template <ConfigEnum E>
std::string enum_choices() {
  std::string out;
  for (std::string_view name : EnumNames<E>::kNames) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

// Like try_parse, but throws echo::Error listing the allowed spellings.
template <ConfigEnum E>
E parse(std::string_view text) {
  const std::optional<E> value = try_parse<E>(text);
  if (!value) ECHO_FAIL("'{}' is not one of: {}", text, enum_choices<E>());
  return *value;
}

// ---- sections ---------------------------------------------------------------------------------

struct RunConfig {
  std::uint64_t seed = 1234;
  Device device = Device::cpu;
  std::string out_dir = "runs/quickstart";
  std::string init_from;  // Hugging Face checkpoint to initialise from; empty = random init
  bool operator==(const RunConfig&) const = default;
};

struct ModelConfig {
  int vocab_size = 151936;  // embedding rows (Qwen3: 128 x 1187)
  int vocab_pad_multiple = 128;
  int hidden = 1024;
  int ffn = 3072;
  int layers = 28;
  int heads = 16;
  int kv_heads = 8;
  int head_dim = 128;  // its own key: Qwen3-0.6B has hidden 1024 but 16 x 128 heads
  double rope_base = 1.0e6;
  double norm_eps = 1.0e-6;
  bool tie_embeddings = true;
  double init_std = 0.02;
  bool scale_output_init = true;  // o_proj and down_proj start at init_std / sqrt(2 * layers)
  // The context the model is made for (Qwen3: 40960), written to a checkpoint's config.json; not
  // data.seq_len, which is only what this run trains on.
  int max_position_embeddings = 40960;

  // vocab_size rounded up to a multiple of vocab_pad_multiple: the rows tp must divide.
  std::int64_t padded_vocab() const;
  bool operator==(const ModelConfig&) const = default;
};

struct ParallelConfig {
  int tp = 4;  // dp = world / tp
  bool operator==(const ParallelConfig&) const = default;
};

// Two-timescale error feedback (Echo paper Sec. 5.1): c = eta * (a * m1 + (1 - a) * m2).
struct CompensatorConfig {
  bool enabled = true;
  double eta = 0.75;
  double a = 0.35;
  double beta1 = 0.7;
  double beta2 = 0.3;
  bool operator==(const CompensatorConfig&) const = default;
};

struct CommConfig {
  AllReduceKind allreduce = AllReduceKind::echo;
  Transport transport = Transport::automatic;
  double peer_timeout_s =
      300;  // a shm wait, a step's MPI collective or a reached NCCL call longer than this is an error
  double save_timeout_s = 1800;  // a start-up, agreement or checkpoint collective longer than this is an error
  int shm_threads = 1;          // shm: threads per rank in the pipeline
  int p2p_tiles = 16;           // shm, cuda_ipc: tiles per segment in one round of the pipeline
  int p2p_slot_kib = 128;       // shm, cuda_ipc: KiB of one encoded tile's workspace slot
  int bits = 4;
  int group_size = 128;
  QuantPolicy quantizer = QuantPolicy::asym_zero_aware;
  CompensatorConfig compensator;
  bool forward = true;
  bool backward = true;
  bool backward_rescale = true;
  bool early_site_8bit = false;
  int telemetry_interval = 0;   // steps between per-site error logs; 0 = off
  bool embedding_exact = true;  // the embedding and LM-head all-reduces stay exact

  // The quantizer for a site that runs at `bits` (4 or 8; early_site_8bit mixes both).
  QuantSpec quant_spec(int bits) const;
  bool operator==(const CommConfig&) const = default;
};

struct LinearConfig {
  LinearMode mode = LinearMode::bf16;
  BackwardRounding backward_rounding = BackwardRounding::s3r;
  ThresholdMode thresholds = ThresholdMode::per_token;
  EcMode ec = EcMode::two_way;
  // Which block projections run in int8, comma-separated (the embedding and the LM head stay
  // in full precision, as in the S3R paper).
  std::string projections = "q,k,v,o,gate,up,down";

  // The names of `projections` split at commas (spaces ignored); validation rejects unknown
  // names and duplicates.
  std::vector<std::string> projection_list() const;
  static constexpr const char* kProjectionNames[] = {"q", "k", "v", "o", "gate", "up", "down"};
  bool operator==(const LinearConfig&) const = default;
};

struct OptimConfig {
  double lr = 3.0e-4;
  double min_lr = 3.0e-5;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1.0e-5;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global norm; 0 = no clipping
  bool operator==(const OptimConfig&) const = default;
};

struct ScheduleConfig {
  int warmup_steps = 100;
  LrDecay decay = LrDecay::cosine;
  bool operator==(const ScheduleConfig&) const = default;
};

struct DataConfig {
  std::string train = "data/demo/train";
  std::string valid = "data/demo/valid";
  int seq_len = 2048;
  int eos_id = 151643;  // Qwen3 <|endoftext|>
  bool operator==(const DataConfig&) const = default;
};

struct TrainConfig {
  int steps = 12716;
  int micro_batch = 24;
  int global_batch = 384;
  int eval_interval = 500;  // 0 = never
  int eval_batches = 20;
  int checkpoint_interval = 1000;  // 0 = never
  int keep_checkpoints = 3;
  int log_interval = 1;
  bool operator==(const TrainConfig&) const = default;
};

struct Config {
  RunConfig run;
  ModelConfig model;
  ParallelConfig parallel;
  CommConfig comm;
  LinearConfig linear;
  OptimConfig optim;
  ScheduleConfig schedule;
  DataConfig data;
  TrainConfig train;
  std::string source;  // the file it was loaded from; empty for a Config built in code

  // NOTE: equality compares the values only, not `source`, so a config written out and read
  // back from another path is equal to the original.
  bool operator==(const Config& other) const;
};

// ---- loading and writing --------------------------------------------------------------------

// Reads `path`, applies `overrides` ("comm.bits=8", applied in order to the YAML tree so they
// pass the same checks as the file) and validates. world_size > 0 also checks that it splits
// into dp x tp and that global_batch is a multiple of micro_batch x dp; 0 skips those checks.
// Every failure throws echo::Error naming the file and line (or the --set) and the dotted key.
//
// LayoutChecks::later is for a program that sets parallel.tp itself (echo_eval takes it from
// --tp): the checks that depend on it (tp splitting heads, ffn and vocabulary; memory per rank;
// INT8 shard widths; the transport's workspace) wait for validate() once it is set, so a file's
// own parallel.tp, or the default 4, is neither refused nor used to refuse.
enum class LayoutChecks { now, later };
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {}, int world_size = 0,
                   LayoutChecks layout = LayoutChecks::now);

// Same as load_config for YAML text already in memory; `source_name` stands in for the file
// name in messages and in Config::source.
Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {}, int world_size = 0,
                    LayoutChecks layout = LayoutChecks::now);

// The key ranges and cross-key checks of load_config, for a Config built or edited in code.
void validate(const Config& config, int world_size = 0);

// Throws echo::InputError naming `key` when `path` starts with '~' (no shell expanded it), with
// the expanded path as the suggestion. Called where a path is about to be used (the trainer's
// run.out_dir, run.init_from and data.*; echo_eval's data), not when a config is read: a
// checkpoint's recorded config may hold such a value from before 2026-12-07.
void refuse_unexpanded_home(const std::string& key, const std::string& path);

// Every key, fully resolved (defaults included), one documented line each; load_config reads
// it back to an equal Config.
std::string to_yaml(const Config& config);

// Writes to_yaml(config) to `path` (parent directories created), replacing it atomically.
void write_effective_config(const Config& config, const std::string& path);

// Whether `overrides` set `dotted_key` ("data.eos_id=5", or inside a flow mapping
// "data={eos_id: 5}"), so that a value echo derives itself (echo_eval's EOS from a Hugging Face
// folder) yields to the user's. Throws as load_config does for a malformed override.
bool overrides_set(const std::vector<std::string>& overrides, const std::string& dotted_key);

// Whether the config file at `path` itself sets `dotted_key`, rather than leaving its default:
// echo_eval's EOS comes from the data when no one chose it. Throws as load_config does.
bool config_file_sets(const std::string& path, const std::string& dotted_key);

// Every leaf key in dotted form ("comm.compensator.eta"), in file order.
std::vector<std::string> known_keys();

}  // namespace echo::config
