// FLOPs per token, MFU with fp32 and int8 parts, the progress line, write errors on
// metrics.jsonl, and its truncation for a resume.
#include "train/metrics.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "../support/log_capture.h"
#include "../support/test_util.h"

namespace echo::train {

TEST(Metrics, FlopsPerTokenIs6NPlusAttention) {
  model::ModelShape s;
  s.layers = 28;
  s.heads = 16;
  s.head_dim = 128;
  // Qwen3-0.6B-like: 6·N + 12·L·heads·head_dim·seq
  EXPECT_DOUBLE_EQ(flops_per_token(s, 600'000'000, 2048), 6.0 * 6e8 + 12.0 * 28 * 16 * 128 * 2048);
}

TEST(Metrics, MfuWeighsInt8WorkAgainstTheInt8Peak) {
  DevicePeak peak{100.0, 400.0, "test"};
  EXPECT_DOUBLE_EQ(mfu(50.0, 0.0, 1.0, peak, 1), 0.5);
  EXPECT_DOUBLE_EQ(mfu(50.0, 0.0, 1.0, peak, 2), 0.25) << "two nodes have twice the peak";
  // 20 fp32 FLOPs take 0.2 s at peak, 200 int8 ops 0.5 s: 0.7 s of ideal time in 1 s.
  EXPECT_DOUBLE_EQ(mfu(20.0, 200.0, 1.0, peak, 1), 0.7);
  const DevicePeak cpu = cpu_peak();
  EXPECT_GT(cpu.flops_per_s, 0);
  EXPECT_DOUBLE_EQ(cpu.int8_ops_per_s, 4 * cpu.flops_per_s);
  EXPECT_NE(cpu.description.find("GFLOP/s"), std::string::npos);
}

TEST(Metrics, GpuPeakComesFromTheModelName) {
  EXPECT_DOUBLE_EQ(gpu_peak("NVIDIA H200").flops_per_s, 989e12);
  EXPECT_DOUBLE_EQ(gpu_peak("NVIDIA H100 80GB HBM3").int8_ops_per_s, 1979e12);
  EXPECT_DOUBLE_EQ(gpu_peak("NVIDIA H100 PCIe").flops_per_s, 756e12) << "the PCIe part, not the SXM one";
  EXPECT_DOUBLE_EQ(gpu_peak("NVIDIA A100-SXM4-80GB").flops_per_s, 312e12);
  const DevicePeak unknown = gpu_peak("Radeon 9000");
  EXPECT_EQ(unknown.flops_per_s, 0);
  EXPECT_NE(unknown.description.find("Radeon 9000"), std::string::npos);
  EXPECT_EQ(mfu(1e12, 0, 1.0, unknown, 1), 0) << "no peak, no MFU (not inf)";
  // 4 H200s running 989 TFLOP of model work in 2 s: 1/8 of their peak.
  EXPECT_DOUBLE_EQ(mfu(989e12, 0, 2.0, gpu_peak("NVIDIA H200"), 4), 0.125);
}

TEST(Metrics, ProgressLineShowsStepLossRateAndEta) {
  StepMetrics m{120, 3.45678, 3e-4, 0.5, 12345, 250, 0.1};
  const std::string line = progress_line(m, 1000, 3723);
  EXPECT_EQ(line, "step    120/1000 | loss 3.4568 | lr 3.00e-04 | grad 0.500 | 12.3k tok/s | 250 ms | ETA 01:02:03");
}

namespace fs = std::filesystem;

fs::path scratch(const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("echo_metrics_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A full disk (metrics.jsonl -> /dev/full, whose writes fail with ENOSPC) is an error naming the
// file, not a silently short metrics file.
TEST(Metrics, AWriteErrorIsAnErrorNamingTheFile) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path dir = scratch("full");
  const fs::path path = dir / "metrics.jsonl";
  fs::create_symlink("/dev/full", path);
  MetricsLog log(path.string(), /*append=*/true);
  const std::string msg = echo::testing::error_of([&] { log.step({1, 2.5, 1e-3, 0.5, 100, 10, 0.1}); });
  EXPECT_NE(msg.find("cannot write the metrics file '" + path.string() + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
  // The file system's refusal, not a bug: a run error, a plain message, no "[check ... at file:line]".
  const std::string kind = echo::testing::kind_and_what_of([&] { log.step({2, 2.5, 1e-3, 0.5, 100, 10, 0.1}); });
  EXPECT_EQ(kind.rfind("run: cannot write the metrics file", 0), 0u) << kind;
  EXPECT_EQ(kind.find("[check "), std::string::npos) << kind;
  fs::remove_all(dir);
}

// The path no longer names the file the log opened: its lines would go nowhere readable. Found by a
// hostile test: an rm -rf of a live run that failed part way ("Directory not empty", racing a
// checkpoint save) left the folder, and the run wrote on into the unlinked metrics.jsonl.
TEST(Metrics, AFileDeletedMovedOrReplacedUnderTheLogStopsIt) {
  const fs::path dir = scratch("lost");
  const fs::path path = dir / "metrics.jsonl";
  const StepMetrics m{1, 2.5, 1e-3, 0.5, 100, 10, 0.1};
  struct Case {
    const char* name;
    std::function<void()> lose;
    const char* verdict;
  };
  const Case cases[] = {
      {"deleted", [&] { fs::remove(path); }, "was deleted or moved away"},
      {"moved", [&] { fs::rename(path, dir / "old.jsonl"); }, "was deleted or moved away"},
      {"replaced",
       [&] {
         std::ofstream(dir / "new.jsonl") << "{}\n";
         fs::rename(dir / "new.jsonl", path);
       },
       "was replaced by another file"},
  };
  for (const Case& c : cases) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    MetricsLog log(path.string(), /*append=*/false);
    log.step(m);  // the file as opened: written
    EXPECT_EQ(log.why_lost(), "") << c.name;
    c.lose();
    EXPECT_NE(log.why_lost().find(c.verdict), std::string::npos) << c.name << ": " << log.why_lost();
    const std::string kind = echo::testing::kind_and_what_of([&] { log.eval(1, 2.0); });
    EXPECT_EQ(kind.rfind("run: the metrics file '" + path.string() + "' " + c.verdict + " while this run was writing it", 0),
              0u)
        << c.name << ": " << kind;
    const std::string again = echo::testing::kind_and_what_of([&] { log.step(m); });
    EXPECT_EQ(again.rfind("run: the metrics file", 0), 0u) << c.name << ": " << again;
  }
  // A path through something that is not a folder is gone too (ENOTDIR); an inactive log has no verdict.
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    MetricsLog log(path.string(), /*append=*/false);
    fs::remove_all(dir);
    std::ofstream(dir) << "a file where the folder was\n";
    EXPECT_NE(log.why_lost().find("was deleted or moved away"), std::string::npos) << log.why_lost();
    fs::remove(dir);
  }
  EXPECT_EQ(MetricsLog().why_lost(), "");
  // A file that was only appended to by someone else is still the file opened: no verdict.
  fs::remove_all(dir);
  fs::create_directories(dir);
  MetricsLog log(path.string(), /*append=*/true);
  std::ofstream(path, std::ios::app) << "{\"note\":1}\n";
  log.step(m);
  std::ifstream in(path);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(first, "{\"note\":1}");
  EXPECT_NE(second.find("\"step\":1,"), std::string::npos) << second;
  fs::remove_all(dir);
}

// A FIFO in place of metrics.jsonl (left by a user's tail -f tooling, or hostile): opening it for
// writing would block until a reader came, so a --resume hung before its first step.
TEST(Metrics, AFifoInPlaceOfTheFileIsRefusedNotWaitedOn) {
  const fs::path dir = scratch("fifo");
  const fs::path path = dir / "metrics.jsonl";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  for (bool append : {true, false}) {
    const std::string kind = echo::testing::kind_and_what_of([&] { MetricsLog log(path.string(), append); });
    EXPECT_EQ(kind.rfind("input: the metrics file '" + path.string() + "' is a FIFO, not a file", 0), 0u) << kind;
  }
  fs::remove_all(dir);
}

TEST(Metrics, TruncationForAResumeDropsLaterStepsAndATornLine) {
  const fs::path dir = scratch("truncate");
  const fs::path path = dir / "metrics.jsonl";
  {
    MetricsLog log(path.string(), false);
    for (int64_t s = 1; s <= 5; ++s) log.step({s, 3.0 - 0.1 * s, 1e-3, 0.5, 100, 10, 0.1});
    log.eval(3, 2.75);
    log.eval(5, 2.5);
    log.raw(R"({"kind":"echo_site","step":4,"site":0})");
    log.raw(R"({"step": 6, "lo)");  // a line cut off by a crash
  }
  truncate_metrics(path.string(), 3);
  std::vector<int64_t> steps;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) steps.push_back(nlohmann::json::parse(line)["step"]);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 3})) << read_all(path);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  const std::string before = read_all(path);
  truncate_metrics(path.string(), 3);  // nothing later: unchanged
  EXPECT_EQ(read_all(path), before);
  truncate_metrics((dir / "none.jsonl").string(), 3);  // no file: nothing to do
  EXPECT_FALSE(fs::exists(dir / "none.jsonl"));
  fs::remove_all(dir);
}

// A line that is not JSON is named as such, not counted among the lines logged after the resume
// point (it was "dropped 1 metrics lines logged after it"); one among the lines before the resume
// point is kept with them, and no valid line before it is lost.
TEST(Metrics, TruncationNamesALineThatIsNotJsonAndKeepsTheLinesBeforeTheResumePoint) {
  const fs::path dir = scratch("truncate_not_json");
  const fs::path path = dir / "metrics.jsonl";
  {
    std::ofstream out(path);
    out << R"({"step":1,"loss":3})"
        << "\n"
        << "a note typed into the file\n"
        << R"({"step":2,"loss":2.5})"
        << "\n"
        << R"({"step":3,"loss":2})"
        << "\n"
        << R"({"step":4,"loss":1.5})"
        << "\n"
        << R"({"step": 5, "lo)"
        << "\n";  // cut off by a crash
  }
  const echo::testing::LogCapture log;
  truncate_metrics(path.string(), 3);
  EXPECT_EQ(read_all(path),
            "{\"step\":1,\"loss\":3}\na note typed into the file\n{\"step\":2,\"loss\":2.5}\n"
            "{\"step\":3,\"loss\":2}\n");
  const std::string text = log.text();
  EXPECT_NE(
      text.find("line 2 of the metrics file '" + path.string() + "' is not JSON: 'a note typed into the file'; kept"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("line 6 of the metrics file '" + path.string() + R"(' is not JSON: '{"step": 5, "lo'; dropped)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("resuming at step 3: dropped 1 metrics lines logged after it"), std::string::npos) << text;
  fs::remove_all(dir);
}

}  // namespace echo::train
