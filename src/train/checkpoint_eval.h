// Perplexity of a checkpoint on an indexed dataset (echo_eval; docs/design.md §12, §15): an echo
// checkpoint (a step directory, or a run directory meaning its newest complete one) or a Hugging
// Face Qwen3 folder, at any tp, under any comm setting given as config overrides. The loss is the
// trainer's validation loss (train/evaluation.h) for the same windows and layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace echo::train {

struct EvalRequest {
  std::string checkpoint;              // step dir, run dir, HF folder, .safetensors or .index.json
  std::string data;                    // dataset prefix; empty = the config's data.valid
  std::string config_path;             // YAML to use instead of the checkpoint's own config
  std::vector<std::string> overrides;  // "comm.bits=8", applied over that config
  int tp = 0;                          // 0 = the number of ranks
  int batches = 0;                     // global batches; 0 = train.eval_batches
  int micro_batch = 0;                 // 0 = train.micro_batch
  int global_batch = 0;                // 0 = train.global_batch
  int seq_len = 0;                     // 0 = data.seq_len
  // When set, rank 0 writes the last micro-batch it evaluated as a NumPy .npy of int32, shape
  // (2, micro_batch, seq_len): [0] the input tokens, [1] the targets (-100 = ignored). With one
  // micro-batch in all (--batches 1, global batch = micro batch, one rank) the reported loss is
  // that batch's, so another implementation can be checked on exactly the same tokens.
  std::string dump_batch;
  // Where the caller will write the report (--json), checked with dump_batch before anything is
  // evaluated: neither may be a file evaluate_checkpoint reads (see check_outputs).
  std::string json_out;
};

struct EvalReport {
  double loss = 0, ppl = 0;
  int64_t tokens = 0;
  std::string checkpoint;  // the resolved directory or file that was loaded
  std::string kind;        // "echo" (our checkpoint) or "hf"
  int64_t step = -1;       // our checkpoints: the training step; -1 for Hugging Face ones
  std::string data;
  int tp = 1, dp = 1, batches = 0, micro_batch = 0, num_micro = 0;
  int64_t seq_len = 0;
  config::Config config;  // the effective config of the evaluation
};

// Collective over MPI_COMM_WORLD (every rank passes the same request). Bad input (a missing or
// incomplete checkpoint, a dataset with ids outside the vocabulary, a tp that does not divide the
// heads, a batch that does not split over the ranks) throws echo::InputError naming what to fix,
// on every rank.
EvalReport evaluate_checkpoint(const EvalRequest& request);

// The JSON object echo_eval --json writes: loss, ppl, tokens and what produced them.
std::string eval_report_json(const EvalReport& report);

}  // namespace echo::train
