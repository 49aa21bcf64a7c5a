// Fixed runs whose every number must stay bit for bit what it was before the backend seam
// (docs/design.md §2): losses, gradient norms and validation losses at full double precision,
// and a checksum of the final checkpoint's weights and optimizer state. The expected values
// were produced by the model code before it moved behind backend::Backend (commit 1b0a9a0);
// a refactor that changes one rounding anywhere changes them.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../support/mpi_util.h"
#include "dist/world.h"
#include "train/trainer.h"
#include "trainer_test_util.h"

namespace echo::train {
namespace {

using echo::testing::world_rank;
using echo::testing::world_size;

std::string config_text(const std::string& dir, const std::string& out) {
  return "run: {seed: 11, out_dir: " + dir + "/" + out +
         "}\n"
         "model: {vocab_size: 64, vocab_pad_multiple: 16, hidden: 32, ffn: 64, layers: 2, heads: 4, kv_heads: 2,\n"
         "        head_dim: 8, tie_embeddings: false, init_std: 0.05}\n"
         "comm: {allreduce: echo, bits: 4, group_size: 32}\n"
         "optim: {lr: 3.0e-3, min_lr: 3.0e-4}\n"
         "schedule: {warmup_steps: 2}\n"
         "data: {train: " +
         dir + "/data/train, valid: " + dir +
         "/data/valid, seq_len: 16, eos_id: 63}\n"
         "train: {steps: 4, micro_batch: 2, global_batch: 8, eval_interval: 4, eval_batches: 1,\n"
         "        checkpoint_interval: 4, keep_checkpoints: 1, log_interval: 1000}\n";
}

// FNV-1a over a file's bytes.
uint64_t fnv1a(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  uint64_t h = 1469598103934665603ull;
  for (std::istreambuf_iterator<char> it(in), end; it != end; ++it) {
    h ^= static_cast<unsigned char>(*it);
    h *= 1099511628211ull;
  }
  return h;
}

// "loss grad_norm / ... / val_loss / model-hash optimizer-hash", doubles in %a (exact).
std::string fingerprint(const std::string& out_dir) {
  std::ostringstream s;
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::string line;
  char buf[64];
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const char* key : {"loss", "grad_norm", "val_loss"})
      if (j.contains(key)) {
        std::snprintf(buf, sizeof buf, "%a ", j[key].get<double>());
        s << buf;
      }
    s << "/ ";
  }
  std::snprintf(
      buf, sizeof buf, "%016llx %016llx",
      static_cast<unsigned long long>(fnv1a(out_dir + "/checkpoints/step_00000004/model.safetensors")),
      static_cast<unsigned long long>(fnv1a(out_dir + "/checkpoints/step_00000004/trainer/optimizer.safetensors")));
  s << buf;
  return s.str();
}

struct GoldenRun {
  const char* name;
  int tp;
  std::vector<std::string> overrides;
  const char* expected_np2;
  const char* expected_np4;
};

TEST(SeamGolden, FixedRunsReproduceTheirNumbersBitForBit) {
  ASSERT_TRUE(world_size() == 2 || world_size() == 4) << "expected values exist for 2 and 4 ranks";
  const std::string dir = echo::testing::make_scratch_datasets("echo_golden", "seam", 42, {"train", "valid"});
  const std::vector<GoldenRun> runs = {
      {"echo4_int8_s3r",
       2,
       {"linear.mode=int8", "linear.backward_rounding=s3r", "linear.ec=two_way"},
       "0x1.09c7616d1aa3ep+2 0x1.ee8208fdf19adp+0 / 0x1.0647798c7c343p+2 0x1.ec80809d7e5c8p+0 / 0x1.f00fc515f9c46p+1 "
       "0x1.db25d226a7da5p+0 / 0x1.ef21a0215082p+1 0x1.a041e92ad9fp+0 / 0x1.e335e4c8806c1p+1 / b1205a9200670b3c "
       "72cde03f83d9b4d8",
       "0x1.09c7616d1aa3ep+2 0x1.ee82091fa2888p+0 / 0x1.0647798c7b518p+2 0x1.ec80809a813fdp+0 / 0x1.f00fc51578edp+1 "
       "0x1.db25d217e2c59p+0 / 0x1.ef21a023f6899p+1 0x1.a041e8fc07877p+0 / 0x1.e335e4c8d285p+1 / 8ec4bcea8698d67a "
       "fe86098b25ec53c4"},
      {"exact16_dp",
       1,
       {"comm.allreduce=exact"},
       "0x1.09d6ae9675ae6p+2 0x1.efb55d0c9635cp+0 / 0x1.0657fbe8cefd5p+2 0x1.ed2ce52183e8p+0 / 0x1.efffda5a12292p+1 "
       "0x1.dc87920b7c534p+0 / 0x1.ef37095c9168bp+1 0x1.9f11e61e4a3d8p+0 / 0x1.e34bcb47839fbp+1 / 70694f20725548e9 "
       "be07e94c70eefb9c",
       "0x1.09d6ae9675ae6p+2 0x1.efb55d0f7f3e9p+0 / 0x1.0657fbe83dc46p+2 0x1.ed2ce51115a92p+0 / 0x1.efffdaa22d508p+1 "
       "0x1.dc87965b1d853p+0 / 0x1.ef37003a72b4cp+1 0x1.9f12556cfaecfp+0 / 0x1.e34bf62cc8b5fp+1 / 57d8aedc17cea6a7 "
       "b29be1bf174adc95"},
      {"echo8_fp32_edges",
       2,
       {"comm.bits=8", "comm.embedding_exact=false", "comm.compensator.eta=1.0"},
       "0x1.09d80a2218ff5p+2 0x1.efedfd0358435p+0 / 0x1.0658bde2606a8p+2 0x1.ece2fe9842fdp+0 / 0x1.effc4e426d161p+1 "
       "0x1.dc613d65b3edep+0 / 0x1.ef427b72b49cdp+1 0x1.9f29fb9c35fb5p+0 / 0x1.e3412c37007f3p+1 / 07d93320a6eced38 "
       "2e7db7e582d3d833",
       "0x1.09d80a2218ff5p+2 0x1.efedfce62e0ccp+0 / 0x1.0658bde269483p+2 0x1.ece2fea306144p+0 / 0x1.effc4e3d97f37p+1 "
       "0x1.dc613d6f2de29p+0 / 0x1.ef427b7290ec8p+1 0x1.9f29fb8b59cc1p+0 / 0x1.e3412c38b4948p+1 / e213aa413f9239f6 "
       "ab3d4afbfcf1cae9"},
  };
  for (const auto& r : runs) {
    auto overrides = r.overrides;
    overrides.push_back("parallel.tp=" + std::to_string(r.tp));
    const auto cfg = config::parse_config(config_text(dir, r.name), "golden.yaml", overrides, world_size());
    {
      const dist::World world = dist::World::create(cfg.parallel.tp);
      Trainer trainer(cfg, world, RunDirMode::fresh);
      trainer.run();
    }
    if (world_rank() == 0) {
      const std::string got = fingerprint(dir + "/" + r.name);
      const std::string expected = world_size() == 2 ? r.expected_np2 : r.expected_np4;
      EXPECT_EQ(got, expected) << r.name << " at " << world_size() << " ranks";
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

}  // namespace
}  // namespace echo::train
