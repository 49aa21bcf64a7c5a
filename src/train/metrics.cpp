// metrics.jsonl, MFU and the progress line.
#include "train/metrics.h"

#include <sys/stat.h>

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "core/input_excerpt.h"
#include "core/error.h"
#include "core/log.h"

namespace echo::train {

double flops_per_token(const model::ModelShape& s, int64_t num_params, int64_t seq_len) {
  return 6.0 * static_cast<double>(num_params) +
         12.0 * static_cast<double>(s.layers * s.heads * s.head_dim) * static_cast<double>(seq_len);
}

DevicePeak cpu_peak() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  double mhz = 0;
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line))
    if (line.rfind("cpu MHz", 0) == 0) {
      mhz = std::stod(line.substr(line.find(':') + 1));
      break;
    }
  if (mhz <= 0) mhz = 2000;  // no clock reported: assume 2 GHz, and say so below
  const double peak = cores * mhz * 1e6 * 32.0, int8 = cores * mhz * 1e6 * 128.0;
  return {
      peak, int8,
      fmt::format("the CPU peak {} cores x {:.2f} GHz x 32 fp32 FLOP/cycle = {:.1f} GFLOP/s (int8: x 128 ops/cycle = "
                  "{:.1f} GOP/s)",
                  cores, mhz / 1e3, peak / 1e9, int8 / 1e9)};
}

DevicePeak gpu_peak(const std::string& device_model) {
  struct Known {
    const char* match;  // a substring of cudaDeviceProp::name
    double bf16, int8;
  };
  // Most specific first: "H100 PCIe" before "H100".
  static const Known kKnown[] = {{"H100 PCIe", 756e12, 1513e12}, {"H200", 989e12, 1979e12}, {"H100", 989e12, 1979e12},
                                 {"B200", 2250e12, 4500e12},     {"A100", 312e12, 624e12},  {"L40S", 362e12, 733e12}};
  for (const Known& k : kKnown)
    if (device_model.find(k.match) != std::string::npos)
      return {k.bf16, k.int8,
              fmt::format("the GPU peak of one {} (data sheet, dense): {:.0f} bf16 TFLOP/s, {:.0f} int8 TOP/s",
                          device_model, k.bf16 / 1e12, k.int8 / 1e12)};
  return {0, 0, fmt::format("no peak: none is known for the GPU '{}', so MFU is reported as 0", device_model)};
}

double mfu(double fp_flops, double int8_ops, double seconds, const DevicePeak& peak, int units) {
  if (peak.flops_per_s <= 0) return 0;
  const double ideal = fp_flops / peak.flops_per_s + (int8_ops > 0 ? int8_ops / peak.int8_ops_per_s : 0.0);
  return ideal / (seconds * units);
}

// Opening a FIFO for writing blocks until someone reads it: a run would hang before its first
// step. Refused by name instead (a link to a device such as /dev/full is opened as given).
static std::string refuse_fifo(const std::string& path) {
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  ECHO_INPUT_CHECK(type != std::filesystem::file_type::fifo && type != std::filesystem::file_type::socket,
                   "the metrics file '{}' is a {}, not a file: a run would block writing to it; remove it", path,
                   type == std::filesystem::file_type::fifo ? "FIFO" : "socket");
  return path;
}

MetricsLog::MetricsLog(const std::string& path, bool append)
    : path_(refuse_fifo(path)), out_(path, append ? std::ios::app : std::ios::trunc) {
  ECHO_RUN_CHECK(out_.good(), "cannot write the metrics file '{}': {}", path, std::strerror(errno));
  // NOTE: std::ofstream has no fd to fstat; the path is stat'ed right after the open (a swap in
  // between is not worth a hand-made stream).
  struct stat st {};
  ECHO_RUN_CHECK(::stat(path.c_str(), &st) == 0, "cannot stat the metrics file '{}' just opened: {}", path,
                 std::strerror(errno));
  dev_ = st.st_dev;
  ino_ = st.st_ino;
}

void MetricsLog::step(const StepMetrics& m) {
  raw(nlohmann::json{{"step", m.step},
                     {"loss", m.loss},
                     {"lr", m.lr},
                     {"grad_norm", m.grad_norm},
                     {"tokens_per_s", m.tokens_per_s},
                     {"step_ms", m.step_ms},
                     {"mfu", m.mfu},
                     {"tp_wire_bytes", m.tp_wire_bytes},
                     {"tp_reduce_bytes", m.tp_reduce_bytes}}
          .dump());
}

void MetricsLog::eval(int64_t step, double val_loss) {
  raw(nlohmann::json{{"step", step}, {"val_loss", val_loss}}.dump());
}

std::string MetricsLog::why_lost() const {
  if (!out_.is_open()) return {};
  struct stat st {};
  const bool named = ::stat(path_.c_str(), &st) == 0;
  // Only a missing name means gone; a permission or NFS error is named as what it is.
  if (!named && errno != ENOENT && errno != ENOTDIR)
    return fmt::format(
        "cannot check the metrics file '{}' while this run writes it: {}: stopping, since its lines "
        "might go to a file no one can read; go on from the newest checkpoint with --resume once it is "
        "readable",
        path_, std::strerror(errno));
  if (named && st.st_dev == dev_ && st.st_ino == ino_) return {};
  return fmt::format(
      "the metrics file '{}' {} while this run was writing it: stopping, since its lines would go to a file no one "
      "can read (an rm -rf of the run directory that fails part way leaves the folder); go on from the newest "
      "checkpoint with --resume (a file moved away can be moved back first)",
      path_, named ? "was replaced by another file" : "was deleted or moved away");
}

void MetricsLog::raw(const std::string& json_line) {
  if (!out_.is_open()) return;
  const std::string lost = why_lost();
  ECHO_RUN_CHECK(lost.empty(), "{}", lost);
  errno = 0;
  out_ << json_line << '\n';
  out_.flush();  // a crash must not lose the lines already reported
  ECHO_RUN_CHECK(out_.good(), "cannot write the metrics file '{}': {}", path_,
                 errno != 0 ? std::strerror(errno) : "write failed");
}

namespace {

// The step of a metrics line that is a JSON object with an integer "step", else none.
std::optional<int64_t> line_step(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return std::nullopt;
  return j["step"].get<int64_t>();
}

}  // namespace

void truncate_metrics(const std::string& path, int64_t last_step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Only a regular file has lines to keep (a link to a device, e.g. /dev/full in a test, is left alone).
  if (!fs::is_regular_file(path, ec)) return;
  std::ifstream in(path);
  ECHO_INPUT_CHECK(in.good(), "cannot read the metrics file '{}': {}", path, std::strerror(errno));
  struct Line {
    std::string text;
    bool json = false;
    bool later = false;  // of a step after last_step
  };
  std::vector<Line> lines;
  for (std::string text; std::getline(in, text);) {
    const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const std::optional<int64_t> step = line_step(j);
    const bool later = step && *step > last_step;
    lines.push_back({std::move(text), !j.is_discarded(), later});
  }
  // The file is appended to in order: a line that is not JSON before the last line that is kept
  // was written before the resume point and stays; one after it (a line cut off when the run
  // died, at the end) goes with the lines logged after the checkpoint.
  std::size_t keep_before = 0;
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].json && !lines[i].later) keep_before = i + 1;
  std::string kept;
  int64_t later = 0, not_json_dropped = 0, not_json = 0;
  constexpr int64_t kNamedLines = 3;  // a file of garbage is named by its first lines, not line by line
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const Line& line = lines[i];
    const bool keep = line.json ? !line.later : i < keep_before;
    if (!line.json && ++not_json <= kNamedLines)
      ECHO_WARN("train", "line {} of the metrics file '{}' is not JSON: '{}'; {}", i + 1, path, input_excerpt(line.text),
                keep ? "kept (it lies among the lines before the resume point)"
                     : "dropped with the lines after the resume point (most likely cut off when the run died)");
    if (keep)
      kept += line.text + '\n';
    else if (line.json)
      ++later;
    else
      ++not_json_dropped;
  }
  if (not_json > kNamedLines)
    ECHO_WARN("train", "the metrics file '{}' holds {} lines that are not JSON in all ({} of them dropped)", path,
              not_json, not_json_dropped);
  if (later == 0 && not_json_dropped == 0) return;
  // A unique temp file, removed when the write fails (a full disk left 'metrics.jsonl.tmp' behind).
  write_file_atomic(path, kept, fmt::format("cannot replace the metrics file '{}'", path));
  if (later > 0) ECHO_INFO("train", "resuming at step {}: dropped {} metrics lines logged after it", last_step, later);
}

bool logged_eval_at(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path);
  ECHO_INPUT_CHECK(in.good(), "cannot read the metrics file '{}': {}", path, std::strerror(errno));
  for (std::string text; std::getline(in, text);) {
    const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line_step(j) == step && j.contains("val_loss")) return true;
  }
  return false;
}

std::string progress_line(const StepMetrics& m, int64_t total_steps, double seconds_left) {
  const long s = std::lround(std::max(0.0, seconds_left));
  const double tps = m.tokens_per_s;
  const std::string rate = tps >= 1e6   ? fmt::format("{:.2f}M", tps / 1e6)
                           : tps >= 1e3 ? fmt::format("{:.1f}k", tps / 1e3)
                                        : fmt::format("{:.0f}", tps);
  return fmt::format(
      "step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad {:.3f} | {} tok/s | {:.0f} ms | ETA {:02}:{:02}:{:02}", m.step,
      total_steps, m.loss, m.lr, m.grad_norm, rate, m.step_ms, s / 3600, (s / 60) % 60, s % 60);
}

}  // namespace echo::train
