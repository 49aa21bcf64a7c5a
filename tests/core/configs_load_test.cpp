// Every config shipped in configs/ and configs/paper/ loads and validates (for its own tp as the
// world size).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/config/config.h"

namespace echo::config {

namespace {

const std::filesystem::path kConfigs =
    std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "configs";

// Loads every *.yaml directly in `dir` (not in subfolders: configs/paper/grids/ holds sweep
// grids, not configs) and returns how many there were.
int load_all(const std::filesystem::path& dir) {
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    Config c;
    EXPECT_NO_THROW(c = load_config(entry.path().string()));
    EXPECT_NO_THROW(load_config(entry.path().string(), {}, c.parallel.tp));
    ++loaded;
  }
  return loaded;
}

}  // namespace

TEST(ShippedConfigs, AllLoad) { EXPECT_GE(load_all(kConfigs), 5); }

// The paper reproductions (configs/paper/): each at tp = 4, Qwen3-0.6B, as the Echo paper's
// Appendix B.
TEST(ShippedConfigs, PaperConfigsLoad) {
  EXPECT_GE(load_all(kConfigs / "paper"), 24);
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs / "paper")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const Config c = load_config(entry.path().string(), {}, 4);
    EXPECT_EQ(c.parallel.tp, 4);
    EXPECT_EQ(c.model.layers, 28);
    EXPECT_EQ(c.model.hidden, 1024);
    EXPECT_EQ(c.data.seq_len, 2048);
  }
}

// The depth study (configs/depth/, docs/results.md): four settings that differ only in the
// all-reduce, at tp = 4, so that the gaps it reports are the all-reduce's alone.
TEST(ShippedConfigs, DepthStudyConfigsDifferOnlyInComm) {
  EXPECT_EQ(load_all(kConfigs / "depth"), 4);
  const auto load = [](const char* name) {
    return load_config((kConfigs / "depth" / name).string(), {}, 4);
  };
  const Config bf16 = load("bf16.yaml");
  EXPECT_EQ(bf16.comm.allreduce, AllReduceKind::exact);
  struct Expected { const char* file; int bits; bool compensated; };
  for (const Expected e : {Expected{"echo4.yaml", 4, true}, Expected{"nocomp4.yaml", 4, false},
                           Expected{"echo8.yaml", 8, true}}) {
    SCOPED_TRACE(e.file);
    const Config c = load(e.file);
    EXPECT_EQ(c.comm.allreduce, AllReduceKind::echo);
    EXPECT_EQ(c.comm.bits, e.bits);
    EXPECT_EQ(c.comm.compensator.enabled, e.compensated);
    EXPECT_TRUE(c.comm.forward && c.comm.backward);
    EXPECT_EQ(c.parallel.tp, 4);
    // Everything but the all-reduce (and where the run writes) is the 16-bit file's, key for key.
    Config same = c;
    same.comm = bf16.comm;
    same.run.out_dir = bf16.run.out_dir;
    EXPECT_EQ(to_yaml(same), to_yaml(bf16));
  }
}

}  // namespace echo::config
