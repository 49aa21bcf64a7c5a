// Fuzz test of the YAML config reader (parse_config): a few hundred seeded mutants of a valid
// config (YAML syntax, anchors, aliases, extra documents, numbers at the edge of int, deep
// nesting) each end in success or in an echo::InputError, never a signal, a hang or another
// exception. An accepted config writes out and reads back to an equal one.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/config/config.h"
#include "fuzz/fuzz_util.h"

namespace echo::config {
namespace {

TEST(ConfigFuzz, MutantsEndInSuccessOrInputError) {
  // A user-style file: flow and block mappings, comments, a small model.
  const std::string seed =
      "# fuzz seed\n"
      "run: {seed: 7, device: cpu, out_dir: runs/fuzz}\n"
      "model:\n"
      "  vocab_size: 512\n"
      "  hidden: 64\n"
      "  ffn: 128\n"
      "  layers: 2\n"
      "  heads: 4\n"
      "  kv_heads: 2\n"
      "  head_dim: 16\n"
      "parallel: {tp: 2}\n"
      "comm:\n"
      "  bits: 4\n"
      "  group_size: 32\n"
      "  compensator: {eta: 0.5, a: 0.25}\n"
      "optim: {lr: 1.0e-3, min_lr: 1.0e-4}\n"
      "data: {seq_len: 32, eos_id: 1}\n"
      "train: {steps: 10, micro_batch: 2, global_batch: 8}\n";
  ASSERT_NO_THROW(parse_config(seed, "seed.yaml", {}, 4));
  const std::vector<std::string> tokens = {"---\n",
                                           "...\n",
                                           "&a ",
                                           "*a",
                                           "<<: *a\n",
                                           "!!binary ",
                                           "!!str ",
                                           "2147483647",
                                           "-2147483648",
                                           "4294967296",
                                           "99999999999999999999",
                                           "1.5",
                                           ".inf",
                                           ".nan",
                                           "0x7fffffff",
                                           "1e9",
                                           "[",
                                           "]",
                                           "{",
                                           "}",
                                           "? ",
                                           "|\n",
                                           ">\n",
                                           "'",
                                           "\"",
                                           "~",
                                           "null",
                                           "\t",
                                           ": ",
                                           "- ",
                                           "\n  ",
                                           "%YAML 1.2\n",
                                           "hidden",
                                           "layers",
                                           "vocab_size",
                                           "micro_batch"};
  const fuzz::Mutator mutator(seed, tokens);
  const fuzz::Outcome outcome = fuzz::run_mutants(mutator, 400, [&](const fuzz::Mutant& m) {
    const Config c = parse_config(m.bytes, "fuzz.yaml", {}, 4);
    ASSERT_EQ(parse_config(to_yaml(c), "back.yaml", {}, 4), c) << m.description;
  });
  std::printf("mutants: %d accepted, %d refused\n", outcome.accepted, outcome.refused);
  EXPECT_GT(outcome.accepted, 5);
  EXPECT_GT(outcome.refused, 150);
}

}  // namespace
}  // namespace echo::config
