// Tests of the config module: the defaults of docs/design.md §13, parsing, every kind of error message (file, line,
// key, value), --set overrides, the effective-config round trip and configs/default.yaml.
#include "core/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "../support/test_util.h"
#include "core/config/schema.h"

namespace echo::config {

using echo::testing::error_of;
using echo::testing::kind_and_what_of;
using echo::testing::kNoErrorThrown;
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The repository root, from this file's path: tests/core/config_test.cpp.
fs::path repo_root() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

// The text of the YAML tree's scalar at dotted `key`; none when it holds no scalar there.
std::optional<std::string> scalar_at(const YAML::Node& node, std::string_view key) {
  const std::size_t dot = key.find('.');
  if (!node.IsMap()) return std::nullopt;
  const YAML::Node child = node[std::string(key.substr(0, dot))];
  if (!child.IsDefined()) return std::nullopt;
  if (dot != std::string_view::npos) return scalar_at(child, key.substr(dot + 1));
  return child.IsScalar() ? std::optional<std::string>(child.Scalar()) : std::nullopt;
}

// A fresh directory per test for the YAML files it writes.
class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("echo_config_test_" + std::to_string(::getpid()) + "_" + name);
    fs::create_directories(dir_);
    path_ = (dir_ / "x.yaml").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the lines (line N of the file is lines[N - 1]) and returns the path.
  std::string write(const std::string& name, std::initializer_list<std::string_view> lines) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path);
    for (std::string_view line : lines) out << line << '\n';
    return path;
  }

  // The error of loading a file made of `lines`, prefixed "<path>:" so tests can match lines.
  std::string load_error(std::initializer_list<std::string_view> lines, const std::vector<std::string>& sets = {},
                         int world_size = 0) {
    write("x.yaml", lines);
    return error_of([&] { load_config(path_, sets, world_size); });
  }

  std::string at(int line) const { return path_ + ":" + std::to_string(line) + ": "; }

  fs::path dir_;
  std::string path_;  // the file load_error writes; fixed up front so at() can run first
};

// ---- defaults and helpers -----------------------------------------------------------------

TEST(ConfigDefaults, MatchArchitectureSection8) {
  const Config c;
  EXPECT_EQ(c.run.seed, 1234u);
  EXPECT_EQ(c.run.device, Device::cpu);
  EXPECT_EQ(c.run.out_dir, "runs/quickstart");

  EXPECT_EQ(c.model.vocab_size, 151936);
  EXPECT_EQ(c.model.vocab_pad_multiple, 128);
  EXPECT_EQ(c.model.hidden, 1024);
  EXPECT_EQ(c.model.ffn, 3072);
  EXPECT_EQ(c.model.layers, 28);
  EXPECT_EQ(c.model.heads, 16);
  EXPECT_EQ(c.model.kv_heads, 8);
  EXPECT_EQ(c.model.head_dim, 128);
  EXPECT_EQ(c.model.rope_base, 1000000.0);
  EXPECT_EQ(c.model.norm_eps, 1.0e-6);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.init_std, 0.02);
  EXPECT_TRUE(c.model.scale_output_init);

  EXPECT_EQ(c.parallel.tp, 4);

  EXPECT_EQ(c.comm.allreduce, AllReduceKind::echo);
  EXPECT_EQ(c.comm.transport, Transport::automatic);
  EXPECT_EQ(c.comm.bits, 4);
  EXPECT_EQ(c.comm.group_size, 128);
  EXPECT_EQ(c.comm.quantizer, QuantPolicy::asym_zero_aware);
  EXPECT_TRUE(c.comm.compensator.enabled);
  EXPECT_EQ(c.comm.compensator.eta, 0.75);
  EXPECT_EQ(c.comm.compensator.a, 0.35);
  EXPECT_EQ(c.comm.compensator.beta1, 0.7);
  EXPECT_EQ(c.comm.compensator.beta2, 0.3);
  EXPECT_TRUE(c.comm.forward);
  EXPECT_TRUE(c.comm.backward);
  EXPECT_TRUE(c.comm.backward_rescale);
  EXPECT_FALSE(c.comm.early_site_8bit);
  EXPECT_EQ(c.comm.telemetry_interval, 0);
  EXPECT_TRUE(c.comm.embedding_exact);

  EXPECT_EQ(c.linear.mode, LinearMode::bf16);
  EXPECT_EQ(c.linear.backward_rounding, BackwardRounding::s3r);
  EXPECT_EQ(c.linear.thresholds, ThresholdMode::per_token);
  EXPECT_EQ(c.linear.ec, EcMode::two_way);

  EXPECT_EQ(c.optim.lr, 3.0e-4);
  EXPECT_EQ(c.optim.min_lr, 3.0e-5);
  EXPECT_EQ(c.optim.beta1, 0.9);
  EXPECT_EQ(c.optim.beta2, 0.95);
  EXPECT_EQ(c.optim.eps, 1.0e-5);
  EXPECT_EQ(c.optim.weight_decay, 0.1);
  EXPECT_EQ(c.optim.grad_clip, 1.0);

  EXPECT_EQ(c.schedule.warmup_steps, 100);
  EXPECT_EQ(c.schedule.decay, LrDecay::cosine);

  EXPECT_EQ(c.data.train, "data/demo/train");
  EXPECT_EQ(c.data.valid, "data/demo/valid");
  EXPECT_EQ(c.data.seq_len, 2048);

  EXPECT_EQ(c.train.steps, 12716);
  EXPECT_EQ(c.train.micro_batch, 24);
  EXPECT_EQ(c.train.global_batch, 384);
  EXPECT_EQ(c.train.eval_interval, 500);
  EXPECT_EQ(c.train.eval_batches, 20);
  EXPECT_EQ(c.train.checkpoint_interval, 1000);
  EXPECT_EQ(c.train.keep_checkpoints, 3);
  EXPECT_EQ(c.train.log_interval, 1);
  EXPECT_EQ(c.source, "");
}

TEST(ConfigDefaults, AreValidForThePaperLayout) {
  EXPECT_NO_THROW(validate(Config{}));
  EXPECT_NO_THROW(validate(Config{}, 8));  // tp 4 x dp 2: 384 = 24 x 2 x 8
}

TEST(ConfigKeys, KeepEveryNameOfTheContract) {
  // docs/design.md §13 says the key names are the contract with scripts and sweeps: none may be renamed.
  const std::vector<std::string> keys = known_keys();
  for (const char* key : {"run.seed",
                          "run.device",
                          "run.out_dir",
                          "run.init_from",
                          "model.vocab_size",
                          "model.vocab_pad_multiple",
                          "model.hidden",
                          "model.ffn",
                          "model.layers",
                          "model.heads",
                          "model.kv_heads",
                          "model.head_dim",
                          "model.rope_base",
                          "model.norm_eps",
                          "model.tie_embeddings",
                          "model.init_std",
                          "model.scale_output_init",
                          "parallel.tp",
                          "comm.allreduce",
                          "comm.transport",
                          "comm.peer_timeout_s",
                          "comm.save_timeout_s",
                          "comm.shm_threads",
                          "comm.p2p_tiles",
                          "comm.p2p_slot_kib",
                          "comm.bits",
                          "comm.group_size",
                          "comm.quantizer",
                          "comm.compensator.enabled",
                          "comm.compensator.eta",
                          "comm.compensator.a",
                          "comm.compensator.beta1",
                          "comm.compensator.beta2",
                          "comm.forward",
                          "comm.backward",
                          "comm.backward_rescale",
                          "comm.early_site_8bit",
                          "comm.telemetry_interval",
                          "comm.embedding_exact",
                          "linear.mode",
                          "linear.backward_rounding",
                          "linear.thresholds",
                          "linear.ec",
                          "linear.projections",
                          "optim.lr",
                          "optim.min_lr",
                          "optim.beta1",
                          "optim.beta2",
                          "optim.eps",
                          "optim.weight_decay",
                          "optim.grad_clip",
                          "schedule.warmup_steps",
                          "schedule.decay",
                          "data.train",
                          "data.valid",
                          "data.seq_len",
                          "data.eos_id",
                          "train.steps",
                          "train.micro_batch",
                          "train.global_batch",
                          "train.eval_interval",
                          "train.eval_batches",
                          "train.checkpoint_interval",
                          "train.keep_checkpoints",
                          "train.log_interval"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
  }
  EXPECT_EQ(keys.front(), "run.seed");
}

TEST(ConfigHelpers, PaddedVocabRoundsUpToTheMultiple) {
  ModelConfig m;
  EXPECT_EQ(m.padded_vocab(), 151936);  // already 128 x 1187
  m.vocab_size = 151669;                // the tokenizer's size
  EXPECT_EQ(m.padded_vocab(), 151680);  // 128 x 1185
  m.vocab_pad_multiple = 1;
  EXPECT_EQ(m.padded_vocab(), 151669);
}

TEST(ConfigHelpers, QuantSpecTakesPolicyAndGroupFromComm) {
  CommConfig comm;
  comm.quantizer = QuantPolicy::symmetric;
  comm.group_size = 64;
  const QuantSpec spec = comm.quant_spec(8);
  EXPECT_EQ(spec.policy, QuantPolicy::symmetric);
  EXPECT_EQ(spec.bits, 8);
  EXPECT_EQ(spec.group_size, 64);
  EXPECT_EQ(comm.quant_spec(4).bits, 4);
  EXPECT_THAT(error_of([&] { comm.quant_spec(3); }), HasSubstr("bits must be 4 or 8, got 3"));
}

template <class E>
void expect_every_spelling_round_trips() {
  for (std::string_view name : EnumNames<E>::kNames) {
    const std::optional<E> value = try_parse<E>(name);
    ASSERT_TRUE(value.has_value()) << name;
    EXPECT_EQ(to_string(*value), name);
    EXPECT_EQ(parse<E>(name), *value);
  }
  EXPECT_FALSE(try_parse<E>("no_such_value").has_value());
}

TEST(ConfigEnums, EverySpellingRoundTrips) {
  expect_every_spelling_round_trips<Device>();
  expect_every_spelling_round_trips<AllReduceKind>();
  expect_every_spelling_round_trips<Transport>();
  expect_every_spelling_round_trips<LinearMode>();
  expect_every_spelling_round_trips<BackwardRounding>();
  expect_every_spelling_round_trips<ThresholdMode>();
  expect_every_spelling_round_trips<EcMode>();
  expect_every_spelling_round_trips<LrDecay>();
  expect_every_spelling_round_trips<QuantPolicy>();
}

TEST(ConfigEnums, SpellingsMatchTheYamlContract) {
  EXPECT_EQ(to_string(Transport::automatic), "auto");
  EXPECT_EQ(parse<AllReduceKind>("exact_fp32"), AllReduceKind::exact_fp32);
  EXPECT_EQ(parse<QuantPolicy>("asym_naive"), QuantPolicy::asym_naive);
  EXPECT_EQ(parse<ThresholdMode>("independent"), ThresholdMode::independent);
  EXPECT_EQ(enum_choices<EcMode>(), "none, dx_only, two_way");
  EXPECT_THAT(error_of([] { parse<LrDecay>("step"); }),
              AllOf(HasSubstr("'step'"), HasSubstr("cosine, linear, constant")));
}

// ---- parsing ----------------------------------------------------------------------------

TEST_F(ConfigFile, EmptyFileGivesDefaults) {
  const std::string path = write("empty.yaml", {});
  const Config c = load_config(path);
  EXPECT_EQ(c, Config{});
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(load_config(write("comments.yaml", {"# nothing but a comment"})), Config{});
  EXPECT_EQ(load_config(write("nulls.yaml", {"comm:", "model:"})), Config{});
}

TEST_F(ConfigFile, PartialFileKeepsOtherDefaults) {
  const Config c = load_config(write("partial.yaml", {"comm:", "  compensator:", "    eta: 0.5", "train: {steps: 7}"}));
  Config expected;
  expected.comm.compensator.eta = 0.5;
  expected.train.steps = 7;
  EXPECT_EQ(c, expected);
}

const std::initializer_list<std::string_view> kFullFile = {
    "run: {seed: 42, device: cuda, out_dir: runs/full}",
    "model:",
    "  vocab_size: 1000",
    "  vocab_pad_multiple: 64",
    "  hidden: 256",
    "  ffn: 512",
    "  layers: 4",
    "  heads: 8",
    "  kv_heads: 2",
    "  head_dim: 32",
    "  rope_base: 10000.0",
    "  norm_eps: 1.0e-5",
    "  tie_embeddings: false",
    "  init_std: 0.01",
    "  scale_output_init: false",
    "parallel: {tp: 2}",
    "comm:",
    "  allreduce: two_collective",
    "  transport: mpi",
    "  bits: 8",
    "  group_size: 64",
    "  quantizer: symmetric",
    "  compensator: {enabled: false, eta: 0.5, a: 0.25, beta1: 0.8, beta2: 0.2}",
    "  forward: false",
    "  backward: false",
    "  backward_rescale: false",
    "  early_site_8bit: true",
    "  telemetry_interval: 10",
    "  embedding_exact: false",
    "linear: {mode: int8, backward_rounding: sr_independent, thresholds: per_example, ec: dx_only}",
    "optim: {lr: 1.0e-3, min_lr: 1.0e-4, beta1: 0.8, beta2: 0.99, eps: 1.0e-8, weight_decay: 0.0, grad_clip: 0.5}",
    "schedule: {warmup_steps: 10, decay: linear}",
    "data: {train: a/train, valid: a/valid, seq_len: 128}",
    "train:",
    "  steps: 100",
    "  micro_batch: 4",
    "  global_batch: 16",
    "  eval_interval: 10",
    "  eval_batches: 2",
    "  checkpoint_interval: 50",
    "  keep_checkpoints: 2",
    "  log_interval: 5",
};

TEST_F(ConfigFile, FullFileParsesEveryKey) {
  const Config c = load_config(write("full.yaml", kFullFile), {}, 4);
  EXPECT_EQ(c.run.seed, 42u);
  EXPECT_EQ(c.run.device, Device::cuda);
  EXPECT_EQ(c.run.out_dir, "runs/full");
  EXPECT_EQ(c.model.vocab_size, 1000);
  EXPECT_EQ(c.model.vocab_pad_multiple, 64);
  EXPECT_EQ(c.model.padded_vocab(), 1024);
  EXPECT_EQ(c.model.hidden, 256);
  EXPECT_EQ(c.model.ffn, 512);
  EXPECT_EQ(c.model.layers, 4);
  EXPECT_EQ(c.model.heads, 8);
  EXPECT_EQ(c.model.kv_heads, 2);
  EXPECT_EQ(c.model.head_dim, 32);
  EXPECT_EQ(c.model.rope_base, 10000.0);
  EXPECT_EQ(c.model.norm_eps, 1.0e-5);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.init_std, 0.01);
  EXPECT_FALSE(c.model.scale_output_init);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.comm.allreduce, AllReduceKind::two_collective);
  EXPECT_EQ(c.comm.transport, Transport::mpi);
  EXPECT_EQ(c.comm.bits, 8);
  EXPECT_EQ(c.comm.group_size, 64);
  EXPECT_EQ(c.comm.quantizer, QuantPolicy::symmetric);
  EXPECT_FALSE(c.comm.compensator.enabled);
  EXPECT_EQ(c.comm.compensator.eta, 0.5);
  EXPECT_EQ(c.comm.compensator.a, 0.25);
  EXPECT_EQ(c.comm.compensator.beta1, 0.8);
  EXPECT_EQ(c.comm.compensator.beta2, 0.2);
  EXPECT_FALSE(c.comm.forward);
  EXPECT_FALSE(c.comm.backward);
  EXPECT_FALSE(c.comm.backward_rescale);
  EXPECT_TRUE(c.comm.early_site_8bit);
  EXPECT_EQ(c.comm.telemetry_interval, 10);
  EXPECT_FALSE(c.comm.embedding_exact);
  EXPECT_EQ(c.linear.mode, LinearMode::int8);
  EXPECT_EQ(c.linear.backward_rounding, BackwardRounding::sr_independent);
  EXPECT_EQ(c.linear.thresholds, ThresholdMode::per_example);
  EXPECT_EQ(c.linear.ec, EcMode::dx_only);
  EXPECT_EQ(c.optim.lr, 1.0e-3);
  EXPECT_EQ(c.optim.min_lr, 1.0e-4);
  EXPECT_EQ(c.optim.beta1, 0.8);
  EXPECT_EQ(c.optim.beta2, 0.99);
  EXPECT_EQ(c.optim.eps, 1.0e-8);
  EXPECT_EQ(c.optim.weight_decay, 0.0);
  EXPECT_EQ(c.optim.grad_clip, 0.5);
  EXPECT_EQ(c.schedule.warmup_steps, 10);
  EXPECT_EQ(c.schedule.decay, LrDecay::linear);
  EXPECT_EQ(c.data.train, "a/train");
  EXPECT_EQ(c.data.valid, "a/valid");
  EXPECT_EQ(c.data.seq_len, 128);
  EXPECT_EQ(c.train.steps, 100);
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.train.global_batch, 16);
  EXPECT_EQ(c.train.eval_interval, 10);
  EXPECT_EQ(c.train.eval_batches, 2);
  EXPECT_EQ(c.train.checkpoint_interval, 50);
  EXPECT_EQ(c.train.keep_checkpoints, 2);
  EXPECT_EQ(c.train.log_interval, 5);
}

// ---- shape and type errors ----------------------------------------------------------------

TEST_F(ConfigFile, UnknownKeyNamesFileLineKeyAndKnownKeys) {
  const std::string error = load_error({"run:", "  seed: 1", "comm:", "  bits: 4", "  bitz: 8"});
  EXPECT_THAT(error, StartsWith(at(5) + "unknown key 'comm.bitz'"));
  EXPECT_THAT(error, HasSubstr("(known keys in 'comm': allreduce, transport, peer_timeout_s, save_timeout_s, "
                               "shm_threads, p2p_tiles, p2p_slot_kib, bits, group_size,"));
  EXPECT_THAT(
      load_error({"comm:", "  compensator: {eta: 0.5, etta: 0.4}"}),
      StartsWith(at(2) + "unknown key 'comm.compensator.etta' (known keys in 'comm.compensator': enabled, eta"));
}

TEST_F(ConfigFile, UnknownTopLevelSectionListsSections) {
  EXPECT_THAT(load_error({"run: {seed: 1}", "optimizer: {lr: 0.1}"}),
              AllOf(StartsWith(at(2) + "unknown top-level section 'optimizer'"),
                    HasSubstr("known sections: run, model, parallel, comm, linear, optim, schedule, data, train")));
}

TEST_F(ConfigFile, NonMappingSectionIsAnError) {
  EXPECT_THAT(load_error({"run: {seed: 1}", "comm: 4"}),
              AllOf(StartsWith(at(2) + "'comm' must be a mapping of keys"), HasSubstr("got '4'")));
  EXPECT_THAT(load_error({"model: [1, 2]"}),
              AllOf(StartsWith(at(1) + "'model' must be a mapping"), HasSubstr("got a sequence")));
  EXPECT_THAT(load_error({"comm:", "  compensator: off"}),
              StartsWith(at(2) + "'comm.compensator' must be a mapping of keys (enabled, eta, a, beta1, beta2)"));
  EXPECT_THAT(load_error({"- run", "- model"}), HasSubstr("the top level must be a mapping of sections"));
}

TEST_F(ConfigFile, WrongTypesNameKeyAndValue) {
  EXPECT_THAT(load_error({"model:", "  hidden: 64", "  layers: abc"}),
              StartsWith(at(3) + "'model.layers' must be an integer, got 'abc'"));
  EXPECT_THAT(load_error({"model:", "  layers: 2.5"}),
              StartsWith(at(2) + "'model.layers' must be an integer, got '2.5'"));
  EXPECT_THAT(load_error({"optim: {lr: fast}"}), StartsWith(at(1) + "'optim.lr' must be a number, got 'fast'"));
  EXPECT_THAT(load_error({"comm:", "  forward: maybe"}),
              StartsWith(at(2) + "'comm.forward' must be true or false, got 'maybe'"));
  EXPECT_THAT(load_error({"run:", "  out_dir: [a, b]"}),
              StartsWith(at(2) + "'run.out_dir' must be a string, got a sequence"));
  EXPECT_THAT(load_error({"run:", "  seed: -1"}),
              StartsWith(at(2) + "'run.seed' must be a non-negative integer, got '-1'"));
  EXPECT_THAT(load_error({"comm:", "  bits:"}),
              StartsWith(at(2) + "'comm.bits' must be an integer, got an empty value"));
  // An integer too large for its field is out of range, not "not an integer", and named by the
  // key's own rule where that refuses it, else by the type's bound on the side it was crossed
  // (never a range such as [-2147483648, 2147483647] for a key that must be >= 1).
  EXPECT_THAT(load_error({"model:", "  vocab_size: 99999999999"}),
              StartsWith(at(2) + "'model.vocab_size' = 99999999999 must be <= 16777216 (token ids index a table of "
                                 "at most 2^24 entries)"));
  EXPECT_THAT(load_error({"train:", "  steps: -99999999999999999999"}),
              StartsWith(at(2) + "'train.steps' = -99999999999999999999 must be >= 1"));
  EXPECT_THAT(
      load_error({"train:", "  steps: 99999999999999999999999"}),
      StartsWith(at(2) + "'train.steps' = 99999999999999999999999 is too large: it must be at most 2147483647"));
  // Hexadecimal integers (yaml-cpp reads 0x10 as 16; scripts/sweep.py refuses them) are refused.
  EXPECT_THAT(load_error({"train:", "  steps: 0x10"}),
              StartsWith(at(2) + "'train.steps' = 0x10 is hexadecimal: write integers in decimal"));
  EXPECT_THAT(load_error({"run: {seed: -0X1F}"}), HasSubstr("'run.seed' = -0X1F is hexadecimal"));
  EXPECT_THAT(load_error({"run:", "  seed: 99999999999999999999"}),
              StartsWith(at(2) + "'run.seed' = 99999999999999999999 is too large: it must be at most "
                                 "18446744073709551615"));
  // A leading zero is octal to yaml-cpp and YAML 1.1 (train.steps: 010 ran 8 steps), decimal to
  // YAML 1.2: refused, as file values and as --set ones.
  EXPECT_THAT(load_error({"train:", "  steps: 010"}),
              StartsWith(at(2) + "'train.steps' = 010 has a leading zero, which YAML readers disagree on (octal in "
                                 "YAML 1.1, decimal in 1.2); write it without: 10"));
  EXPECT_THAT(load_error({"model: {hidden: 0128}"}), HasSubstr("'model.hidden' = 0128 has a leading zero"));
  EXPECT_THAT(load_error({"run: {seed: -007}"}), HasSubstr("'run.seed' = -007 has a leading zero"));
  EXPECT_THAT(load_error({"model: {head_dim: -08}"}), HasSubstr("write it without: -8"));
  EXPECT_THAT(load_error({"comm: {peer_timeout_s: 0300}"}),
              HasSubstr("'comm.peer_timeout_s' = 0300 has a leading zero"));
  EXPECT_EQ(parse_config("optim: {lr: 0.5e-3}\n", "t.yaml").optim.lr, 0.5e-3);
  EXPECT_THAT(load_error({"run: {seed: 000}"}), HasSubstr("write it without: 0"));
  EXPECT_THAT(error_of([] { parse_config("", "t.yaml", {"data.seq_len=0100"}); }),
              HasSubstr("'data.seq_len' = 0100 has a leading zero"));
  // Zero itself is not a leading zero (hexadecimal, once taken here, is refused above).
  EXPECT_EQ(parse_config("run: {seed: 0}\ntrain: {steps: 10}\n", "t.yaml").run.seed, 0u);
}

TEST_F(ConfigFile, UnknownEnumValueListsAllowedOnes) {
  EXPECT_THAT(load_error({"comm:", "  allreduce: fast"}),
              StartsWith(at(2) + "'comm.allreduce' = 'fast' is not one of: exact, exact_fp32, echo, two_collective"));
  EXPECT_THAT(load_error({"comm: {quantizer: asym}"}),
              HasSubstr("'comm.quantizer' = 'asym' is not one of: symmetric, asym_naive, asym_zero_aware"));
  EXPECT_THAT(load_error({"run: {device: gpu}"}), HasSubstr("'run.device' = 'gpu' is not one of: cpu, cuda"));
  EXPECT_THAT(load_error({"linear: {ec: both}"}),
              HasSubstr("'linear.ec' = 'both' is not one of: none, dx_only, two_way"));
}

TEST_F(ConfigFile, DuplicateKeyNamesBothLines) {
  EXPECT_THAT(load_error({"comm:", "  bits: 8", "  group_size: 64", "  bits: 4"}),
              StartsWith(at(4) + "duplicate key 'comm.bits' (first given on line 2)"));
}

TEST_F(ConfigFile, SyntaxErrorReportsYamlLine) {
  EXPECT_THAT(load_error({"run: {seed: 1}", "comm:", "  group_size: [128", "  bits: 4"}),
              StartsWith(at(4) + "YAML syntax error"));
  EXPECT_THAT(load_error({"model:", "  layers: 2", " hidden: 3"}), StartsWith(at(3) + "YAML syntax error"));
}

// A control byte in the file is named with its line and column; yaml-cpp alone reported a NUL as
// "unknown escape character" on the next line. Tab and carriage return stay legal.
TEST_F(ConfigFile, ControlCharactersInTheFileAreNamed) {
  using namespace std::string_view_literals;
  EXPECT_EQ(load_error({"run:", "  device: cpu\0"sv}),
            at(2) + "a control character (byte 0x00) at column 14: a YAML config is text; a tab, a line feed and a "
                    "carriage return are the only control characters it may hold");
  EXPECT_THAT(load_error({"train: {steps: 3}", "run: {seed: 1}", "  # \x1b[2J"}),
              StartsWith(at(3) + "a control character (byte 0x1b) at column 5:"));
  EXPECT_THAT(load_error({"x\x7f: 1"}), StartsWith(at(1) + "a control character (byte 0x7f) at column 2:"));
  EXPECT_EQ(load_config(write("tabs.yaml", {"train: {steps: 3}\r", "# a\tcomment\r"})).train.steps, 3);
}

// yaml-cpp gives up past its nesting limit with the message "bad file" (its DeepRecursion): the
// error names the nesting instead, for a file and for a --set value.
TEST_F(ConfigFile, NestingPastYamlCppsLimitIsNamed) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string msg = kind_and_what_of([&] { load_config(write("x.yaml", {"a: " + deep})); });
  EXPECT_THAT(msg, StartsWith("input: " + at(1) + "YAML nesting too deep: yaml-cpp reads at most "));
  EXPECT_THAT(msg, HasSubstr(" levels of sequences and mappings"));
  EXPECT_THAT(msg, Not(HasSubstr("bad file")));
  const std::string set = error_of([&] { load_config(write("base.yaml", {"run: {seed: 5}"}), {"run=" + deep}); });
  EXPECT_THAT(set, HasSubstr("' is not valid YAML: nesting too deep: yaml-cpp reads at most "));
  EXPECT_THAT(set, Not(HasSubstr("bad file")));
}

TEST_F(ConfigFile, MissingFileNamesThePath) {
  const std::string path = (dir_ / "absent.yaml").string();
  EXPECT_THAT(error_of([&] { load_config(path); }), StartsWith(path + ": cannot open config file"));
  EXPECT_THAT(error_of([&] { load_config(dir_.string()); }),
              StartsWith(dir_.string() + ": cannot open config file: it is a directory"));
  // A name longer than the file system allows: our message, not a std::filesystem_error's.
  const std::string too_long = (dir_ / std::string(5000, 'a')).string() + ".yaml";
  EXPECT_EQ(error_of([&] { load_config(too_long); }), too_long + ": cannot open config file: File name too long");
}

// ---- ranges ---------------------------------------------------------------------------------

TEST_F(ConfigFile, OutOfRangeValuesNameFileLineKeyAndValue) {
  EXPECT_THAT(load_error({"run: {seed: 1}", "comm:", "  compensator:", "    a: 0.5", "    eta: 1.5"}),
              StartsWith(at(5) + "'comm.compensator.eta' = 1.5 is out of range [0, 1]"));
  EXPECT_THAT(load_error({"comm:", "  group_size: 100"}),
              StartsWith(at(2) + "'comm.group_size' = 100 must be a power of two"));
  EXPECT_THAT(load_error({"comm:", "  bits: 3"}), StartsWith(at(2) + "'comm.bits' = 3 must be 4 or 8"));
}

TEST_F(ConfigFile, EveryRangeIsEnforced) {
  const struct {
    std::string_view yaml;
    std::string_view message;
  } cases[] = {
      {"model: {layers: 0}", "'model.layers' = 0 must be >= 1"},
      {"model: {hidden: 0}", "'model.hidden' = 0 must be >= 1"},
      {"model: {heads: -2}", "'model.heads' = -2 must be >= 1"},
      {"model: {vocab_size: 0}", "'model.vocab_size' = 0 must be >= 1"},
      {"model: {head_dim: 127}", "'model.head_dim' = 127 must be even"},
      {"model: {norm_eps: 0.0}", "'model.norm_eps' = 0.0 must be > 0"},
      {"model: {init_std: 0}", "'model.init_std' = 0.0 must be > 0"},
      {"model: {init_std: 1.5}",
       "'model.init_std' = 1.5 must be <= 1 (published models use 0.006 to 0.02; at 10 the first forward pass "
       "overflows)"},
      {"model: {init_std: 1e39}", "'model.init_std' = 1.0e+39 must be <= 1"},
      {"model: {rope_base: .inf}", "'model.rope_base' = inf must be a finite number"},
      {"parallel: {tp: 0}", "'parallel.tp' = 0 must be >= 1"},
      {"comm: {group_size: 1}", "'comm.group_size' = 1 must be a power of two in [2, 1048576]"},
      {"comm: {group_size: 2097152}", "'comm.group_size' = 2097152 must be a power of two"},
      {"comm: {compensator: {a: -0.1}}", "'comm.compensator.a' = -0.1 is out of range [0, 1]"},
      {"comm: {compensator: {beta1: 1.0}}", "'comm.compensator.beta1' = 1.0 is out of range [0, 1)"},
      {"comm: {compensator: {beta2: 1.0}}", "'comm.compensator.beta2' = 1.0 is out of range [0, 1)"},
      {"comm: {telemetry_interval: -1}", "'comm.telemetry_interval' = -1 must be >= 0"},
      {"optim: {lr: 0}", "'optim.lr' = 0.0 must be > 0"},
      // Above 0 as a double, 0 in the fp32 update: eps 0 made 0/0 = NaN at step 1.
      {"optim: {eps: 1e-46}", "'optim.eps' = 1.0e-46 is 0 in fp32"},
      {"optim: {lr: 1e-320}", "'optim.lr' = 1.0e-320 is 0 in fp32"},
      {"optim: {min_lr: -1.0e-5}", "'optim.min_lr' = -1.0e-05 must be >= 0"},
      {"optim: {beta2: 1.0}", "'optim.beta2' = 1.0 is out of range [0, 1)"},
      // Below 1 as a double, 1.0f in the fp32 update: the moments would never move.
      {"optim: {beta1: 0.99999999}", "'optim.beta1' = 0.99999999 rounds to 1 in fp32"},
      {"optim: {beta2: 0.99999998}", "'optim.beta2' = 0.99999998 rounds to 1 in fp32"},
      {"comm: {compensator: {beta1: 0.99999999}}", "'comm.compensator.beta1' = 0.99999999 rounds to 1 in fp32"},
      {"comm: {compensator: {beta2: 0.999999999}}", "'comm.compensator.beta2' = 0.999999999 rounds to 1 in fp32"},
      {"optim: {weight_decay: -0.1}", "'optim.weight_decay' = -0.1 must be >= 0"},
      {"optim: {grad_clip: -1}", "'optim.grad_clip' = -1.0 must be >= 0 (0 = off)"},
      // Values that train nothing with exit 0: 0 only in fp32 (all weights 0; every update
      // clipped to 0, where 0 means off), or an epsilon that outweighs what it guards.
      {"model: {init_std: 1e-50}", "'model.init_std' = 1.0e-50 is 0 in fp32"},
      {"optim: {grad_clip: 1e-50}",
       "'optim.grad_clip' = 1.0e-50 is 0 in fp32, the precision it is used in, but is not 0 = off"},
      {"model: {norm_eps: 1e30}",
       "'model.norm_eps' = 1.0e+30 must be <= 1 (an epsilon above 1 outweighs the mean "
       "square of the activations"},
      {"model: {norm_eps: 1e-50}", "'model.norm_eps' = 1.0e-50 is 0 in fp32"},
      {"optim: {eps: 1e38}", "'optim.eps' = 1.0e+38 must be <= 1 (an epsilon above 1 outweighs sqrt(v)"},
      {"schedule: {warmup_steps: -1}", "'schedule.warmup_steps' = -1 must be >= 0"},
      {"data: {seq_len: 0}", "'data.seq_len' = 0 must be >= 1"},
      {"data: {train: ''}", "'data.train' must not be empty"},
      {"run: {out_dir: ''}", "'run.out_dir' must not be empty"},
      {"train: {steps: 0}", "'train.steps' = 0 must be >= 1"},
      {"train: {keep_checkpoints: 0}", "'train.keep_checkpoints' = 0 must be >= 1"},
      {"train: {micro_batch: 0}", "'train.micro_batch' = 0 must be >= 1"},
      {"train: {log_interval: 0}", "'train.log_interval' = 0 must be >= 1"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    EXPECT_THAT(load_error({c.yaml}), StartsWith(at(1) + std::string(c.message)));
  }
}

TEST_F(ConfigFile, BoundaryValuesAreAccepted) {
  const std::string path =
      write("edges.yaml", {"comm: {group_size: 2, compensator: {eta: 0, a: 1, beta1: 0, beta2: 0.99999994}}",
                           "optim: {min_lr: 0, grad_clip: 0, weight_decay: 0, beta2: 0.99999994}",
                           "train: {eval_interval: 0, checkpoint_interval: 0}"});
  const Config c = load_config(path);
  EXPECT_EQ(c.comm.group_size, 2);
  EXPECT_EQ(c.comm.compensator.eta, 0.0);
  EXPECT_EQ(c.comm.compensator.a, 1.0);
  EXPECT_EQ(load_config(write("big.yaml", {"comm: {group_size: 1048576}"})).comm.group_size, 1 << 20);
}

// Values near INT_MAX used to pass validation and end in std::bad_alloc (or int overflow)
// later; now each is refused by name, and sizes that pass alone but not together are refused
// with the memory they would need.
TEST_F(ConfigFile, HugeValuesAreRefusedByNameWithTheMemoryTheyNeed) {
  const struct {
    std::string_view yaml;
    std::string_view message;
  } cases[] = {
      {"model: {vocab_size: 2147483647}",
       "'model.vocab_size' = 2147483647 must be <= 16777216 (token ids index a table of at most 2^24 entries)"},
      {"model: {hidden: 2147483647}", "'model.hidden' = 2147483647 must be <= 131072 (far above any published model)"},
      {"model: {ffn: 2147483647}", "'model.ffn' = 2147483647 must be <= 1048576"},
      {"model: {layers: 2147483647}", "'model.layers' = 2147483647 must be <= 1024"},
      {"model: {heads: 2147483647}", "'model.heads' = 2147483647 must be <= 1024"},
      {"model: {kv_heads: 2147483647}", "'model.kv_heads' = 2147483647 must be <= 1024"},
      {"model: {head_dim: 2147483646}",
       "'model.head_dim' = 2147483646 must be <= 1024 (layers x heads x head_dim must fit an int)"},
      {"data: {seq_len: 2147483647}", "'data.seq_len' = 2147483647 must be <= 1048576"},
      {"train: {micro_batch: 2147483647}",
       "'train.micro_batch' = 2147483647 must be <= 65536 (micro_batch x dp must fit an int)"},
      {"train: {global_batch: 2147483647}", "'train.global_batch' = 2147483647 must be <= 16777216"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    EXPECT_THAT(load_error({c.yaml}), StartsWith(at(1) + std::string(c.message)));
  }
  // Each within its range, together 2^41 embedding parameters: with the default blocks 2.255e12
  // parameters x 16 bytes / tp 4 = 9.0 TB, plus 24 x 2048 tokens x (28 x 131072 + 2^24 / 4) x 4
  // bytes = 1.5 TB of activations.
  const std::string memory = load_error({"model: {vocab_size: 16777216, hidden: 131072}"});
  EXPECT_THAT(memory, StartsWith(at(1) + "this config needs at least 10.6 TB per rank, more than the 1 TiB echo "
                                         "allows: 2.255e+12 parameters ('model.vocab_size' = 16777216, "
                                         "'model.hidden' = 131072"));
  EXPECT_THAT(memory, HasSubstr("take 9.0 TB of fp32 weights, gradients and AdamW moments over 'parallel.tp' = 4"));
  EXPECT_THAT(memory, HasSubstr("'train.micro_batch' = 24 x 'data.seq_len' = 2048 tokens take 1.5 TB of activations"));
  // Activations alone: 65536 sequences of 1048576 tokens.
  EXPECT_THAT(
      load_error({"train: {micro_batch: 65536, global_batch: 65536}", "data: {seq_len: 1048576}"}),
      AllOf(StartsWith(at(2) + "this config needs at least"), HasSubstr("'data.seq_len' = 1048576 tokens take")));
  // The largest dense Qwen3 (32B, untied) passes: about 200 GB per rank at tp = 4.
  EXPECT_NO_THROW(load_config(write("qwen3_32b.yaml", {"model: {hidden: 5120, ffn: 25600, layers: 64, heads: 64, "
                                                       "kv_heads: 8, head_dim: 128, tie_embeddings: false}",
                                                       "parallel: {tp: 4}"})));
}

TEST_F(ConfigFile, ASecondYamlDocumentIsAnError) {
  // YAML::Load read the first document and dropped the rest silently.
  EXPECT_THAT(load_error({"model: {layers: 2}", "---", "model: {layers: 3}"}),
              StartsWith(at(3) + "a second YAML document (after a '---' line) starts here"));
  EXPECT_THAT(load_error({"---", "model: {layers: 2}", "---", "train: {steps: 3}"}),
              AllOf(StartsWith(at(4)), HasSubstr("a config file holds one document, 2 found")));
  // One document with explicit start and end markers is fine.
  EXPECT_EQ(load_config(write("one.yaml", {"---", "model: {layers: 2}", "..."})).model.layers, 2);
}

TEST_F(ConfigFile, ErrorsAreInputErrorsWithoutASourceLocation) {
  write("x.yaml", {"model:", "  layers: 0"});
  const std::string what = kind_and_what_of([&] { load_config(path_); });
  EXPECT_THAT(what, StartsWith("input: " + at(2) + "'model.layers' = 0 must be >= 1"));
  EXPECT_THAT(what, Not(HasSubstr("[at ")));
  EXPECT_THAT(kind_and_what_of([&] { load_config(path_, {"comm.bits"}); }),
              AllOf(StartsWith("input: --set comm.bits: malformed override"), Not(HasSubstr("[at "))));
}

// ---- combinations -------------------------------------------------------------------------

TEST_F(ConfigFile, TpMustDivideHeadsKvHeadsFfnAndPaddedVocab) {
  // tp given on line 2, heads at its default: the error points at tp.
  EXPECT_THAT(load_error({"run: {seed: 1}", "parallel: {tp: 3}"}),
              StartsWith(at(2) + "'parallel.tp' = 3 does not divide 'model.heads' = 16"));
  EXPECT_THAT(load_error({"model: {heads: 12, kv_heads: 6}"}),
              StartsWith(at(1) + "'parallel.tp' = 4 does not divide 'model.kv_heads' = 6"));
  EXPECT_THAT(load_error({"model:", "  ffn: 3070"}),
              StartsWith(at(2) + "'parallel.tp' = 4 does not divide 'model.ffn' = 3070"));
  EXPECT_THAT(load_error({"model: {heads: 12, kv_heads: 6, ffn: 3072}", "parallel: {tp: 3}"}),
              AllOf(StartsWith(at(2) + "'parallel.tp' = 3 does not divide the padded vocabulary 151936"),
                    HasSubstr("'model.vocab_size' = 151936"), HasSubstr("'model.vocab_pad_multiple' = 128")));
  // Padding is what makes a vocabulary divisible: 1001 -> 1024 splits over 8.
  EXPECT_EQ(load_config(write("pad.yaml", {"model: {vocab_size: 1001}", "parallel: {tp: 8}"})).model.padded_vocab(),
            1024);
}

TEST_F(ConfigFile, HeadsMustBeAMultipleOfKvHeadsAtTheLaterKey) {
  EXPECT_THAT(load_error({"model:", "  heads: 16", "  kv_heads: 6"}),
              StartsWith(at(3) + "'model.heads' = 16 is not a multiple of 'model.kv_heads' = 6"));
  EXPECT_THAT(load_error({"model:", "  kv_heads: 6", "  heads: 16"}), StartsWith(at(3) + "'model.heads' = 16"));
}

TEST_F(ConfigFile, GlobalBatchMustSplitOverMicroBatchAndDp) {
  EXPECT_THAT(load_error({"train:", "  micro_batch: 24", "  global_batch: 100"}),
              StartsWith(at(3) + "'train.global_batch' = 100 is not a multiple of 'train.micro_batch' = 24"));
  // 48 = 24 x 2 splits over world 8 (dp = 8 / tp 4 = 2) but not over world 16 (dp 4).
  const std::string path = write("dp.yaml", {"train: {micro_batch: 24, global_batch: 48}"});
  EXPECT_NO_THROW(load_config(path, {}, 8));
  EXPECT_THAT(
      error_of([&] { load_config(path, {}, 16); }),
      AllOf(StartsWith(path + ":1: 'train.global_batch' = 48 is not a multiple of 'train.micro_batch' = 24 x dp = 4"),
            HasSubstr("world size 16")));
}

TEST_F(ConfigFile, BothDefaultsPointAtTheSectionOrTheFile) {
  // 384 is not a multiple of 24 x dp 5: neither batch key is in the file.
  EXPECT_THAT(load_error({"run: {seed: 1}", "train:", "  steps: 10"}, {}, 20),
              StartsWith(at(2) + "'train.global_batch' = 384 is not a multiple of 'train.micro_batch' = 24 x dp = 5"));
  EXPECT_THAT(load_error({"run: {seed: 1}"}, {}, 20), StartsWith(path_ + ": 'train.global_batch' = 384"));
}

TEST_F(ConfigFile, WorldSizeMustBeAMultipleOfTp) {
  EXPECT_THAT(load_error({"parallel:", "  tp: 4"}, {}, 6),
              StartsWith(at(2) + "world size 6 is not a multiple of 'parallel.tp' = 4"));
}

TEST_F(ConfigFile, CudaIpcNeedsTheCudaDevice) {
  EXPECT_THAT(load_error({"run: {seed: 3}", "comm:", "  transport: cuda_ipc"}),
              StartsWith(at(3) + "'comm.transport' = cuda_ipc needs 'run.device' = cuda, got 'run.device' = cpu"));
  EXPECT_NO_THROW(load_config(write("ok.yaml", {"run: {device: cuda}", "comm: {transport: cuda_ipc}"})));
}

TEST_F(ConfigFile, ShmTransportAndItsPeerTimeout) {
  const Config c = load_config(write("shm.yaml", {"comm: {transport: shm, peer_timeout_s: 2.5}"}));
  EXPECT_EQ(c.comm.transport, Transport::shm);
  EXPECT_DOUBLE_EQ(c.comm.peer_timeout_s, 2.5);
  EXPECT_THAT(load_error({"comm:", "  peer_timeout_s: 0"}), StartsWith(at(2) + "'comm.peer_timeout_s' = 0"));
  EXPECT_DOUBLE_EQ(c.comm.save_timeout_s, 1800);  // the watchdog's limit for start-up and saves
  EXPECT_DOUBLE_EQ(load_config(write("save.yaml", {"comm: {save_timeout_s: 10}"})).comm.save_timeout_s, 10);
  EXPECT_THAT(load_error({"comm:", "  save_timeout_s: 0"}), StartsWith(at(2) + "'comm.save_timeout_s' = 0"));
  EXPECT_THAT(load_error({"comm:", "  shm_threads: 65"}), StartsWith(at(2) + "'comm.shm_threads' = 65"));
}

TEST_F(ConfigFile, TwoCollectiveTakesOnlyTheUnpipelinedTransports) {
  for (const char* t : {"auto", "mpi"})
    EXPECT_NO_THROW(
        load_config(write("tc.yaml", {"comm:", "  allreduce: two_collective", std::string("  transport: ") + t})));
  EXPECT_THAT(load_error({"comm:", "  allreduce: two_collective", "  transport: shm"}),
              HasSubstr("'comm.allreduce' = two_collective is the unpipelined baseline"));
  EXPECT_THAT(load_error({"run: {device: cuda}", "comm:", "  allreduce: two_collective", "  transport: cuda_ipc"}),
              HasSubstr("it cannot take 'comm.transport' = cuda_ipc, use auto or mpi"));
}

TEST_F(ConfigFile, PipelineGeometryKeysReachTheTransportAndAreChecked) {
  const Config c = load_config(write("p2p.yaml", {"comm: {p2p_tiles: 4, p2p_slot_kib: 2048, shm_threads: 3}"}));
  EXPECT_EQ(c.comm.p2p_tiles, 4);
  EXPECT_EQ(c.comm.p2p_slot_kib, 2048);
  EXPECT_THAT(load_error({"comm:", "  p2p_tiles: 0"}), StartsWith(at(2) + "'comm.p2p_tiles' = 0"));
  EXPECT_THAT(load_error({"comm:", "  p2p_tiles: 65"}), StartsWith(at(2) + "'comm.p2p_tiles' = 65"));
  EXPECT_THAT(load_error({"comm:", "  p2p_slot_kib: 0"}), StartsWith(at(2) + "'comm.p2p_slot_kib' = 0"));
  EXPECT_THAT(load_error({"comm:", "  p2p_slot_kib: 65537"}), StartsWith(at(2) + "'comm.p2p_slot_kib' = 65537"));
  // Cross-key: threads beyond the tiles of a round; a workspace beyond 4 GiB per rank.
  EXPECT_THAT(load_error({"comm:", "  p2p_tiles: 2", "  shm_threads: 3"}),
              HasSubstr("'comm.shm_threads' = 3 exceeds 'comm.p2p_tiles' = 2"));
  EXPECT_THAT(load_error({"parallel: {tp: 8}", "comm:", "  p2p_tiles: 64", "  p2p_slot_kib: 8192"}),
              HasSubstr("workspace would take 8.0 GiB per rank (2 x 'comm.p2p_tiles' = 64 x 'parallel.tp' = 8 x "
                        "'comm.p2p_slot_kib' = 8192 KiB)"));
  // No workspace under transport mpi or the unpipelined baseline: nothing to refuse.
  EXPECT_NO_THROW(load_config(
      write("mpi.yaml", {"parallel: {tp: 8}", "comm: {transport: mpi, p2p_tiles: 64, p2p_slot_kib: 8192}"})));
}

TEST_F(ConfigFile, MinLrMustNotExceedLr) {
  EXPECT_THAT(load_error({"optim:", "  lr: 1.0e-4", "  min_lr: 1.0e-3"}),
              StartsWith(at(3) + "'optim.min_lr' = 0.001 must be <= 'optim.lr' = 0.0001"));
}

// ---- overrides ------------------------------------------------------------------------------

TEST_F(ConfigFile, OverridesChangeValues) {
  const std::string path = write("base.yaml", {"comm:", "  bits: 4", "run: {out_dir: runs/a}"});
  const Config c = load_config(path, {"comm.bits=8", "comm.compensator.eta=0.5", "run.out_dir=runs/x",
                                      "linear.mode=int8", "comm.forward=false", "model.layers = 2"});
  EXPECT_EQ(c.comm.bits, 8);
  EXPECT_EQ(c.comm.compensator.eta, 0.5);
  EXPECT_EQ(c.run.out_dir, "runs/x");
  EXPECT_EQ(c.linear.mode, LinearMode::int8);
  EXPECT_FALSE(c.comm.forward);
  EXPECT_EQ(c.model.layers, 2);
  EXPECT_EQ(c.comm.group_size, 128);  // untouched keys keep their values
}

TEST_F(ConfigFile, LaterOverrideWinsAndFlowMapsWork) {
  const std::string path = write("base.yaml", {});
  const Config c = load_config(path, {"comm.bits=8", "comm.bits=4", "comm.compensator={eta: 0.25, a: 0.5}"});
  EXPECT_EQ(c.comm.bits, 4);
  EXPECT_EQ(c.comm.compensator.eta, 0.25);
  EXPECT_EQ(c.comm.compensator.a, 0.5);
  EXPECT_EQ(c.comm.compensator.beta1, 0.7);
}

// A mapping value merges into the section (it replaced it, resetting the file's other keys to
// their defaults and switching the compensator back on).
TEST_F(ConfigFile, AFlowMapOverrideMergesIntoTheSection) {
  const std::string path =
      write("base.yaml", {"comm:", "  compensator: {enabled: false, eta: 0.1, a: 0.9, beta1: 0.5, beta2: 0.6}"});
  const Config c = load_config(path, {"comm.compensator={eta: 0.25, beta2: 0.125}"});
  EXPECT_FALSE(c.comm.compensator.enabled);
  EXPECT_EQ(c.comm.compensator.eta, 0.25);
  EXPECT_EQ(c.comm.compensator.a, 0.9);
  EXPECT_EQ(c.comm.compensator.beta1, 0.5);
  EXPECT_EQ(c.comm.compensator.beta2, 0.125);
  EXPECT_THAT(error_of([&] { load_config(path, {"comm={compensator: {etta: 1}}"}); }),
              StartsWith("--set comm={compensator: {etta: 1}}: unknown key 'comm.compensator.etta'"));
}

// A YAML anchor and its aliases are one node: a --set of one key changed every alias of it
// (seq_len: *len set to 64 made max_position_embeddings 64 too).
TEST_F(ConfigFile, AnOverrideOfAnAliasChangesThatKeyOnly) {
  const std::string path = write("base.yaml", {"model: {max_position_embeddings: &len 128}", "data: {seq_len: *len}",
                                               "comm:", "  compensator: {eta: &coef 0.7, beta1: *coef}"});
  const Config c = load_config(path, {"data.seq_len=64", "comm.compensator.beta1=0.25"});
  EXPECT_EQ(c.data.seq_len, 64);
  EXPECT_EQ(c.model.max_position_embeddings, 128);
  EXPECT_EQ(c.comm.compensator.beta1, 0.25);
  EXPECT_EQ(c.comm.compensator.eta, 0.7);
  // A whole section that is an alias of another cannot take a key without changing both.
  const std::string sections = write("sections.yaml", {"run: &r {seed: 3}", "optim: {lr: 0.01}", "linear: *r"});
  EXPECT_THAT(error_of([&] { load_config(sections, {"linear.seed=4"}); }),
              StartsWith("--set linear.seed=4: 'linear' is the same YAML node as 'run' (an anchor and its alias)"));
  // The search for a second holder walks each mapping once: a mapping holding an alias of itself
  // made it endless (a stack overflow), and 40 levels of mappings holding two aliases of the level
  // below took 2^40 steps. Both now end at the unknown key, well within the test's time.
  const std::string loop = write("loop.yaml", {"optim: {lr: 0.1}", "run: &r {seed: 3, again: *r}"});
  EXPECT_THAT(error_of([&] { load_config(loop, {"optim.lr=0.01"}); }), HasSubstr("unknown key 'run.again'"));
  std::string levels = "optim: {lr: 0.1}\nrun:\n  l0: &l0 {x: 1}";
  for (int i = 1; i < 40; ++i) levels += fmt::format("\n  l{}: &l{} {{p: *l{}, q: *l{}}}", i, i, i - 1, i - 1);
  const std::string doubling = write("doubling.yaml", {levels});
  EXPECT_THAT(error_of([&] { load_config(doubling, {"optim.lr=0.01"}); }), HasSubstr("unknown key 'run.l0'"));
}

TEST_F(ConfigFile, OverridesGoThroughValidation) {
  const std::string path = write("base.yaml", {"comm:", "  bits: 4"});
  EXPECT_THAT(error_of([&] { load_config(path, {"comm.bits=3"}); }),
              AllOf(StartsWith("--set comm.bits=3: 'comm.bits' = 3 must be 4 or 8"), Not(HasSubstr("base.yaml"))));
  EXPECT_THAT(error_of([&] { load_config(path, {"model.layers=abc"}); }),
              StartsWith("--set model.layers=abc: 'model.layers' must be an integer, got 'abc'"));
  EXPECT_THAT(error_of([&] { load_config(path, {"parallel.tp=3"}); }),
              StartsWith("--set parallel.tp=3: 'parallel.tp' = 3 does not divide 'model.heads' = 16"));
  EXPECT_THAT(error_of([&] { load_config(path, {"comm.compensator={eta: 2}"}); }),
              StartsWith("--set comm.compensator={eta: 2}: 'comm.compensator.eta' = 2.0 is out of range [0, 1]"));
}

TEST_F(ConfigFile, OverrideOfUnknownKeySaysItCameFromSet) {
  const std::string path = write("base.yaml", {"comm:", "  bits: 4"});
  EXPECT_THAT(error_of([&] { load_config(path, {"comm.bitz=8"}); }),
              AllOf(StartsWith("--set comm.bitz=8: unknown key 'comm.bitz' (known keys in 'comm': allreduce"),
                    Not(HasSubstr("base.yaml:"))));
  EXPECT_THAT(error_of([&] { load_config(path, {"optimizer.lr=0.1"}); }),
              StartsWith("--set optimizer.lr=0.1: unknown top-level section 'optimizer'"));
}

TEST_F(ConfigFile, MalformedOverridesAreErrors) {
  const std::string path = write("base.yaml", {"run: {seed: 5}"});
  EXPECT_THAT(error_of([&] { load_config(path, {"comm.bits"}); }),
              StartsWith("--set comm.bits: malformed override: expected key=value"));
  EXPECT_THAT(error_of([&] { load_config(path, {"comm..bits=8"}); }),
              StartsWith("--set comm..bits=8: malformed override key 'comm..bits'"));
  EXPECT_THAT(error_of([&] { load_config(path, {"=8"}); }), HasSubstr("malformed override key"));
  EXPECT_THAT(error_of([&] { load_config(path, {"comm.compensator={eta: [1"}); }),
              AllOf(StartsWith("--set comm.compensator={eta: [1: value"), HasSubstr("is not valid YAML")));
  EXPECT_THAT(
      error_of([&] { load_config(path, {"run.seed.low=1"}); }),
      StartsWith("--set run.seed.low=1: cannot set a key inside 'run.seed': it is not a mapping (" + path + ":1)"));
}

// A huge --set (a 10 MB value) was quoted whole in the error, which then broke the message's
// trip between ranks: the input is named by its start and its size.
TEST_F(ConfigFile, HugeOverridesAreClippedInMessages) {
  const std::string path = write("base.yaml", {"run: {seed: 5}"});
  const std::string mega(1 << 20, 'x');
  // A flow value that is not valid YAML.
  std::string msg = error_of([&] { load_config(path, {"model.layers=[" + mega}); });
  EXPECT_THAT(msg, StartsWith("--set model.layers=[xxxx"));
  EXPECT_THAT(msg, HasSubstr("... (1048590 bytes): value '[xxxx"));
  EXPECT_THAT(msg, HasSubstr("... (1048577 bytes)' is not valid YAML"));
  EXPECT_LT(msg.size(), 1000u) << msg.size();
  // No '=' at all, and a key that is not a dotted name.
  msg = error_of([&] { load_config(path, {mega}); });
  EXPECT_THAT(msg, AllOf(StartsWith("--set xxxx"), HasSubstr("... (1048576 bytes): malformed override: expected")));
  EXPECT_LT(msg.size(), 1000u) << msg.size();
  msg = error_of([&] { load_config(path, {"a-" + mega + "=1"}); });
  EXPECT_THAT(msg, HasSubstr("malformed override key 'a-xxxx"));
  EXPECT_LT(msg.size(), 1000u) << msg.size();
  // A value the typed reading refuses: the key is named first, and the reader clips its quote.
  msg = error_of([&] { load_config(path, {"model.layers=" + mega}); });
  EXPECT_THAT(msg, StartsWith("--set model.layers=xxxx"));
  EXPECT_THAT(msg, HasSubstr("... (1048589 bytes): 'model.layers' must be an integer, got 'xxxx"));
  EXPECT_THAT(msg, HasSubstr("... (1048576 bytes)'"));
  EXPECT_LT(msg.size(), 1000u) << msg.size();
  // An unknown key as long: named by its start, and the known keys are still listed.
  msg = error_of([&] { load_config(path, {"model." + mega + "=1"}); });
  EXPECT_THAT(msg, AllOf(HasSubstr("unknown key 'model.xxxx"), HasSubstr("(known keys in 'model': ")));
  EXPECT_LT(msg.size(), 2000u) << msg.size();
}

// ---- writing ----------------------------------------------------------------------------

TEST_F(ConfigFile, EffectiveConfigRoundTrips) {
  Config original = load_config(write("full.yaml", kFullFile));
  // Values whose text is easy to get wrong: long fractions, tiny exponents, strings that read
  // as numbers, bools or null, and YAML punctuation.
  original.optim.lr = 0.1 + 0.2;
  original.optim.min_lr = 1.0e-7;
  original.model.norm_eps = 1.0 / 3.0;
  original.model.rope_base = 1.0e20;
  original.run.seed = 18446744073709551615u;
  original.run.out_dir = "runs/a: b # c";
  original.data.train = "123";
  original.data.valid = "";
  const std::string path = (dir_ / "out" / "nested" / "config.yaml").string();
  write_effective_config(original, path);
  const Config loaded = load_config(path, {}, 4);
  EXPECT_EQ(loaded, original);
  EXPECT_EQ(loaded.source, path);
  EXPECT_EQ(loaded.data.train, "123");
  EXPECT_EQ(loaded.data.valid, "");
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  Config defaults;
  write_effective_config(defaults, path);  // replaces the previous file
  EXPECT_EQ(load_config(path), defaults);
}

// A directory at the config's name (a --resume whose run dir holds one) is refused before
// anything is written, naming it; the rename used to fail after the .tmp was written, leaving it
// behind. Something at the old temp name config.yaml.tmp (a FIFO would block an open) is neither
// opened nor removed: the temp name is unique (config.yaml.tmp.XXXXXX).
TEST_F(ConfigFile, EffectiveConfigOverADirectoryIsRefusedAndLeavesNoTemp) {
  const std::string path = (dir_ / "run" / "config.yaml").string(), temp = path + ".tmp";
  const auto names = [&] {
    std::vector<std::string> n;
    for (const auto& e : fs::directory_iterator(dir_ / "run")) n.push_back(e.path().filename().string());
    std::sort(n.begin(), n.end());
    return n;
  };
  fs::create_directories(path + "/kept");
  EXPECT_EQ(kind_and_what_of([&] { write_effective_config(Config{}, path); }),
            "input: cannot write the effective config '" + path + "': it is a directory; move it away");
  EXPECT_EQ(names(), std::vector<std::string>{"config.yaml"});
  EXPECT_TRUE(fs::is_directory(path + "/kept"));
  fs::remove_all(path);
  ASSERT_EQ(::mkfifo(temp.c_str(), 0600), 0);
  write_effective_config(Config{}, path);
  EXPECT_TRUE(fs::is_fifo(temp));
  EXPECT_EQ(names(), (std::vector<std::string>{"config.yaml", "config.yaml.tmp"}));
  fs::remove(temp);
  write_effective_config(Config{}, path);
  EXPECT_EQ(load_config(path), Config{});
  EXPECT_FALSE(fs::exists(fs::symlink_status(temp)));
}

TEST(ConfigYaml, WritesEveryKeyWithAComment) {
  const std::string text = to_yaml(Config{});
  const YAML::Node root = YAML::Load(text);
  for (const std::string& key : known_keys()) {
    EXPECT_TRUE(scalar_at(root, key).has_value()) << key;
  }
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) {
      EXPECT_THAT(line, HasSubstr("  # "));
    }
  EXPECT_THAT(text, HasSubstr("  transport: auto "));
  EXPECT_THAT(text, HasSubstr("  norm_eps: 1.0e-06 "));
}

TEST(ConfigValidate, ChecksConfigsBuiltInCode) {
  Config c;
  c.comm.bits = 5;
  EXPECT_THAT(error_of([&] { validate(c); }), StartsWith("config: 'comm.bits' = 5 must be 4 or 8"));
  c = Config{};
  c.source = "mine.yaml";
  c.parallel.tp = 3;
  EXPECT_THAT(error_of([&] { validate(c); }), StartsWith("mine.yaml: 'parallel.tp' = 3 does not divide"));
  c = Config{};
  EXPECT_THAT(error_of([&] { validate(c, 7); }), HasSubstr("world size 7 is not a multiple of 'parallel.tp' = 4"));
  EXPECT_THAT(error_of([&] { validate(c, -1); }), HasSubstr("world_size must be >= 0"));
}

TEST(ConfigEquality, IgnoresTheSourceButNoValue) {
  Config a, b;
  b.source = "elsewhere.yaml";
  EXPECT_EQ(a, b);
  b.comm.compensator.beta2 = 0.25;
  EXPECT_NE(a, b);
  b = a;
  b.train.log_interval = 2;
  EXPECT_NE(a, b);
}

// ---- the shipped default config -------------------------------------------------------------

TEST(DefaultYaml, LoadsToTheBuiltInDefaults) {
  const std::string path = (repo_root() / "configs" / "default.yaml").string();
  ASSERT_TRUE(fs::exists(path)) << path;
  const Config c = load_config(path, {}, 8);
  EXPECT_EQ(c, Config{});
}

TEST(DefaultYaml, NamesEveryKeyWithAComment) {
  const std::string path = (repo_root() / "configs" / "default.yaml").string();
  const YAML::Node root = YAML::LoadFile(path);
  for (const std::string& key : known_keys()) {
    EXPECT_TRUE(scalar_at(root, key).has_value()) << key << " is missing from " << path;
  }
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.front() != '#') {
      EXPECT_THAT(line, HasSubstr("# ")) << "undocumented line in " << path;
    }
}

// Every real-valued key is written with a '.' (300.0, not 300): YAML 1.1 readers (PyYAML, which
// sweep.py uses to learn each key's kind from this file) read 300 as an integer, and sweep.py then
// refused a grid value of 2.5 for comm.peer_timeout_s as "must be an integer".
struct RealKeys {
  std::string prefix;
  std::vector<std::string> keys;
  template <class T>
  void field(const char* key, T&, const char*, const schema::Check& = {}) {
    if constexpr (std::is_same_v<T, double>) keys.push_back(schema::dotted(prefix, key));
  }
  template <class S>
  void section(const char* key, S& value, const char*) {
    const std::string outer = prefix;
    prefix = schema::dotted(prefix, key);
    schema::visit(value, *this);
    prefix = outer;
  }
};

TEST(DefaultYaml, WritesEveryRealKeyAsAFloat) {
  const YAML::Node root = YAML::LoadFile((repo_root() / "configs" / "default.yaml").string());
  Config c;
  RealKeys reals;
  schema::visit(c, reals);
  ASSERT_GE(reals.keys.size(), 10u);  // lr, eps, betas, eta, ...: the visitor found the table's doubles
  for (const std::string& key : reals.keys) {
    const std::string text = scalar_at(root, key).value_or("");
    EXPECT_NE(text.find('.'), std::string::npos) << key << ": " << text << " reads as an integer in YAML 1.1";
  }
}

}  // namespace
TEST(ConfigLinear, ProjectionListIsValidated) {
  Config c;
  EXPECT_EQ(c.linear.projection_list(), (std::vector<std::string>{"q", "k", "v", "o", "gate", "up", "down"}));
  c.linear.projections = " down , up";
  EXPECT_EQ(c.linear.projection_list(), (std::vector<std::string>{"down", "up"}));
  EXPECT_THAT(error_of([] { parse_config("linear: {projections: \"q,kk\"}", "p.yaml"); }),
              HasSubstr("p.yaml:1: 'linear.projections' names 'kk', which is not one of q, k, v, o, gate, up, down"));
  EXPECT_THAT(error_of([] { parse_config("linear: {projections: \"q,q\"}", "p.yaml"); }),
              HasSubstr("'linear.projections' names 'q' twice"));
  EXPECT_THAT(error_of([] { parse_config("linear: {projections: \",\"}", "p.yaml"); }),
              HasSubstr("names no projection"));
}

}  // namespace echo::config

namespace echo::config {

// Every int8 GEMM sums its inner dimension in int32: 131071 products of int8 fit (131071 x 128^2
// < 2^31), one more may not. The tokens of a micro-batch (the weight gradient's inner dimension),
// the hidden width and the per-rank FFN and attention widths are refused beyond that, by name, and
// only under linear.mode int8.
TEST(ConfigLinear, Int8ShapesWhoseInt32SumsCouldOverflowAreRefused) {
  const auto parse = [](const std::string& text) { return parse_config(text, "i.yaml"); };
  const std::string int8 = "linear: {mode: int8}\n";
  EXPECT_THAT(error_of([&] { parse(int8 + "train: {micro_batch: 64, global_batch: 64}\ndata: {seq_len: 2048}"); }),
              HasSubstr("'linear.mode' = int8 sums the weight gradient over the micro-batch's tokens in int32, at most "
                        "131071 of them: 'train.micro_batch' = 64 x 'data.seq_len' = 2048 = 131072"));
  EXPECT_NO_THROW(parse(int8 + "train: {micro_batch: 63, global_batch: 63}\ndata: {seq_len: 2048}"));
  EXPECT_NO_THROW(parse("train: {micro_batch: 64, global_batch: 64}\ndata: {seq_len: 2048}"));  // bf16: no int8 sums
  EXPECT_THAT(error_of([&] { parse(int8 + "model: {hidden: 131072, vocab_size: 128}\ntrain: {micro_batch: 1}"); }),
              HasSubstr("'linear.mode' = int8 sums a linear layer's input or output features in int32, at most "
                        "131071 of them per tp rank: 'model.hidden' = 131072 = 131072"));
  // ffn is split over tp: 262144 / 2 is still too wide, / 4 is not.
  const std::string wide_ffn =
      "model: {ffn: 262144, hidden: 64, heads: 4, kv_heads: 4, head_dim: 16, vocab_size: 128}\n";
  EXPECT_THAT(error_of([&] { parse(int8 + wide_ffn + "parallel: {tp: 2}"); }),
              HasSubstr("per tp rank: 'model.ffn' = 262144 / 'parallel.tp' = 2 = 131072"));
  // The attention width too: 2048 heads are refused by their own range, so 1024 x 256 / 2.
  EXPECT_THAT(error_of([&] {
                parse(int8 + "model: {hidden: 64, heads: 1024, kv_heads: 8, head_dim: 256, vocab_size: 128}\n" +
                      "parallel: {tp: 2}");
              }),
              HasSubstr("per tp rank: 'model.heads' = 1024 x 'model.head_dim' = 256 / 'parallel.tp' = 2 = 131072"));
  EXPECT_NO_THROW(parse(int8 + wide_ffn + "parallel: {tp: 4}"));
}

// No shell expands '~' in a config or a --set value: it made a folder named '~' in the working
// directory. Refused where the path is used, with the expanded path when it is the user's home.
TEST(Config, APathStartingWithTildeIsRefusedWhereItIsUsed) {
  EXPECT_NO_THROW(refuse_unexpanded_home("run.out_dir", "runs/~x"));
  EXPECT_NO_THROW(refuse_unexpanded_home("run.init_from", ""));
  const std::string home = std::getenv("HOME") != nullptr ? std::getenv("HOME") : "";
  const std::string msg = echo::testing::error_of([] { refuse_unexpanded_home("run.out_dir", "~/runs/x"); });
  EXPECT_THAT(msg, HasSubstr("'run.out_dir' = ~/runs/x starts with '~', which only a shell expands"));
  if (!home.empty()) {
    EXPECT_THAT(msg, HasSubstr(": write " + home + "/runs/x"));
  }
  EXPECT_THAT(echo::testing::error_of([] { refuse_unexpanded_home("data.train", "~alice/d/train"); }),
              HasSubstr("'data.train' = ~alice/d/train starts with '~', which only a shell expands (a config or --set "
                        "value is taken as written, so a folder named '~' would be made in the working directory): "
                        "write the full path"));
  // A recorded config holding such a value still parses (a checkpoint of an earlier run resumes).
  EXPECT_EQ(parse_config("run: {out_dir: ~/runs/x}\n", "recorded").run.out_dir, "~/runs/x");
}

}  // namespace echo::config
