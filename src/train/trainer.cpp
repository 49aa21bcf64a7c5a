// Trainer: setup (run dir, model, data, resume) and the step loop.
#include "train/trainer.h"

#include <fmt/ranges.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <vector>

#include "comm/echo/echo_all_reduce.h"
#include "comm/make_all_reduce.h"
#include "core/error.h"
#include "core/input_excerpt.h"
#include "core/log.h"
#include "core/same_file.h"
#include "core/text_file.h"
#include "data/dataset_meta.h"
#include "data/stored_eos.h"
#include "data/token_range.h"
#include "dist/agreement.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"
#include "dist/world.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checksums.h"
#include "train/checkpoint/hf_weights.h"
#include "train/divergence.h"
#include "train/evaluation.h"
#include "train/hf_config.h"
#include "train/lr_schedule.h"
#include "train/resume_check.h"
#include "train/step_memory.h"
#include "train/stop_signal.h"

namespace echo::train {

namespace {

double mean_over(const dist::Communicator& comm, double value) { return comm.sum_in_rank_order(value) / comm.size(); }

// How many of what the MFU peak describes the job runs on: nodes for the CPU peak (ranks sharing
// memory form one node), GPUs for a GPU's (ranks of a node take devices local_rank % count, so
// a node uses min(its ranks, its devices)).
int count_peak_units(const dist::Communicator& world, Device device) {
  const dist::NodePlace place = [&world] {
    const dist::CollectiveScope watched("the run's node grouping (MPI_Comm_split_type)", world, dist::Patience::slow);
    return dist::node_place(world);
  }();
  const int per_node = device == Device::cuda ? std::min(place.local_size, std::max(1, cuda_device_count())) : 1;
  int mine = place.local_rank == 0 ? per_node : 0, units = 0;
  const dist::CollectiveScope watched("the run's count of the MFU peak's units (MPI_Allreduce)", world,
                                      dist::Patience::slow);
  MPI_CHECK(MPI_Allreduce(&mine, &units, 1, MPI_INT, MPI_SUM, world.get()));
  return units;
}

// Weights of the block projections that linear.projections puts in int8.
int64_t int8_projection_params(const model::Qwen3Plan& plan, const std::vector<std::string>& names) {
  int64_t n = 0;
  for (const auto& l : plan.layers) {
    const size_t index[] = {l.q, l.k, l.v, l.o, l.gate, l.up, l.down};
    for (int p = 0; p < 7; ++p)
      for (const auto& name : names)
        if (name == config::LinearConfig::kProjectionNames[p])
          n += plan.params[index[p]].full_shape[0] * plan.params[index[p]].full_shape[1];
  }
  return n;
}

int64_t count_parameters(const model::Qwen3Plan& plan) {
  int64_t n = 0;
  for (const auto& p : plan.params) {
    int64_t e = 1;
    for (int64_t d : p.full_shape) e *= d;
    n += e;
  }
  return n;
}

// Opens the dataset of config key `key`; a missing one says how to get the demo data.
data::IndexedDataset open_dataset(const std::string& key, const std::string& prefix) {
  require_resolvable(prefix + ".idx", fmt::format("'{}' = {}: {}.idx", key, prefix, prefix),
                     "; run `bash scripts/get_data.sh` to make the demo datasets (data/demo, data/demo-bytes), "
                     "or make one from your corpus with echo_prep");
  return data::IndexedDataset::open(prefix);
}

// The checkpoint a --resume continues from, and its trainer state.
struct ResumePoint {
  std::string dir;
  CheckpointMeta meta;
};

// The latest complete checkpoint of run_dir, or nullopt for a run that has none and nothing
// else: a step directory without its COMPLETE marker is damage, and is refused by name when it
// is newer than what would be resumed (or when nothing would be), since starting from an earlier
// step retrains its steps, drops their metrics and, at that step's save, overwrites it.
std::optional<ResumePoint> find_resume_point(const std::string& run_dir) {
  const auto ckpt = latest_checkpoint(run_dir);
  if (!ckpt) {
    const auto unfinished = unfinished_checkpoints(run_dir);
    ECHO_INPUT_CHECK(unfinished.empty(),
                     "cannot resume the run in {}: it has no complete checkpoint, only {} without a {} marker "
                     "(not fully written, or damaged); move it away to start over from step 0 with --resume, "
                     "or pass --overwrite to replace the run",
                     run_dir, fmt::join(unfinished, ", "), "COMPLETE");
    return std::nullopt;
  }
  ResumePoint point{*ckpt, read_checkpoint_meta(*ckpt)};
  // NOTE: the data resumes at the step's batch (the batch is a function of the step); the trainer
  // records data_position equal to the step, and another value (a hand-edited state, meant to skip
  // data) would otherwise be ignored in silence.
  ECHO_INPUT_CHECK(point.meta.data_position == static_cast<uint64_t>(point.meta.step),
                   "checkpoint '{}': its trainer state's 'data_position' = {} is not its 'step' = {} (the trainer "
                   "resumes the data at the step's batch and writes the two equal): not a state this trainer wrote",
                   point.dir, point.meta.data_position, point.meta.step);
  if (const auto consumed = point.meta.consumed_samples) {
    // Every step reads at least one sample and at most the largest train.global_batch.
    const uint64_t step = static_cast<uint64_t>(point.meta.step), most = std::numeric_limits<int>::max();
    const uint64_t fewest_steps = *consumed / most + (*consumed % most != 0 ? 1 : 0);
    ECHO_INPUT_CHECK(*consumed >= step && fewest_steps <= step,
                     "checkpoint '{}': its trainer state's 'consumed_samples' = {} cannot be read in 'step' = {} steps "
                     "(each reads between 1 and {} samples): not a state this trainer wrote",
                     point.dir, *consumed, step, most);
  }
  const auto newer = unfinished_checkpoints(run_dir, point.meta.step);
  ECHO_INPUT_CHECK(newer.empty(),
                   "cannot resume the run in {}: {} is newer than its latest complete checkpoint {} but has no {} "
                   "marker (not fully written, or damaged); move it away to resume from step {}, or pass "
                   "--overwrite to replace the run",
                   run_dir, fmt::join(newer, ", "), point.dir, "COMPLETE", point.meta.step);
  return point;
}

// The data position a resume goes on from: the samples the checkpoint consumed, or, in a
// checkpoint written before consumed_samples was recorded (every step then read the recorded
// train.global_batch), step x that batch.
uint64_t resumed_samples(const ResumePoint& point, const std::optional<config::Config>& recorded,
                         int global_batch_now) {
  if (point.meta.consumed_samples) return *point.meta.consumed_samples;
  const int batch = recorded ? recorded->train.global_batch : global_batch_now;
  const uint64_t consumed = static_cast<uint64_t>(point.meta.step) * static_cast<uint64_t>(batch);
  log::get("train")->info("{} predates the consumed_samples record: the data goes on from step {} x {} = {} samples",
                          point.dir, point.meta.step, batch, consumed);
  return consumed;
}

// Each rank opens data.train itself, possibly a copy on its node's own disk: a stale or partial
// copy on one node trained its ranks on other tokens with no word. Collective over `world`; every
// rank sees every hash, so all refuse together.
void check_same_data_everywhere(uint64_t hash, const std::string& path, const dist::Communicator& world) {
  std::vector<uint64_t> hashes(static_cast<size_t>(world.size()));
  {
    const dist::CollectiveScope watched("the start-up's comparison of data.train's hash (MPI_Allgather)", world,
                                        dist::Patience::slow);
    MPI_CHECK(MPI_Allgather(&hash, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, world.get()));
  }
  for (size_t r = 1; r < hashes.size(); ++r)
    ECHO_INPUT_CHECK(hashes[r] == hashes[0],
                     "'data.train' = {} is not the same data on every rank: rank 0 reads content hash {}, rank {} "
                     "reads {} (a stale or partial copy on one node's disk?); every rank must read the same tokens",
                     path, checksum_hex(hashes[0]), r, checksum_hex(hashes[r]));
}

}  // namespace

Trainer::Trainer(const config::Config& cfg, const dist::World& world, RunDirMode mode) : cfg_(cfg), world_(world) {
  auto logger = log::get("train");
  const auto& L = world.layout;
  ECHO_INPUT_CHECK(cfg.parallel.tp == L.tp, "the config's parallel.tp = {} differs from the world's tp = {}",
                   cfg.parallel.tp, L.tp);
  for (const auto& [key, path] : {std::pair<const char*, const std::string&>{"run.out_dir", cfg.run.out_dir},
                                  {"run.init_from", cfg.run.init_from},
                                  {"data.train", cfg.data.train},
                                  {"data.valid", cfg.data.valid}})
    config::refuse_unexpanded_home(key, path);
  // From its first collective on, this rank ends the job (dist/collective_watchdog.h) when a peer
  // stops arriving: a step's collectives after comm.peer_timeout_s, start-up's, a resume's and a
  // checkpoint save's (slow scopes, where a healthy peer may be busy far longer) after
  // comm.save_timeout_s.
  dist::set_collective_timeout(cfg.comm.peer_timeout_s, L.rank);
  dist::set_slow_collective_timeout(cfg.comm.save_timeout_s);
  // The message then names the rank on this node that holds a collective up.
  dist::watch_peers_on_node();
  // NOTE: nothing is written to the run directory until start-up succeeded (config.yaml last), so
  // a failed start leaves no trace that would make the rerun look like a reuse or rewrite what a
  // failed --resume had.
  const bool has_run = prepare_run_dir(
      cfg.run.out_dir, cfg.train.steps, mode, world.world, run_lock_,
      {{"run.init_from", cfg.run.init_from}, {"data.train", cfg.data.train}, {"data.valid", cfg.data.valid}});
  // What start-up can refuse from files alone (the checkpoint to resume and its config, the data,
  // run.init_from's config.json) is checked before the model is allocated: with the default
  // config that takes a minute and gigabytes.
  const std::optional<ResumePoint> resume_from =
      mode == RunDirMode::resume && has_run ? find_resume_point(cfg.run.out_dir) : std::nullopt;
  if (mode == RunDirMode::resume && has_run && L.rank == 0)
    for (const std::string& name : foreign_step_dirs(cfg.run.out_dir)) {
      const ForeignStepName why = foreign_step_reason(name);
      logger->warn(
          "ignoring {}/checkpoints/{}: not a name echo gives a checkpoint ({}; echo names them step_ and "
          "the step in 8 or more digits, e.g. step_00000006){}",
          cfg.run.out_dir, input_excerpt(name), why.reason,
          why.renamable ? "; rename it to that form to resume from it" : "");
    }
  if (mode == RunDirMode::resume && has_run && !resume_from)
    // A warning: the steps the run logged are retrained and their metrics lines dropped (a finished
    // run saved with train.checkpoint_interval 0 loses its whole log this way).
    logger->warn(
        "no complete checkpoint in {}: starting from step 0 (the metrics lines of the steps already run are "
        "dropped and the steps trained again)",
        cfg.run.out_dir);
  std::optional<config::Config> recorded;
  if (resume_from) {
    // The checkpoint's weights replace run.init_from's, so the run keeps the context it recorded
    // (taken from run.init_from's config.json at its start).
    recorded = recorded_config(resume_from->meta.config_yaml, resume_from->dir);
    if (recorded && !cfg.run.init_from.empty())
      cfg_.model.max_position_embeddings = recorded->model.max_position_embeddings;
  }
  // The model must be the checkpoint's: checked before open_data hashes the whole dataset, so a
  // changed model key is refused at once. A recorded data hash is compared after.
  if (resume_from)
    check_resume_config(recorded, cfg_, resume_from->dir, {resume_from->meta.train_data_hash, std::nullopt});
  open_data();
  if (resume_from) {
    // The model and data must be the checkpoint's (the data by its content hash, taken in open_data).
    const auto changed =
        check_resume_config(recorded, cfg_, resume_from->dir, {resume_from->meta.train_data_hash, train_data_hash_});
    consumed_samples_ = resumed_samples(*resume_from, recorded, cfg_.train.global_batch);
    if (L.rank == 0)
      for (const auto& line : changed) logger->warn("resuming with a changed setting: {}", line);
  }
  // run.init_from's config.json, checked against ours before the model is built and any weight is
  // read: its rope_theta or shape would otherwise be silently replaced by model.*. A resume loads
  // the checkpoint's weights instead.
  const bool from_hf = !cfg.run.init_from.empty() && !resume_from;
  const std::optional<int> init_context = from_hf ? check_init_from_config(cfg.run.init_from, cfg.model) : std::nullopt;
  // Training sequences longer than the context the checkpoints' config.json will claim (the
  // model's, or run.init_from's): transformers would be told a 128-token model handles 16.
  const int context = init_context.value_or(cfg_.model.max_position_embeddings);
  ECHO_INPUT_CHECK(
      cfg.data.seq_len <= context,
      "'data.seq_len' = {} is longer than the model's context, {} positions ({}): the checkpoints' "
      "config.json would claim a context shorter than the sequences trained on; raise "
      "model.max_position_embeddings or lower data.seq_len",
      cfg.data.seq_len, context,
      init_context ? "max_position_embeddings of run.init_from's config.json" : "'model.max_position_embeddings'");

  shape_ = model::make_model_shape(cfg.model, L.tp, L.tp_rank);
  {
    // Communicators and shared workspaces are made collectively (MPI_Comm_split_type,
    // MPI_Win_allocate_shared, barriers), each rank arriving from its own data scans.
    const dist::CollectiveScope watched("the start-up's set-up of the backend and all-reduce workspaces", world.world,
                                        dist::Patience::slow);
    const dist::NodePlace node = dist::node_place(world.world);
    backend_ = backend::make_backend(cfg.run.device == config::Device::cuda ? Device::cuda : Device::cpu,
                                     {node.local_rank, node.local_size});
    grad_sync_ = std::make_unique<GradientSync>(world, cfg.run.device);
    blocks_ = comm::make_all_reduce(cfg.comm, cfg.run.device, world.tp, static_cast<int>(shape_.layers));
    edge_ = comm::make_edge_all_reduce(cfg.comm, world.tp);
  }
  tp_ops_ = std::make_unique<model::CommTpOps>(world.tp, *blocks_, edge_.get(), cfg.run.device,
                                               comm::transport_options_from(cfg.comm));
  // Before the first tensor: does one rank's training state fit (model/memory_plan.h)?
  memory_plan_ = reserve_step_memory(cfg, shape_, *backend_, model::Pass::training, "training this model",
                                     "a smaller train.micro_batch, data.seq_len or model, or a larger parallel.tp");
  const auto int8_cfg = quant::Int8LinearConfig::from(cfg.linear, cfg.run.seed);
  model_ = std::make_unique<model::Qwen3Model<float>>(shape_, *tp_ops_, backend_.get());
  model_->set_int8_linear(int8_cfg, cfg.linear.projection_list());
  num_params_ = count_parameters(model_->plan());
  model_->init_weights(cfg.run.seed);
  if (from_hf) {
    load_hf_weights(cfg.run.init_from, model_->params(), world);
    // config.json of our checkpoints carries the context of the model we started from, not ours.
    if (context != cfg_.model.max_position_embeddings) {  // run.init_from's config.json gave one
      logger->info("model.max_position_embeddings = {} from {} (was {})", context, cfg.run.init_from,
                   cfg_.model.max_position_embeddings);
      cfg_.model.max_position_embeddings = context;
    }
  }
  optimizer_ = std::make_unique<AdamW>(model_->params());

  if (resume_from) {
    const CheckpointMeta meta = load_checkpoint(resume_from->dir, model_->params(), optimizer_.get(), world);
    // NOTE: the trainer steps the optimizer once per training step; another count (a hand-edited
    // state, which a checkpoint without checksums cannot catch) would resume AdamW's bias
    // correction from a run that never happened: 0 restarts it, so the resumed run silently
    // differs from one never stopped.
    ECHO_INPUT_CHECK(optimizer_->step_count() == meta.step,
                     "checkpoint '{}': its trainer state's 'optimizer_step' = {} is not its 'step' = {} (the trainer "
                     "steps the optimizer once per step): not a state this trainer wrote",
                     resume_from->dir, optimizer_->step_count(), meta.step);
    start_step_ = meta.step;
    last_saved_step_ = meta.step;
    logger->info("resumed from {} at step {}, {} samples consumed", resume_from->dir, start_step_, consumed_samples_);
  }
  // A signal during start-up ends the run before it changes the directory: an --overwrite keeps
  // the old run, a --resume its metrics (run() then stops before the first step). So does a
  // resume of a run already at train.steps, which has nothing to train (unless it owes the
  // evaluation of its last step, below).
  stopped_in_start_up_ = StopSignal().requested_at_start_up(world.world);
  // A stop during an evaluation abandons it and saves the step without its val_loss line: the
  // resume owes that evaluation (the same batches, the same weights: the number the run would
  // have logged). Only rank 0 reads metrics.jsonl; the verdict is broadcast below.
  const bool eval_due_at_resume = mode == RunDirMode::resume && start_step_ > 0 && valid_loader_ &&
                                  cfg.train.eval_interval > 0 && start_step_ % cfg.train.eval_interval == 0;
  // Rank 0 writes the run directory; a failure there (a directory at metrics.jsonl, a full disk)
  // is agreed, so the other ranks raise it too instead of waiting for rank 0 in the first step.
  std::exception_ptr write_failure;
  std::string rank0_write_error;
  bool rank0_input_error = false;
  if (L.rank == 0 && !stopped_in_start_up_ && (start_step_ < cfg.train.steps || eval_due_at_resume)) {
    run_lock_.keep();  // the run writes its directory from here on: the lock file and folders stay
    try {
      // --overwrite: the old run goes only now that start-up has succeeded.
      if (mode == RunDirMode::overwrite && has_run) clear_run_dir(cfg.run.out_dir);
      const std::string metrics = run_file(cfg.run.out_dir, "metrics.jsonl");
      // Read first: a resume of a finished run that owes nothing leaves the directory as it was.
      eval_owed_ = eval_due_at_resume && !logged_eval_at(metrics, start_step_);
      if (start_step_ < cfg.train.steps || eval_owed_) {
        // A resume continues the history from its checkpoint: lines logged after it (by the run
        // that died) would be repeated.
        if (mode == RunDirMode::resume) truncate_metrics(metrics, start_step_);
        metrics_ = MetricsLog(metrics, /*append=*/mode == RunDirMode::resume);
        config::write_effective_config(cfg_, run_file(cfg.run.out_dir, "config.yaml"));
      }
    } catch (const std::exception& e) {
      write_failure = std::current_exception();
      rank0_write_error = dist::error_text(e);
      const auto* err = dynamic_cast<const Error*>(&e);
      rank0_input_error = err != nullptr && err->is_input();
    }
  }
  if (const std::string agreed =
          dist::agree(world.world, rank0_write_error, "the start-up's agreement on rank 0's run-directory writes");
      !agreed.empty()) {
    // Every rank raises the kind rank 0 raised (an InputError, e.g. a directory in the way of
    // config.yaml, or a RunError), so an in-process caller sees one error on all of them.
    {
      const dist::CollectiveScope watched("the start-up's broadcast of rank 0's error kind (MPI_Bcast)", world.world,
                                          dist::Patience::slow);
      MPI_CHECK(MPI_Bcast(&rank0_input_error, 1, MPI_C_BOOL, 0, world.world.get()));
    }
    if (write_failure) std::rethrow_exception(write_failure);
    if (rank0_input_error) ECHO_INPUT_FAIL("{}", agreed);
    ECHO_RUN_FAIL("{}", agreed);
  }
  if (eval_due_at_resume && !stopped_in_start_up_) {
    const dist::CollectiveScope watched("the start-up's broadcast of whether the resume owes an evaluation (MPI_Bcast)",
                                        world.world, dist::Patience::slow);
    MPI_CHECK(MPI_Bcast(&eval_owed_, 1, MPI_C_BOOL, 0, world.world.get()));
  }
  peak_ = backend_->device() == Device::cuda ? gpu_peak(backend_->device_model()) : cpu_peak();
  logger->info(
      "model: {} parameters, {} layers, hidden {}, tp {} dp {}, all-reduce {}; {} micro-batches of {} x {} per step",
      num_params_, shape_.layers, shape_.hidden, L.tp, L.dp, comm::describe(*blocks_), num_micro_,
      cfg.train.micro_batch, cfg.data.seq_len);
  logger->info("MFU is measured against {}", peak_.description);
  logger->info("memory per rank, planned: {}", memory_plan_.describe());
  // Legal but seldom meant: a warmup as long as the run never decays (and, longer, never reaches optim.lr).
  if (L.rank == 0 && cfg.schedule.warmup_steps >= cfg.train.steps)
    logger->warn(
        "'schedule.warmup_steps' = {} is not below 'train.steps' = {}: the learning rate rises for the whole run, "
        "to {:.4g} at the last step ('optim.lr' = {}){}",
        cfg.schedule.warmup_steps, cfg.train.steps,
        learning_rate(cfg.optim, cfg.schedule, cfg.train.steps - 1, cfg.train.steps), cfg.optim.lr,
        cfg.schedule.decay == config::LrDecay::constant
            ? std::string()
            : fmt::format(", and never decays toward 'optim.min_lr' = {}", cfg.optim.min_lr));
}

// The training (and validation) data, checked against the config and the sidecar echo_prep wrote.
void Trainer::open_data() {
  const config::Config& cfg = cfg_;
  const auto& L = world_.layout;
  const int per_step = cfg.train.micro_batch * L.dp;
  num_micro_ = cfg.train.global_batch / per_step;
  train_data_.emplace(open_dataset("data.train", cfg.data.train));
  // The tokenizer and EOS echo_prep recorded beside the data (data/dataset_meta.h), before the
  // scans: a data.eos_id or model.vocab_size of another tokenizer is named as such.
  const data::TokenSettings tokens{cfg.data.eos_id, "data.eos_id of the config", cfg.model.vocab_size};
  const auto train_meta = data::check_dataset_meta(*train_data_, "data.train", tokens);
  // Against the true vocabulary: ids in [vocab_size, padded rows) are rows no tokenizer emits.
  // One pass over the tokens: the range check and the content hash a checkpoint records.
  train_data_hash_ = data::check_token_range_and_hash(*train_data_, cfg.model.vocab_size, "data.train");
  check_same_data_everywhere(train_data_hash_, cfg.data.train, world_.world);
  // The EOS is packed between documents as an input id: it must be a row the tokenizer can emit.
  ECHO_INPUT_CHECK(cfg.data.eos_id < cfg.model.vocab_size, "'data.eos_id' = {} must be < 'model.vocab_size' = {}",
                   cfg.data.eos_id, cfg.model.vocab_size);
  // Documents that already end in the EOS (the sidecar says so, or, without one, every sampled
  // document does) are packed as stored.
  data::LoaderOptions opts{cfg.data.seq_len, cfg.run.seed, cfg.data.eos_id, L.dp_rank, L.dp};
  opts.vocab_size = cfg.model.vocab_size;
  opts.eos_stored = data::decide_eos_stored(*train_data_, train_meta, cfg.data.eos_id, "data.train");
  train_loader_.emplace(*train_data_, opts);
  // A step longer than an epoch reads every sequence several times in one gradient (a global
  // batch of 10^6 over 17k sequences took hours a step, with nothing said).
  if (const uint64_t epoch = train_loader_->samples_per_epoch();
      static_cast<uint64_t>(cfg.train.global_batch) > epoch && L.rank == 0)
    log::get("train")->warn(
        "train.global_batch = {} sequences, but data.train holds {} sequences of {} tokens: each step reads every "
        "sequence about {:.1f} times",
        cfg.train.global_batch, epoch, cfg.data.seq_len,
        static_cast<double>(cfg.train.global_batch) / static_cast<double>(std::max<uint64_t>(epoch, 1)));
  if (cfg.data.valid.empty() && cfg.train.eval_interval > 0 && L.rank == 0)
    log::get("train")->info("no evaluations: data.valid is empty, so train.eval_interval = {} applies to nothing",
                            cfg.train.eval_interval);
  if (!cfg.data.valid.empty() && cfg.train.eval_interval > 0) {
    valid_data_.emplace(open_dataset("data.valid", cfg.data.valid));
    if (L.rank == 0 && same_file(cfg.data.valid + ".bin", cfg.data.train + ".bin"))
      log::get("train")->warn(
          "'data.valid' = {} is the training data ('data.train' = {}): val_loss measures "
          "sequences the model trains on, not held-out text",
          cfg.data.valid, cfg.data.train);
    const auto valid_meta = data::check_dataset_meta(*valid_data_, "data.valid", tokens);
    if (train_meta && valid_meta) data::check_same_preparation(*train_meta, "data.train", *valid_meta, "data.valid");
    data::check_token_range(*valid_data_, cfg.model.vocab_size, "data.valid");
    data::LoaderOptions valid_opts = opts;
    valid_opts.eos_stored = data::decide_eos_stored(*valid_data_, valid_meta, cfg.data.eos_id, "data.valid");
    valid_loader_.emplace(*valid_data_, valid_opts);
    const EvalBatches spec{cfg.train.eval_batches, cfg.train.micro_batch, num_micro_};
    if (const EvalCoverage c = eval_coverage(*valid_loader_, spec, L.dp); c.repeats() && L.rank == 0)
      log::get("train")->warn(
          "train.eval_batches = {} global batches read {} sequences of {} tokens, but data.valid holds {}: each "
          "evaluation repeats sequences; {}",
          spec.batches, c.needed, cfg.data.seq_len, c.available, c.advice(spec, L.dp, "train.eval_batches"));
  }
}

std::optional<double> Trainer::train_step(int64_t step, bool telemetry, const std::function<bool()>& abandon) {
  auto* echo = dynamic_cast<comm::EchoAllReduce*>(blocks_.get());
  if (echo) echo->set_telemetry(telemetry);
  auto& params = model_->params();
  params.zero_grads();
  // The micro-batches' losses add up on the device; the host reads the sum once, after the last.
  Tensor loss = model_->loss_accumulator();
  const int64_t mb = cfg_.train.micro_batch, seq = cfg_.data.seq_len;
  for (int micro = 0; micro < num_micro_; ++micro) {
    train_loader_->micro_batch(consumed_samples_, micro, static_cast<int>(mb), num_micro_, tokens_, targets_);
    // The S3R thresholds are keyed by (step, global token index): this micro-batch's first
    // token sits after those of the lower DP ranks and of the earlier micro-batches.
    const int64_t first_sample = (static_cast<int64_t>(world_.layout.dp_rank) * num_micro_ + micro) * mb;
    model_->set_position(static_cast<uint32_t>(step), first_sample * seq);
    const model::Batch batch{tokens_.data(), targets_.data(), mb, seq};
    model_->forward_backward(batch, 1.0f / static_cast<float>(num_micro_), loss, num_micro_);
    if (after_micro_) after_micro_(step + 1, micro);
    // NOTE: nothing a step changes before the optimizer persists (the gradients are zeroed at the
    // next step's start, the compensator lives within one pass, S3R draws are keyed by the step),
    // so a step dropped here is retrained identically by the resume.
    if (micro + 1 < num_micro_ && abandon()) return std::nullopt;
  }
  return mean_over(world_.dp, model_->read_loss(loss));
}

void Trainer::check_run_dir_kept() const {
  const std::string lost = run_lock_.lost(cfg_.run.out_dir);
  ECHO_RUN_CHECK(lost.empty(), "{}", lost);
}

void Trainer::check_metrics_kept() const {
  // Agreed, so every rank reports the run failed, not only rank 0 (which writes the file).
  const std::string lost = dist::agree(world_.world, world_.layout.rank == 0 ? metrics_.why_lost() : std::string(),
                                       "the end of run's metrics-file check");
  ECHO_RUN_CHECK(lost.empty(), "{}", lost);
}

void Trainer::record_eval(int64_t step, double val_loss, std::string_view note) {
  if (world_.layout.rank != 0) return;
  check_run_dir_kept();
  metrics_.eval(step, val_loss);
  log::get("train")->info("step {:>6}/{} | val_loss {:.4f}{}", step, cfg_.train.steps, val_loss, note);
}

std::optional<double> Trainer::evaluate(const StopSignal& stop) {
  if (!valid_loader_) return NAN;
  // Shared with echo_eval (train/evaluation.h), so an offline eval of a checkpoint reproduces this.
  const EvalBatches spec{cfg_.train.eval_batches, cfg_.train.micro_batch, num_micro_};
  // A stop asked during a long evaluation ends it, so the checkpoint is written within the
  // scheduler's grace period instead of after the last batch.
  const EvalLoss r = evaluate_loss(*model_, *valid_loader_, world_.dp, spec, tokens_, targets_,
                                   [&] { return stop.requested(world_.world); });
  if (r.abandoned_at == 0) return r.loss;
  if (world_.layout.rank == 0)
    log::get("train")->warn("evaluation abandoned after {} of {} batches: a stop was asked", r.abandoned_at,
                            spec.batches);
  return std::nullopt;
}

void Trainer::save(int64_t steps_done) {
  // A save into a deleted run directory would make it again, unlocked (RunDirLock::lost); agreed,
  // so every rank stops before the save's gathers.
  const std::string lost =
      dist::agree(world_.world, run_lock_.lost(cfg_.run.out_dir), "the checkpoint save's run-directory check");
  ECHO_RUN_CHECK(lost.empty(), "{}", lost);
  CheckpointMeta meta;
  meta.step = steps_done;
  meta.data_position = static_cast<uint64_t>(steps_done);
  meta.consumed_samples = consumed_samples_;
  meta.train_data_hash = train_data_hash_;
  meta.seed = cfg_.run.seed;
  meta.tp = world_.layout.tp;
  meta.dp = world_.layout.dp;
  meta.config_yaml = config::to_yaml(cfg_);
  save_checkpoint(cfg_.run.out_dir, model_->params(), *optimizer_, meta, world_, cfg_.train.keep_checkpoints);
  last_saved_step_ = steps_done;
  if (after_save_) after_save_(steps_done);
}

std::string Trainer::kept_checkpoint() const {
  if (last_saved_step_ < 0) return "no checkpoint was saved by this run";
  return fmt::format("the last good checkpoint {} is kept", checkpoint_dir(cfg_.run.out_dir, last_saved_step_));
}

void Trainer::log_telemetry(int64_t step) {
  auto* echo = dynamic_cast<comm::EchoAllReduce*>(blocks_.get());
  if (!echo) return;
  for (auto dir : {comm::Direction::forward, comm::Direction::backward})
    for (const auto& t : echo->telemetry(dir)) metrics_.raw(comm::to_json_line(t, step));
}

TrainResult Trainer::run(int64_t stop_after) {
  auto logger = log::get("train");
  StopSignal stop;
  TrainResult result;
  result.steps_done = start_step_;
  const int64_t total = cfg_.train.steps;
  const double tokens_per_step = static_cast<double>(cfg_.train.global_batch) * cfg_.data.seq_len;
  const double flops_per_step = flops_per_token(shape_, num_params_, cfg_.data.seq_len) * tokens_per_step;
  // With INT8 linears, 6 ops per token per weight of the int8 projections run in int8.
  const double int8_per_step =
      cfg_.linear.mode == config::LinearMode::int8
          ? 6.0 * static_cast<double>(int8_projection_params(model_->plan(), cfg_.linear.projection_list())) *
                tokens_per_step
          : 0.0;
  const int peak_units = count_peak_units(world_.world, backend_->device());
  // A signal during start-up (echo_train installs the handler first): stop before any step;
  // there is nothing new to save.
  if (stopped_in_start_up_ || stop.requested(world_.world)) {
    logger->warn("stopping before step {} on {}; nothing new to save{}", start_step_ + 1, stop.what(),
                 stopped_in_start_up_ ? ", and the run directory is as it was" : "");
    result.stopped_by_signal = true;
    return result;
  }
  if (eval_owed_) {
    // The evaluation of the checkpoint's step that metrics.jsonl lacks: most often one a stop
    // abandoned before saving the step (also a metrics file removed, or validation newly set).
    const std::optional<double> val = evaluate(stop);
    if (!val) {
      logger->warn("stopping at step {} on {}; the evaluation of step {} is still owed to the next --resume",
                   start_step_, stop.what(), start_step_);
      result.stopped_by_signal = true;
      return result;
    }
    record_eval(start_step_, *val,
                " (evaluated on resume: metrics.jsonl had no val_loss of this step, as after a stop during its "
                "evaluation)");
    if (start_step_ == total) return result;
  }
  if (start_step_ >= total) {
    logger->warn(
        "nothing to train: the run is at step {} and train.steps = {}; set train.steps above {} to continue it",
        start_step_, total, start_step_);
    return result;
  }
  double elapsed = 0;
  // The watchdog names the step a hang happens in; outside the loop it names none.
  struct StepForWatchdog {
    ~StepForWatchdog() { dist::set_collective_step(0); }
  } step_for_watchdog;
  DivergenceWarnings divergence_warnings(shape_.vocab);
  for (int64_t step = start_step_; step < total; ++step) {
    dist::set_collective_step(step + 1);
    const auto t0 = std::chrono::steady_clock::now();
    const int interval = cfg_.comm.telemetry_interval;
    const bool telemetry = interval > 0 && (step + 1) % interval == 0;
    std::optional<double> stepped;
    tp_ops_->take_traffic();  // what an evaluation sent is not the step's
    try {
      // A stop is looked for after each micro-batch too: a step can take longer than a
      // scheduler's grace period (a large global batch on few ranks).
      stepped = train_step(step, telemetry, [&] { return stop.requested(world_.world); });
    } catch (const Error& e) {
      // Name the step: the all-reduce knows its site, only the loop knows the step.
      rethrow_with_context(e, fmt::format("at step {}: ", step + 1), "; " + kept_checkpoint());
    }
    if (!stepped) {
      // Every rank agreed on the stop after the same micro-batch; the last finished step is what
      // the checkpoint holds.
      const bool save_now = step > start_step_ && last_saved_step_ != step;
      if (save_now) save(step);
      logger->warn("stopping in step {} on {}: the step is dropped before its optimizer update; {}", step + 1,
                   stop.what(),
                   save_now                   ? fmt::format("checkpoint of step {} saved", step)
                   : last_saved_step_ == step ? fmt::format("the checkpoint of step {} is kept", step)
                                              : std::string("nothing was trained to save"));
      result.stopped_by_signal = true;
      check_metrics_kept();
      return result;
    }
    const double loss = *stepped;
    // Every check below gives the same verdict on every rank (the values are reduced), and all
    // come before this step can be saved: a diverged step never becomes a checkpoint.
    ECHO_RUN_CHECK(std::isfinite(loss), "non-finite training loss ({}) at step {}; {}", loss, step + 1,
                   kept_checkpoint());
    if (step == start_step_)
      logger->info("memory: at most {} of tensors in use through step {} ({} planned){}",
                   format_bytes(backend_->peak_bytes_in_use()), step + 1, format_bytes(memory_plan_.total()),
                   backend_->memory_pool_note());
    grad_sync_->average_over_dp(model_->params());
    const double norm = grad_sync_->global_norm(model_->params());
    ECHO_RUN_CHECK(std::isfinite(norm), "non-finite gradient norm at step {}; {}", step + 1, kept_checkpoint());
    clip_gradients(model_->params(), norm, cfg_.optim.grad_clip);
    const double lr = learning_rate(cfg_.optim, cfg_.schedule, step, total);
    optimizer_->step(model_->params(), lr, cfg_.optim);
    consumed_samples_ += static_cast<uint64_t>(cfg_.train.global_batch);
    check_weights(max_abs_weight(model_->params(), world_.world), step + 1, kept_checkpoint());
    for (const std::string& warning : divergence_warnings.after_step(step + 1, loss, norm))
      if (world_.layout.rank == 0) logger->warn("{}", warning);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    elapsed += secs;
    result.steps_done = step + 1;
    result.steps_run = step + 1 - start_step_;
    result.last_loss = loss;

    const model::TpTraffic traffic = tp_ops_->take_traffic();
    StepMetrics m{step + 1,
                  loss,
                  lr,
                  norm,
                  tokens_per_step / secs,
                  secs * 1e3,
                  mfu(flops_per_step - int8_per_step, int8_per_step, secs, peak_, peak_units),
                  traffic.all_reduce_bytes,
                  traffic.reduction_bytes};
    if (world_.layout.rank == 0) {
      if (cfg_.train.log_interval > 0 && (step + 1) % cfg_.train.log_interval == 0) {
        const double eta =
            elapsed / static_cast<double>(step + 1 - start_step_) * static_cast<double>(total - step - 1);
        logger->info("{}", progress_line(m, total, eta));
      }
      check_run_dir_kept();
      metrics_.step(m);
      if (telemetry) log_telemetry(step + 1);
    }
    if (cfg_.train.eval_interval > 0 && (step + 1) % cfg_.train.eval_interval == 0 && valid_loader_) {
      std::optional<double> val;
      try {
        val = evaluate(stop);
      } catch (const Error& e) {
        // An error inside the evaluation's forward (non-finite activations of diverged weights)
        // named its site only.
        rethrow_with_context(e, fmt::format("in the evaluation after step {}: ", step + 1), "; " + kept_checkpoint());
      }
      if (val) record_eval(step + 1, *val);
    }
    const bool last = step + 1 == total;
    const bool periodic = cfg_.train.checkpoint_interval > 0 && (step + 1) % cfg_.train.checkpoint_interval == 0;
    // The periodic save comes before the stop check, so a signal that arrives while it is written
    // stops the run at this step (once it trained and saved one more).
    if (periodic || (last && cfg_.train.checkpoint_interval > 0)) save(step + 1);
    const bool signalled = stop.requested(world_.world);
    if (signalled || (stop_after > 0 && step + 1 - start_step_ >= stop_after && !last)) {
      if (last_saved_step_ != step + 1) save(step + 1);
      if (signalled)
        logger->warn("stopping at step {} on {}; checkpoint saved", step + 1, stop.what());
      else
        logger->info("stopping at step {} as asked; checkpoint saved", step + 1);
      result.stopped_by_signal = true;
      check_metrics_kept();
      return result;
    }
  }
  check_metrics_kept();
  return result;
}

}  // namespace echo::train
