// evaluate_checkpoint: resolve the checkpoint, build the eval config, the model at this tp and the
// data loader as the trainer does, load the weights, and run the shared validation loop.
#include "train/checkpoint_eval.h"

#include <fmt/ranges.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "comm/make_all_reduce.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/needed_file.h"
#include "core/same_file.h"
#include "core/text_file.h"
#include "data/data_loader.h"
#include "data/dataset_meta.h"
#include "data/indexed_dataset.h"
#include "data/stored_eos.h"
#include "data/token_range.h"
#include "dist/agreement.h"
#include "dist/world.h"
#include "model/qwen3_model.h"
#include "model/tp_ops.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/hf_weights.h"
#include "train/evaluation.h"
#include "train/hf_config.h"
#include "train/run_dir.h"
#include "train/step_memory.h"

namespace echo::train {
namespace {

namespace fs = std::filesystem;

struct Resolved {
  std::string path;
  bool ours = false;  // an echo checkpoint (COMPLETE, trainer state); else Hugging Face weights
  std::optional<CheckpointMeta> meta;  // ours: its trainer state, read once
  std::vector<std::string> newer_unfinished;  // of a run directory: newer steps without COMPLETE
};

Resolved hf_weights(const std::string& path) {
  Resolved r;
  r.path = path;
  return r;
}

Resolved echo_checkpoint(const std::string& path) {
  Resolved r;
  r.path = path;
  r.ours = true;
  r.meta = read_checkpoint_meta(path);
  return r;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

Resolved resolve_checkpoint(const std::string& path) {
  ECHO_INPUT_CHECK(!path.empty(), "no checkpoint given");
  require_resolvable(path, fmt::format("checkpoint '{}'", path));
  const fs::path p(path);
  if (!is_dir(p)) {
    const std::string name = p.filename().string();
    const bool weights = name.ends_with(".safetensors") || name.ends_with(".index.json");
    ECHO_INPUT_CHECK(weights, "checkpoint '{}' is a file but neither a .safetensors nor a .index.json", path);
    return hf_weights(path);
  }
  if (is_file(p / "COMPLETE")) return echo_checkpoint(path);
  if (is_dir(p / "checkpoints")) {
    const auto latest = latest_checkpoint(path);
    ECHO_INPUT_CHECK(latest.has_value(),
                     "run directory '{}' has no complete checkpoint (none under {}/checkpoints carries a COMPLETE "
                     "marker)",
                     path, path);
    Resolved r = echo_checkpoint(*latest);
    r.newer_unfinished = unfinished_checkpoints(path, r.meta->step);
    return r;
  }
  ECHO_INPUT_CHECK(!is_file(p / "trainer" / "trainer_state.json") && !is_file(p / "trainer_state.json"),
                   "checkpoint '{}' is incomplete (no COMPLETE marker: its save was interrupted); evaluate an earlier "
                   "step or the run directory",
                   path);
  if (is_file(p / "model.safetensors") || is_file(p / "model.safetensors.index.json")) return hf_weights(path);
  ECHO_INPUT_FAIL(
      "'{}' holds no checkpoint: expected an echo step directory (with COMPLETE), a run directory (with "
      "checkpoints/) or a Hugging Face folder (model.safetensors or model.safetensors.index.json)",
      path);
}

// Where data.eos_id came from, for messages, and whether someone chose it: --set, a --config
// that sets it, or the config an echo checkpoint recorded. An unchosen one is settled by
// settle_eos once the data is known.
struct EosChoice {
  bool chosen = false;
  std::string source;
};

constexpr const char* kRecordedEos = "data.eos_id of the checkpoint's recorded config";

// echo's default evaluation batches cut to the `available` sequences, each read once: as many
// global batches as fit, micro-batches made smaller first when not even one does. False when the
// data holds fewer sequences than dp. Updates the config's batch keys to match.
bool fit_default_batches(config::Config& cfg, EvalBatches& spec, uint64_t available, int dp) {
  if (available / static_cast<uint64_t>(cfg.train.global_batch) == 0) {
    const uint64_t per_rank = std::min<uint64_t>(static_cast<uint64_t>(cfg.train.micro_batch), available / dp);
    if (per_rank == 0) return false;
    spec.micro_batch = cfg.train.micro_batch = static_cast<int>(per_rank);
    spec.num_micro = 1;
    cfg.train.global_batch = spec.micro_batch * dp;
  }
  const uint64_t fit = available / static_cast<uint64_t>(cfg.train.global_batch);
  spec.batches = cfg.train.eval_batches = static_cast<int>(std::min<uint64_t>(fit, cfg.train.eval_batches));
  return true;
}

// The config to evaluate under, before the command line's layout and batch settings.
config::Config base_config(const EvalRequest& req, const Resolved& ckpt, EosChoice& eos) {
  if (config::overrides_set(req.overrides, "data.eos_id")) eos = {true, "--set data.eos_id"};
  if (!req.config_path.empty()) {
    // The layout is --tp's, checked with it later: a file without a parallel: section was refused
    // for the default parallel.tp = 4 not dividing its heads, a value never used.
    config::Config cfg = config::load_config(req.config_path, req.overrides, 0, config::LayoutChecks::later);
    if (!eos.chosen && config::config_file_sets(req.config_path, "data.eos_id"))
      eos = {true, fmt::format("data.eos_id of the config '{}'", req.config_path)};
    return cfg;
  }
  if (ckpt.ours) {
    ECHO_INPUT_CHECK(!ckpt.meta->config_yaml.empty(), "checkpoint '{}' records no config: pass --config", ckpt.path);
    if (!eos.chosen) eos = {true, kRecordedEos};
    return config::parse_config(ckpt.meta->config_yaml, ckpt.path + " (its recorded config)", req.overrides, 0,
                                config::LayoutChecks::later);
  }
  // Through YAML, so the --set overrides pass the same checks as on a file.
  return config::parse_config(config::to_yaml(config_from_hf(ckpt.path)), ckpt.path + "/config.json", req.overrides, 0,
                              config::LayoutChecks::later);
}

// data.eos_id when no one chose it. First the EOS the data was prepared with (its sidecar): the
// documents' separator is the data's, whatever a Hugging Face config.json says ends a generation
// (Qwen3's chat models say <|im_end|>, their data is split by <|endoftext|>). Without a sidecar,
// what the checkpoint says: an echo checkpoint's recorded config, a Hugging Face folder's files
// (hf_config.h). Never echo's default silently: it is Qwen3's, wrong for any other vocabulary.
void settle_eos(config::Config& cfg, EosChoice& eos, const Resolved& ckpt, const std::string& prefix,
                const std::optional<data::DatasetMeta>& data_meta) {
  if (data_meta) {
    cfg.data.eos_id = static_cast<int>(data_meta->eos_id);
    eos.source = fmt::format("the EOS the data was prepared with, {} in '{}'", data_meta->eos_source, data_meta->path);
    return;
  }
  if (!ckpt.ours) {
    const HfEos hf = hf_eos_id(hf_folder_of(ckpt.path), cfg.model.vocab_size);
    cfg.data.eos_id = hf.id;
    eos.source = hf.source;
    return;
  }
  const std::string& recorded = ckpt.meta->config_yaml;
  ECHO_INPUT_CHECK(!recorded.empty(),
                   "neither the config, the evaluation data '{}' (no sidecar) nor the checkpoint '{}' (no recorded "
                   "config) says which token is the EOS; pass --set data.eos_id=N",
                   prefix, ckpt.path);
  cfg.data.eos_id = config::parse_config(recorded, ckpt.path + " (its recorded config)").data.eos_id;
  eos.source = kRecordedEos;
}

// The outputs (--json, --dump-batch) must not overwrite what is evaluated: an existing file in
// the checkpoint's folder (a step, run or Hugging Face folder, or the folder of a weights file),
// the data's files, the --config file, or each other. A new file beside them is fine. The writer
// (rank 0) also checks that it can write them, so an unwritable place is refused before the
// evaluation instead of losing its result after it.
void check_outputs(const EvalRequest& req, const std::string& data_prefix, bool writer) {
  // NOTE: absolute first: the folder of a bare "model.safetensors" is the working directory, not "".
  const fs::path ckpt = fs::absolute(req.checkpoint);
  const fs::path ckpt_folder = is_dir(ckpt) ? ckpt : ckpt.parent_path();
  std::vector<std::string> inputs = {data_prefix + ".bin", data_prefix + ".idx", data::dataset_meta_path(data_prefix)};
  if (!req.config_path.empty()) inputs.push_back(req.config_path);
  const std::pair<const char*, const std::string*> outputs[] = {{"--json", &req.json_out},
                                                                 {"--dump-batch", &req.dump_batch}};
  std::string unwritable;  // the writer's first output it cannot write
  for (const auto& [flag, path] : outputs) {
    if (path->empty()) continue;
    std::error_code ec;
    ECHO_INPUT_CHECK(!(fs::exists(*path, ec) && is_inside(*path, ckpt_folder)),
                     "{} {} is a file of the checkpoint folder '{}' being evaluated: it would be overwritten; write "
                     "the output elsewhere",
                     flag, *path, ckpt_folder.string());
    for (const std::string& input : inputs)
      ECHO_INPUT_CHECK(!same_file(*path, input), "{} {} is '{}', which this evaluation reads: it would be overwritten; "
                       "write the output elsewhere", flag, *path, input);
    const std::string needed = needed_file(*path);
    ECHO_INPUT_CHECK(needed.empty(), "{} {} is {}: it would be overwritten; write the output elsewhere", flag, *path,
                     needed);
    const std::string why = writer ? why_not_writable(*path) : "";
    if (!why.empty() && unwritable.empty())
      unwritable = fmt::format("{} {} cannot be written: {} (checked before evaluating, so no result is lost)", flag,
                               *path, why);
  }
  // Agreed, so the other ranks stop with rank 0 instead of waiting for it in the evaluation.
  unwritable = dist::agree(dist::Communicator::borrow(MPI_COMM_WORLD), unwritable,
                           "echo_eval's check that rank 0 can write its outputs");
  ECHO_INPUT_CHECK(unwritable.empty(), "{}", unwritable);
  ECHO_INPUT_CHECK(req.json_out.empty() || req.dump_batch.empty() || !same_file(req.json_out, req.dump_batch),
                   "--json {} and --dump-batch {} are the same file", req.json_out, req.dump_batch);
}

void check_tp_divides(const config::ModelConfig& m, int tp) {
  const std::pair<const char*, int64_t> sizes[] = {{"model.heads", m.heads},
                                                   {"model.kv_heads", m.kv_heads},
                                                   {"model.ffn", m.ffn},
                                                   {"the padded vocabulary", m.padded_vocab()}};
  for (const auto& [name, value] : sizes)
    ECHO_INPUT_CHECK(value % tp == 0,
                     "tp = {} (--tp, or the number of ranks) does not divide {} = {} of this model; use a tp that "
                     "divides heads = {}, kv_heads = {}, ffn = {} and the padded vocabulary {}",
                     tp, name, value, m.heads, m.kv_heads, m.ffn, m.padded_vocab());
}

}  // namespace

namespace {

// NumPy .npy (format 1.0) of int32 (2, rows, cols): tokens then targets.
void write_batch_npy(const std::string& path, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                     int64_t rows, int64_t cols) {
  ECHO_CHECK(static_cast<int64_t>(tokens.size()) == rows * cols && tokens.size() == targets.size(),
             "write_batch_npy: {} tokens and {} targets for ({}, {})", tokens.size(), targets.size(), rows, cols);
  std::string header = fmt::format("{{'descr': '<i4', 'fortran_order': False, 'shape': (2, {}, {}), }}", rows, cols);
  // magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64, ending in \n.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  const uint16_t len = static_cast<uint16_t>(header.size());
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(len & 0xff));
  bytes.push_back(static_cast<char>(len >> 8));
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  bytes.append(reinterpret_cast<const char*>(targets.data()), targets.size() * 4);
  // Through a temp file renamed over it: a kill mid-write leaves no truncated array.
  write_file_atomic(path, bytes, "--dump-batch " + path);
}

}  // namespace

EvalReport evaluate_checkpoint(const EvalRequest& req) {
  int world_size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto logger = log::get("eval");
  // The layout is the command line's (below, over any config): a --set of it was silently ignored.
  ECHO_INPUT_CHECK(!config::overrides_set(req.overrides, "parallel.tp"),
                   "--set parallel.tp: echo_eval takes its layout from --tp (the tensor-parallel size; default: the "
                   "number of ranks, dp = ranks / tp), not from the config; pass --tp N instead");

  const Resolved ckpt = resolve_checkpoint(req.checkpoint);
  EvalReport rep;
  rep.checkpoint = ckpt.path;
  rep.kind = ckpt.ours ? "echo" : "hf";
  if (ckpt.ours) rep.step = ckpt.meta->step;
  // The latest complete step is the right one to evaluate, but a newer damaged one must not go unseen.
  if (!ckpt.newer_unfinished.empty() && rank == 0)
    logger->warn("evaluating {}, the latest complete checkpoint of {}: {} is newer but has no COMPLETE marker",
                 ckpt.path, req.checkpoint, fmt::join(ckpt.newer_unfinished, ", "));
  EosChoice eos;
  config::Config cfg = base_config(req, ckpt, eos);

  // Layout and batches: the command line over the config.
  const int tp = req.tp > 0 ? req.tp : world_size;
  check_tp_divides(cfg.model, tp);
  ECHO_INPUT_CHECK(world_size % tp == 0, "tp = {} does not divide the {} ranks (world = dp × tp)", tp, world_size);
  const int dp = world_size / tp;
  cfg.parallel.tp = tp;
  // The check below names the command line's values as their source, not the config they
  // replaced ('data.seq_len' = 100000000 was blamed on the checkpoint's recorded config).
  std::vector<std::string> given;
  if (req.tp > 0) given.push_back(fmt::format("--tp {}", req.tp));
  if (req.seq_len > 0) {
    cfg.data.seq_len = req.seq_len;
    given.push_back(fmt::format("--seq-len {}", req.seq_len));
  }
  if (req.micro_batch > 0) {
    cfg.train.micro_batch = req.micro_batch;
    given.push_back(fmt::format("--micro-batch {}", req.micro_batch));
  }
  // A new micro-batch alone means one micro-batch per rank per global batch.
  if (req.global_batch > 0) {
    cfg.train.global_batch = req.global_batch;
    given.push_back(fmt::format("--global-batch {}", req.global_batch));
  } else if (req.micro_batch > 0) {
    // In 64 bits: --micro-batch 1073741824 at dp = 4 overflowed an int, and the split check below
    // divided by zero (SIGFPE). A value past the int range is left for validate() to refuse by
    // name ('train.micro_batch' must be <= 65536).
    cfg.train.global_batch = static_cast<int>(
        std::min<std::int64_t>(static_cast<std::int64_t>(req.micro_batch) * dp, std::numeric_limits<int>::max()));
  }
  if (req.batches > 0) {
    cfg.train.eval_batches = req.batches;
    given.push_back(fmt::format("--batches {}", req.batches));
  }
  // A recorded micro-batch that does not split the recorded global batch at this dp (a run
  // trained at another layout) is cut to one that does: the micro-batch only sets how many
  // sequences a forward holds, not which ones are evaluated. Batches the user gave (options,
  // --set, a --config file) are taken as given.
  const bool batch_given = req.micro_batch > 0 || req.global_batch > 0 || !req.config_path.empty() ||
                           config::overrides_set(req.overrides, "train.micro_batch") ||
                           config::overrides_set(req.overrides, "train.global_batch");
  if (!batch_given && cfg.train.global_batch % dp == 0 &&
      cfg.train.global_batch % (static_cast<int64_t>(cfg.train.micro_batch) * dp) != 0) {
    const int per_rank = cfg.train.global_batch / dp;
    int fit = std::min(cfg.train.micro_batch, per_rank);
    while (per_rank % fit != 0) --fit;
    if (rank == 0)
      logger->info(
          "micro-batch {} instead of the config's {}: {} x dp {} does not split its global batch of {} "
          "(--micro-batch sets it)",
          fit, cfg.train.micro_batch, cfg.train.micro_batch, dp, cfg.train.global_batch);
    cfg.train.micro_batch = fit;
  }
  if (!req.data.empty()) cfg.data.valid = req.data;
  if (!given.empty()) cfg.source = fmt::format("{} with echo_eval {}", cfg.source, fmt::join(given, " "));
  ECHO_INPUT_CHECK(!cfg.data.valid.empty(), "no evaluation data: pass --data PREFIX (the config has no data.valid)");
  config::refuse_unexpanded_home(req.data.empty() ? "data.valid" : "--data", cfg.data.valid);
  // Refuses a global batch that does not split into micro_batch x dp, naming the flags given.
  config::validate(cfg, world_size);
  int mb = cfg.train.micro_batch;  // cut by fit_default_batches below for a Hugging Face folder

  // The data first: its errors cost nothing to find.
  const std::string& prefix = cfg.data.valid;
  check_outputs(req, prefix, /*writer=*/rank == 0);
  require_resolvable(prefix + ".idx", fmt::format("evaluation data '{}': {}.idx", prefix, prefix),
                     " (make one with echo_prep, or run `bash scripts/get_data.sh` for data/demo)");
  const data::IndexedDataset ds = data::IndexedDataset::open(prefix);
  const std::optional<data::DatasetMeta> meta = data::read_dataset_meta(prefix);
  if (!eos.chosen) settle_eos(cfg, eos, ckpt, prefix, meta);
  // The data's own tokenizer and EOS (data/dataset_meta.h): a checkpoint's or a Hugging Face
  // folder's EOS that is not the data's is refused, as the trainer refuses it.
  data::check_dataset_meta(ds, "evaluation data", {cfg.data.eos_id, eos.source, cfg.model.vocab_size}, meta);
  data::check_token_range(ds, cfg.model.vocab_size, "evaluation data '" + prefix + "'");
  ECHO_INPUT_CHECK(cfg.data.eos_id >= 0 && cfg.data.eos_id < cfg.model.vocab_size,
                   "'data.eos_id' = {} must lie in [0, 'model.vocab_size' = {})", cfg.data.eos_id,
                   cfg.model.vocab_size);

  // The model as the trainer builds it (train/trainer.cpp), then the checkpoint's weights.
  const dist::World world = dist::World::create(tp);
  data::LoaderOptions opts{cfg.data.seq_len, cfg.run.seed, cfg.data.eos_id, world.layout.dp_rank, dp};
  opts.vocab_size = cfg.model.vocab_size;
  opts.eos_stored = data::decide_eos_stored(ds, meta, cfg.data.eos_id, "evaluation data");
  const data::DataLoader loader(ds, opts);
  EvalBatches spec{cfg.train.eval_batches, mb, cfg.train.global_batch / (mb * dp)};
  // Past the data's end the batches wrap around and count sequences twice. Asked for with
  // --batches, that is refused; the config's train.eval_batches is what the trainer evaluated
  // (with the same warning), so its val_loss is still reproduced. A Hugging Face folder has no
  // such setting, only echo's defaults: those are cut to what the data holds (their 7680
  // sequences read data/demo-bytes' 55 validation sequences of 2048 tokens about 140 times over).
  if (const EvalCoverage coverage = eval_coverage(loader, spec, dp); coverage.repeats()) {
    const std::string what = fmt::format(
        "{} global batches of {} sequences read {} sequences of {} tokens, but the evaluation data '{}' holds {}: "
        "the batches repeat them; {}",
        spec.batches, cfg.train.global_batch, coverage.needed, cfg.data.seq_len, prefix, coverage.available,
        coverage.advice(spec, dp, "--batches"));
    ECHO_INPUT_CHECK(req.batches == 0, "{}", what);
    const bool defaults_only = !ckpt.ours && req.config_path.empty() && req.micro_batch == 0 && req.global_batch == 0 &&
                               !config::overrides_set(req.overrides, "train.eval_batches") &&
                               !config::overrides_set(req.overrides, "train.micro_batch") &&
                               !config::overrides_set(req.overrides, "train.global_batch");
    if (defaults_only) {
      const std::string was = fmt::format("{} x {}", spec.batches, cfg.train.global_batch);
      ECHO_INPUT_CHECK(fit_default_batches(cfg, spec, coverage.available, dp),
                       "{} (--global-batch and --micro-batch set it)", what);
      mb = spec.micro_batch;
      if (rank == 0)
        logger->info(
            "evaluating {} global batches of {} sequences ({} per rank), as many as '{}' holds once: echo's "
            "default {} sequences would repeat them (--batches, --micro-batch and --global-batch set them)",
            spec.batches, cfg.train.global_batch, spec.micro_batch, prefix, was);
    } else if (rank == 0) {
      logger->warn("{} (train.eval_batches of the config, as the trainer evaluated it)", what);
    }
  }

  const model::ModelShape shape = model::make_model_shape(cfg.model, tp, world.layout.tp_rank);
  const dist::NodePlace node = dist::node_place(world.world);
  auto backend = backend::make_backend(cfg.run.device == config::Device::cuda ? Device::cuda : Device::cpu,
                                       {node.local_rank, node.local_size});
  // Before the first tensor, as the trainer does: a model or batch one rank cannot hold is refused
  // with the plan's parts (it ended in std::bad_alloc). No optimizer state: nothing is trained.
  reserve_step_memory(cfg, shape, *backend, model::Pass::evaluation, "evaluating this model",
                      "a smaller --micro-batch or --seq-len, or a larger --tp");
  auto blocks = comm::make_all_reduce(cfg.comm, cfg.run.device, world.tp, static_cast<int>(shape.layers));
  auto edge = comm::make_edge_all_reduce(cfg.comm, world.tp);
  model::CommTpOps tp_ops(world.tp, *blocks, edge.get(), cfg.run.device,
                          comm::transport_options_from(cfg.comm));
  model::Qwen3Model<float> model(shape, tp_ops, backend.get(), model::Pass::evaluation);
  model.set_int8_linear(quant::Int8LinearConfig::from(cfg.linear, cfg.run.seed), cfg.linear.projection_list());
  if (ckpt.ours)
    load_checkpoint(ckpt.path, model.params(), nullptr, world);
  else
    load_hf_weights(ckpt.path, model.params(), world);
  if (rank == 0)
    logger->info("{} ({}{}): tp {} dp {}, all-reduce {}, {} x {} global batches of {} x {} tokens on {}, eos {} ({})",
                 ckpt.path, rep.kind, rep.step >= 0 ? fmt::format(", step {}", rep.step) : std::string(), tp, dp,
                 comm::describe(*blocks), cfg.train.eval_batches, cfg.train.global_batch / (mb * dp), mb,
                 cfg.data.seq_len, prefix, cfg.data.eos_id, eos.source);
  // Allowed (how far RoPE extrapolates is a fair question to measure), but said.
  if (rank == 0 && cfg.data.seq_len > cfg.model.max_position_embeddings)
    logger->warn(
        "evaluating sequences of {} tokens, longer than the {} positions the model's config says it handles "
        "(model.max_position_embeddings): the loss measures RoPE beyond its trained context",
        cfg.data.seq_len, cfg.model.max_position_embeddings);

  std::vector<int32_t> tokens, targets;
  const EvalLoss result = evaluate_loss(model, loader, world.dp, spec, tokens, targets);
  if (!req.dump_batch.empty() && rank == 0) write_batch_npy(req.dump_batch, tokens, targets, mb, cfg.data.seq_len);

  rep.loss = result.loss;
  rep.ppl = std::exp(result.loss);
  rep.tokens = result.tokens;
  rep.data = prefix;
  rep.tp = tp;
  rep.dp = dp;
  rep.batches = spec.batches;
  rep.micro_batch = spec.micro_batch;
  rep.num_micro = spec.num_micro;
  rep.seq_len = cfg.data.seq_len;
  rep.config = cfg;
  return rep;
}

std::string eval_report_json(const EvalReport& r) {
  const auto& c = r.config.comm;
  nlohmann::ordered_json j = {{"loss", r.loss},
                              {"ppl", r.ppl},
                              {"tokens", r.tokens},
                              {"checkpoint", r.checkpoint},
                              {"kind", r.kind},
                              {"step", r.step >= 0 ? nlohmann::ordered_json(r.step) : nlohmann::ordered_json(nullptr)},
                              {"data", r.data},
                              {"tp", r.tp},
                              {"dp", r.dp},
                              {"batches", r.batches},
                              {"micro_batch", r.micro_batch},
                              {"num_micro", r.num_micro},
                              {"seq_len", r.seq_len},
                              {"seed", r.config.run.seed},
                              {"allreduce", std::string(config::to_string(c.allreduce))},
                              {"bits", c.bits},
                              {"group_size", c.group_size},
                              {"quantizer", std::string(config::to_string(c.quantizer))},
                              {"compensator", c.compensator.enabled},
                              {"eta", c.compensator.eta},
                              {"a", c.compensator.a},
                              {"beta1", c.compensator.beta1},
                              {"beta2", c.compensator.beta2},
                              {"early_site_8bit", c.early_site_8bit},
                              {"embedding_exact", c.embedding_exact},
                              {"linear_mode", std::string(config::to_string(r.config.linear.mode))}};
  return j.dump();
}

}  // namespace echo::train
