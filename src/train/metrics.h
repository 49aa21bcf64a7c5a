// What a run reports: one JSON line per step and per eval in <out_dir>/metrics.jsonl (rank 0),
// Echo telemetry lines in the same file, and a live progress line on rank 0's terminal.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "model/model_shape.h"

namespace echo::train {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, step_ms = 0, mfu = 0;
  // Bytes the writing rank (world rank 0) handed to its tensor-parallel group in the step
  // (model::TpTraffic): its all-reduces' wire bytes, and the scalar reductions' payload.
  uint64_t tp_wire_bytes = 0, tp_reduce_bytes = 0;
};

// Training FLOPs per token: 6·N + 12·L·n_heads·head_dim·seq (N = parameters of the full model).
double flops_per_token(const model::ModelShape& shape, int64_t num_params, int64_t seq_len);

// The peaks the MFU is measured against, and their description for the log.
struct DevicePeak {
  double flops_per_s = 0;     // fp32
  double int8_ops_per_s = 0;  // int8 multiply-adds x 2
  std::string description;
};
// CPU: cores × clock (from /proc/cpuinfo) × 32 fp32 FLOP/cycle (two 8-wide FMA units) and
// × 128 int8 ops/cycle (one 512-bit VNNI unit: 64 multiply-adds).
DevicePeak cpu_peak();
// One GPU, from its model name (cudaDeviceProp::name): the dense bf16 and int8 tensor-core
// peaks of the vendor's data sheet (H100/H200 SXM 989/1979 TFLOP/TOP/s, H100 PCIe 756/1513,
// A100 312/624, L40S 362/733, B200 2250/4500). flops_per_s stands for the bf16 peak here (the
// CUDA backend's GEMMs run in bf16). An unknown model gives zero peaks (MFU not reported) and
// says so in the description.
DevicePeak gpu_peak(const std::string& device_model);

// Model FLOPs utilisation of one step: the time the hardware would need at its peaks (the
// INT8 projections against the int8 peak, everything else against fp32) over the time taken.
// `units`: how many of what the peak describes the job runs on (CPU: nodes; CUDA: GPUs).
double mfu(double fp_flops, double int8_ops, double seconds, const DevicePeak& peak, int units);

class MetricsLog {
 public:
  MetricsLog() = default;  // inactive (ranks other than 0)
  // Appends when resuming, so a resumed run keeps its history.
  MetricsLog(const std::string& path, bool append);
  // Each throws echo::Error naming the file when the line cannot be written (a full disk): a
  // truncated metrics file must not pass for a finished run. Each also throws when the path no
  // longer names the file opened (deleted, moved away or replaced): its lines would go to a file
  // no one can read. An `rm -rf` of the run directory that fails part way ("Directory not empty",
  // racing a checkpoint save) leaves the directory itself, which RunDirLock::lost cannot see.
  void step(const StepMetrics& m);
  void eval(int64_t step, double val_loss);
  void raw(const std::string& json_line);
  // The identity check alone, for the end of a run: why the path no longer names the file opened,
  // or "" (also when inactive). A file lost after its last line (during the final save) must not
  // pass for a finished run's log.
  std::string why_lost() const;

 private:
  std::string path_;
  std::ofstream out_;
  // The file opened, as stat(path_) named it just after opening: device and inode.
  uint64_t dev_ = 0, ino_ = 0;
};

// For a resume from the checkpoint of `last_step`: removes from the metrics file every line of a
// later step (the run that died after its checkpoint logged them, and the resumed run logs them
// again) and a line that is not JSON after the last line kept (one cut off mid-write); a line
// that is not JSON among the kept ones stays. Each line that is not JSON is named in a warning.
// Rewrites the file atomically; nothing to do when it does not exist.
void truncate_metrics(const std::string& path, int64_t last_step);

// Whether the metrics file holds a validation line of `step` (read only; false when the file does
// not exist). A stop during an evaluation saves the step without one, and the resume owes it.
bool logged_eval_at(const std::string& path, int64_t step);

// "step   120/1000 | loss 3.4567 | lr 3.00e-04 | 12.3k tok/s | ETA 01:02:03"
std::string progress_line(const StepMetrics& m, int64_t total_steps, double seconds_left);

}  // namespace echo::train
