// Validation of typed values: each key against its rule in the key table, then the
// combinations the model, the parallel layout and the backends need. Messages name both keys
// and both values, at the place the user most likely has to edit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/config/config.h"
#include "core/config/schema.h"
#include "core/config/stages.h"
#include "core/error.h"
#include "core/int8_limits.h"

namespace echo::config {
namespace {

using schema::dotted;

// Walks the key table and applies each key's rule to its typed value.
class RangeChecker {
 public:
  RangeChecker(std::string prefix, const Origins& origins) : prefix_(std::move(prefix)), origins_(origins) {}

  template <class T>
  void field(const char* key, T& value, const char*, const schema::Check& check = {}) {
    const std::string full = dotted(prefix_, key);
    if constexpr (std::is_same_v<T, double>) {
      if (!std::isfinite(value))
        fail_at(origins_.where(full), fmt::format("'{}' = {} must be a finite number", full, value));
    }
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      if (!check.number) return;
      const std::string problem = check.number(static_cast<double>(value));
      if (!problem.empty())
        fail_at(origins_.where(full), fmt::format("'{}' = {} {}", full, schema::yaml_scalar(value), problem));
    }
    if constexpr (std::is_same_v<T, std::string>) {
      if (check.non_empty && value.empty()) fail_at(origins_.where(full), fmt::format("'{}' must not be empty", full));
    }
  }

  template <class S>
  void section(const char* key, S& value, const char*) {
    RangeChecker inner(dotted(prefix_, key), origins_);
    schema::visit(value, inner);
  }

 private:
  std::string prefix_;
  const Origins& origins_;
};

// Megatron-style TP splits heads, kv heads, ffn and the padded vocabulary across tp ranks.
void check_tp_split(const Config& c, const Origins& o) {
  const int tp = c.parallel.tp;
  const std::pair<const char*, int> split[] = {
      {"model.heads", c.model.heads}, {"model.kv_heads", c.model.kv_heads}, {"model.ffn", c.model.ffn}};
  for (const auto& [key, value] : split) {
    if (value % tp != 0)
      fail_at(o.where_any({"parallel.tp", key}, "parallel"),
              fmt::format("'parallel.tp' = {} does not divide '{}' = {}", tp, key, value));
  }
  const std::int64_t padded = c.model.padded_vocab();
  if (padded % tp != 0)
    fail_at(o.where_any({"parallel.tp", "model.vocab_size", "model.vocab_pad_multiple"}, "parallel"),
            fmt::format("'parallel.tp' = {} does not divide the padded vocabulary {} ('model.vocab_size' = {} "
                        "rounded up to a multiple of 'model.vocab_pad_multiple' = {})",
                        tp, padded, c.model.vocab_size, c.model.vocab_pad_multiple));
}

void check_model(const Config& c, const Origins& o) {
  // GQA: each key/value head serves heads / kv_heads query heads.
  if (c.model.heads % c.model.kv_heads != 0)
    fail_at(
        o.where_any({"model.heads", "model.kv_heads"}, "model"),
        fmt::format("'model.heads' = {} is not a multiple of 'model.kv_heads' = {}", c.model.heads, c.model.kv_heads));
}

// world = dp x tp, and every dp rank runs whole micro-batches of the global batch.
void check_batch(const Config& c, const Origins& o, int world_size) {
  const int tp = c.parallel.tp;
  if (world_size > 0 && world_size % tp != 0)
    fail_at(o.where("parallel.tp"),
            fmt::format("world size {} is not a multiple of 'parallel.tp' = {} (world = dp x tp)", world_size, tp));
  const int dp = world_size > 0 ? world_size / tp : 1;
  const std::int64_t step = static_cast<std::int64_t>(c.train.micro_batch) * dp;
  if (c.train.global_batch % step == 0) return;
  const std::string dp_text =
      world_size > 0 ? fmt::format(" x dp = {} (world size {} / 'parallel.tp' = {})", dp, world_size, tp) : "";
  fail_at(o.where_any({"train.global_batch", "train.micro_batch"}, "train"),
          fmt::format("'train.global_batch' = {} is not a multiple of 'train.micro_batch' = {}{}", c.train.global_batch,
                      c.train.micro_batch, dp_text));
}

void check_backend(const Config& c, const Origins& o) {
  if (c.comm.allreduce == AllReduceKind::two_collective &&
      (c.comm.transport == Transport::shm || c.comm.transport == Transport::cuda_ipc))
    fail_at(o.where_any({"comm.allreduce", "comm.transport"}, "comm"),
            fmt::format("'comm.allreduce' = two_collective is the unpipelined baseline (an all-to-all and an "
                        "all-gather: MPI, or NCCL between distinct GPUs); it cannot take 'comm.transport' = {}, "
                        "use auto or mpi",
                        to_string(c.comm.transport)));
  if (c.comm.transport == Transport::cuda_ipc && c.run.device != Device::cuda)
    fail_at(o.where_any({"comm.transport", "run.device"}, "comm"),
            fmt::format("'comm.transport' = cuda_ipc needs 'run.device' = cuda, got 'run.device' = {}",
                        to_string(c.run.device)));
}

void check_linear(const Config& c, const Origins& o) {
  std::vector<std::string> seen;
  for (const std::string& name : c.linear.projection_list()) {
    bool known = false;
    for (const char* k : LinearConfig::kProjectionNames) known = known || name == k;
    if (!known)
      fail_at(o.where("linear.projections"),
              fmt::format("'linear.projections' names '{}', which is not one of q, k, v, o, gate, up, down", name));
    for (const auto& s : seen)
      if (s == name) fail_at(o.where("linear.projections"), fmt::format("'linear.projections' names '{}' twice", name));
    seen.push_back(name);
  }
  if (seen.empty())
    fail_at(o.where("linear.projections"), "'linear.projections' names no projection (use linear.mode: bf16 instead)");
  if (c.linear.mode != LinearMode::int8) return;
  // Every int8 GEMM sums its inner dimension in int32 (docs/design.md §6): the weight gradient
  // over the micro-batch's tokens, the forward over the input features, the input gradient over
  // the output features (per tp rank). Beyond kInt8GemmMaxK an overflow is possible; refuse the
  // shape here rather than fail at the first step (CPU) or risk a wrapped sum (CUDA).
  const int64_t tokens = static_cast<int64_t>(c.train.micro_batch) * c.data.seq_len;
  if (tokens > kInt8GemmMaxK)
    fail_at(o.where_any({"train.micro_batch", "data.seq_len", "linear.mode"}, "train"),
            fmt::format("'linear.mode' = int8 sums the weight gradient over the micro-batch's tokens in int32, at most "
                        "{} of them: 'train.micro_batch' = {} x 'data.seq_len' = {} = {}; lower train.micro_batch "
                        "(train.global_batch accumulates more micro-batches)",
                        kInt8GemmMaxK, c.train.micro_batch, c.data.seq_len, tokens));
  // The widths per tp rank (kv_heads x head_dim / tp is never wider than the query heads').
  const ModelConfig& m = c.model;
  const int64_t tp = std::max(1, c.parallel.tp);
  const auto check_width = [&](std::initializer_list<std::string_view> keys, const std::string& what, int64_t width) {
    if (width > kInt8GemmMaxK)
      fail_at(o.where_any(keys, "model"),
              fmt::format("'linear.mode' = int8 sums a linear layer's input or output features in int32, at most {} "
                          "of them per tp rank: {} = {}",
                          kInt8GemmMaxK, what, width));
  };
  check_width({"model.hidden", "linear.mode"}, fmt::format("'model.hidden' = {}", m.hidden), m.hidden);
  check_width({"model.ffn", "parallel.tp", "linear.mode"},
              fmt::format("'model.ffn' = {} / 'parallel.tp' = {}", m.ffn, tp), m.ffn / tp);
  check_width({"model.heads", "model.head_dim", "parallel.tp", "linear.mode"},
              fmt::format("'model.heads' = {} x 'model.head_dim' = {} / 'parallel.tp' = {}", m.heads, m.head_dim, tp),
              static_cast<int64_t>(m.heads) * m.head_dim / tp);
}

// A lower bound on the memory one rank needs, so that sizes that pass each key's range but not
// together (hidden 131072 with vocab 2^24) are refused by name before anything is allocated,
// instead of ending in std::bad_alloc or swapping. Lower bound: everything is taken as split
// over tp (the norms are replicated in fact), and activations count only the residual stream
// each layer keeps for backward and this rank's shard of the logits.
std::string human_bytes(double bytes) {
  if (bytes >= 1e12) return fmt::format("{:.1f} TB", bytes / 1e12);
  if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  return fmt::format("{:.1f} MB", bytes / 1e6);
}

void check_memory(const Config& c, const Origins& o) {
  constexpr double kLimitBytes = 1024.0 * 1024 * 1024 * 1024;  // 1 TiB per rank
  const ModelConfig& m = c.model;
  const double vocab = static_cast<double>(m.padded_vocab()), hidden = m.hidden, layers = m.layers, ffn = m.ffn;
  const double q = static_cast<double>(m.heads) * m.head_dim, kv = static_cast<double>(m.kv_heads) * m.head_dim;
  const double per_layer = hidden * q + 2 * hidden * kv + q * hidden + 3 * hidden * ffn + 2 * hidden + 2.0 * m.head_dim;
  const double params = vocab * hidden * (m.tie_embeddings ? 1 : 2) + layers * per_layer + hidden;
  const double tp = c.parallel.tp;
  // fp32 weights and gradients and the two AdamW moments: 16 bytes a parameter.
  const double state_bytes = params * 16 / tp;
  const double tokens = static_cast<double>(c.train.micro_batch) * c.data.seq_len;
  const double activation_bytes = tokens * (layers * hidden + vocab / tp) * 4;
  if (state_bytes + activation_bytes <= kLimitBytes) return;
  fail_at(
      o.where_any({"model.vocab_size", "model.hidden", "model.ffn", "model.layers", "model.heads", "model.kv_heads",
                   "model.head_dim", "train.micro_batch", "data.seq_len", "parallel.tp"},
                  "model"),
      fmt::format("this config needs at least {} per rank, more than the 1 TiB echo allows: {:.4g} "
                  "parameters ('model.vocab_size' = {}, 'model.hidden' = {}, 'model.ffn' = {}, 'model.layers' = {}, "
                  "'model.heads' = {} x 'model.head_dim' = {}) take {} of fp32 weights, gradients and "
                  "AdamW moments over 'parallel.tp' = {}, and 'train.micro_batch' = {} x 'data.seq_len' = {} "
                  "tokens take {} of activations",
                  human_bytes(state_bytes + activation_bytes), params, m.vocab_size, m.hidden, m.ffn, m.layers, m.heads,
                  m.head_dim, human_bytes(state_bytes), c.parallel.tp, c.train.micro_batch, c.data.seq_len,
                  human_bytes(activation_bytes)));
}

// The pipelined transports' workspace: the threads split a round's tiles, and every rank holds
// 2 x tiles x tp slots (docs/design.md §7).
void check_p2p(const Config& c, const Origins& o) {
  const CommConfig& m = c.comm;
  if (m.shm_threads > m.p2p_tiles)
    fail_at(o.where_any({"comm.shm_threads", "comm.p2p_tiles"}, "comm"),
            fmt::format("'comm.shm_threads' = {} exceeds 'comm.p2p_tiles' = {}: each thread serves its own tile "
                        "slots of a round",
                        m.shm_threads, m.p2p_tiles));
  // Only where a workspace can be made: not under transport mpi or the unpipelined baseline.
  const bool pipelined = m.transport != Transport::mpi && m.allreduce != AllReduceKind::two_collective;
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  const double bytes = 2.0 * m.p2p_tiles * c.parallel.tp * m.p2p_slot_kib * 1024.0;
  if (pipelined && c.parallel.tp > 1 && bytes > 4 * kGiB)
    fail_at(o.where_any({"comm.p2p_tiles", "comm.p2p_slot_kib", "parallel.tp"}, "comm"),
            fmt::format("the pipelined transport's workspace would take {:.1f} GiB per rank (2 x 'comm.p2p_tiles' = {} "
                        "x 'parallel.tp' = {} x 'comm.p2p_slot_kib' = {} KiB), more than the 4 GiB echo allows",
                        bytes / kGiB, m.p2p_tiles, c.parallel.tp, m.p2p_slot_kib));
}

void check_optim(const Config& c, const Origins& o) {
  if (c.optim.min_lr > c.optim.lr)
    fail_at(o.where_any({"optim.min_lr", "optim.lr"}, "optim"),
            fmt::format("'optim.min_lr' = {} must be <= 'optim.lr' = {}", schema::yaml_scalar(c.optim.min_lr),
                        schema::yaml_scalar(c.optim.lr)));
}

}  // namespace

void check_config(const Config& config, const Origins& origins, int world_size, LayoutChecks layout) {
  ECHO_CHECK(world_size >= 0, "world_size must be >= 0 (0: not known yet), got {}", world_size);
  Config values = config;  // the key table visits mutable structs; checking changes nothing
  RangeChecker ranges("", origins);
  schema::visit(values, ranges);
  check_model(config, origins);
  check_batch(config, origins, world_size);
  check_backend(config, origins);
  check_optim(config, origins);
  if (layout == LayoutChecks::later) return;
  check_tp_split(config, origins);
  check_linear(config, origins);
  check_memory(config, origins);
  check_p2p(config, origins);
}

void refuse_unexpanded_home(const std::string& key, const std::string& path) {
  if (!path.starts_with("~")) return;
  // YAML and --set take a value as written (only a shell expands ~, and not after `key=`), so the
  // run made a folder named '~' in the working directory, a trap for a later `rm -rf ~...`.
  const char* home = std::getenv("HOME");
  const bool own_home = path == "~" || path.starts_with("~/");
  const std::string suggestion = own_home && home != nullptr && home[0] != '\0'
                                     ? fmt::format(": write {}{}", home, path.substr(1))
                                     : ": write the full path";
  ECHO_INPUT_FAIL(
      "'{}' = {} starts with '~', which only a shell expands (a config or --set value is taken as written, so a "
      "folder named '~' would be made in the working directory){}",
      key, path, suggestion);
}

}  // namespace echo::config
