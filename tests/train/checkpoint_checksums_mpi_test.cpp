// Checkpoint checksums over MPI (2 and 4 ranks), tiny Qwen3, random values: a save writes
// trainer/checksums.json matching its files and loads back; one flipped byte in a tensor of
// model.safetensors or optimizer.safetensors, or in trainer_state.json, is refused on every rank
// naming the file (and tensor) with nothing modified, although the same bytes load silently
// without the checksums; a checkpoint written before checksums loads; a truncated, garbage or
// incomplete checksums.json is refused; a corruption in rank 1's share is found by rank 1 alone
// and reported identically on every rank; load_hf_weights verifies one of our checkpoints; with
// data parallelism (tp < world) each tensor is still hashed by its world rank, not its tp rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/log_capture.h"
#include "../support/mpi_util.h"
#include "../support/test_util.h"
#include "checkpoint_test_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/hf_weights.h"
#include "train/checkpoint/checksums.h"
#include "train/checkpoint/safetensors.h"

namespace echo::train {
namespace {

using namespace echo::train::testing;
using echo::testing::error_of;
using echo::testing::kNoErrorThrown;
using echo::testing::world_rank;
using echo::testing::world_size;
namespace fs = std::filesystem;

constexpr int64_t kStep = 3;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// XORs byte `offset` of `path` with `mask` (on rank 0; every rank waits for it).
void flip_byte(const fs::path& path, uint64_t offset, unsigned char mask) {
  MPI_Barrier(MPI_COMM_WORLD);  // NOTE: no rank may still be reading the file as it was
  if (world_rank() == 0) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    EXPECT_TRUE(f.good()) << path;
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ static_cast<char>(mask));
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
    EXPECT_TRUE(f.good()) << path;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The file offset of the lowest byte of the middle element of an F32 tensor: flipping its low
// bit changes the value by one ulp, a plausible float that no value check can catch.
uint64_t middle_of(const fs::path& path, const std::string& tensor) {
  SafetensorsFile file(path.string());
  const StTensorInfo& info = file.info(tensor);
  return file.header_bytes().size() + info.begin + static_cast<uint64_t>(info.numel() / 2) * sizeof(float);
}

// Every parameter and moment of `s`, to show a refused load modified nothing.
std::vector<std::vector<float>> snapshot(const Shard& s) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < s.params.size(); ++i) {
    out.push_back(s.params[i].value_vector());
    out.push_back(s.opt.exp_avg(i).to_vector<float>());
    out.push_back(s.opt.exp_avg_sq(i).to_vector<float>());
  }
  return out;
}

// Every rank got the same message (compared with rank 0's).
::testing::AssertionResult same_on_every_rank(const std::string& msg) {
  int len = static_cast<int>(msg.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string root(static_cast<size_t>(len), '\0');
  if (world_rank() == 0) root = msg;
  MPI_Bcast(root.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  int differs = root != msg, any = 0;
  MPI_Allreduce(&differs, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) return ::testing::AssertionFailure() << "rank " << world_rank() << ": '" << msg << "' vs rank 0's '" << root << "'";
  return ::testing::AssertionSuccess();
}

class ChecksumsTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    save_reference(dir_, cfg_, ref_, world_size(), kStep);
    ckpt_ = checkpoint_dir(dir_, kStep);
  }
  // Loads into a fresh, randomly initialised model at tp (dp = world / tp); returns the error (""
  // when it loaded, after checking the values unless `corrupted`) and checks that a refused load
  // left the model as it was.
  std::string load(bool corrupted = false, int tp = world_size()) {
    dist::World world = dist::World::create(tp);
    Shard s(cfg_, tp, world.layout.tp_rank);
    s.params.init(999);
    const auto before = snapshot(s);
    const std::string msg = error_of([&] { load_checkpoint(ckpt_, s.params, &s.opt, world); });
    if (msg == kNoErrorThrown) {
      if (!corrupted) expect_matches(s, ref_, true, kStep + 100);
      return "";
    }
    EXPECT_TRUE(before == snapshot(s)) << "a refused load modified the model";
    EXPECT_TRUE(same_on_every_rank(msg));
    return msg;
  }
  // The same checkpoint without its checksums (as written before they existed).
  std::string load_without_checksums(bool corrupted = false) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove(ckpt_ / "trainer" / "checksums.json");
    MPI_Barrier(MPI_COMM_WORLD);
    return load(corrupted);
  }

  const config::ModelConfig cfg_ = ckpt_config();
  const Reference ref_ = make_reference(cfg_, 31);
  fs::path ckpt_;
};

TEST_F(ChecksumsTest, SaveWritesChecksumsOfEveryFileAndTheLoadVerifiesThem) {
  const fs::path sums_path = ckpt_ / "trainer" / "checksums.json";
  ASSERT_TRUE(fs::is_regular_file(sums_path));
  // A clean Hugging Face folder still: nothing new at the top level.
  for (const auto& e : fs::directory_iterator(ckpt_))
    EXPECT_TRUE(e.path().filename() == "model.safetensors" || e.path().filename() == "config.json" ||
                e.path().filename() == "COMPLETE" || e.path().filename() == "trainer")
        << e.path();
  const CheckpointChecksums sums = parse_checksums(read_file(sums_path), sums_path.string());
  for (const char* rel : {"model.safetensors", "trainer/optimizer.safetensors"}) {
    SCOPED_TRACE(rel);
    const SafetensorsChecksums want = checksum_safetensors(SafetensorsFile((ckpt_ / rel).string()));
    ASSERT_TRUE(sums.safetensors.count(rel));
    EXPECT_EQ(sums.safetensors.at(rel).header, want.header);
    EXPECT_EQ(sums.safetensors.at(rel).tensors, want.tensors);
  }
  EXPECT_EQ(sums.safetensors.at("model.safetensors").tensors.size(), ref_.specs.size());
  EXPECT_EQ(sums.safetensors.at("trainer/optimizer.safetensors").tensors.size(), 2 * ref_.specs.size());
  for (const char* rel : {"config.json", "trainer/trainer_state.json"}) {
    ASSERT_TRUE(sums.files.count(rel)) << rel;
    EXPECT_EQ(sums.files.at(rel), xxh3_64(read_file(ckpt_ / rel))) << rel;
  }
  EXPECT_EQ(load(), "");
  EXPECT_EQ(read_checkpoint_meta(ckpt_).step, kStep);
}

TEST_F(ChecksumsTest, AFlippedBitInAModelTensorIsRefused) {
  const std::string tensor = "model.layers.0.mlp.up_proj.weight";
  flip_byte(ckpt_ / "model.safetensors", middle_of(ckpt_ / "model.safetensors", tensor), 0x01);
  const std::string msg = load();
  EXPECT_NE(msg.find("cannot load checkpoint: '" + ckpt_.string() + "': tensor '" + tensor +
                     "' in model.safetensors does not match its checksum (stored 0x"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("use an older checkpoint"), std::string::npos) << msg;
  // Without the checksums the same file loads (silently wrong): the checksum is what refuses it.
  EXPECT_EQ(load_without_checksums(/*corrupted=*/true), "");
}

TEST_F(ChecksumsTest, AFlippedBitInAMomentIsRefused) {
  const fs::path opt = ckpt_ / "trainer" / "optimizer.safetensors";
  const std::string tensor = "model.layers.1.self_attn.o_proj.weight.exp_avg";
  flip_byte(opt, middle_of(opt, tensor), 0x01);
  const std::string msg = load();
  EXPECT_NE(msg.find("tensor '" + tensor + "' in trainer/optimizer.safetensors does not match its checksum"),
            std::string::npos)
      << msg;
  // A weights-only load does not read the moments, and so does not hash them either.
  dist::World world = dist::World::create(world_size());
  Shard s(cfg_, world_size(), world.layout.tp_rank);
  load_checkpoint(ckpt_.string(), s.params, nullptr, world);
  expect_matches(s, ref_, false, 0);
}

TEST_F(ChecksumsTest, AChangedTrainerStateIsRefused) {
  // data_position 1003 -> 1001: still valid JSON and a plausible state.
  const fs::path state = ckpt_ / "trainer" / "trainer_state.json";
  const std::string text = read_file(state);
  const size_t at = text.find("\"data_position\": 1003");
  ASSERT_NE(at, std::string::npos) << text;
  flip_byte(state, at + std::string("\"data_position\": 100").size(), 0x02);
  const std::string msg = load();
  EXPECT_NE(msg.find("trainer/trainer_state.json does not match its checksum"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { read_checkpoint_meta(ckpt_); }).find("trainer/trainer_state.json does not match"),
            std::string::npos);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove(ckpt_ / "trainer" / "checksums.json");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(read_checkpoint_meta(ckpt_).data_position, 1001u);  // what would have been resumed from
}

// config.json is the Hugging Face folder's, for the user to edit (transformers settings); the
// load does not read it, so an edit does not refuse a resume, but it is said (rank 0): a damaged
// one (emptied, cut, removed) would otherwise go unseen until a Hugging Face tool reads it.
TEST_F(ChecksumsTest, AnEditedConfigJsonStillLoadsWithAWarning) {
  const fs::path config = ckpt_ / "config.json";
  const std::string text = read_file(config);
  const size_t at = text.find("\"torch_dtype\": \"float32\"");
  ASSERT_NE(at, std::string::npos) << text;
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    std::string edited = text;
    edited.replace(at, std::string("\"torch_dtype\": \"float32\"").size(), "\"torch_dtype\": \"bfloat16\"");
    write_file(config, edited);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_NE(read_file(config), text);
  const std::string changed = "checkpoint '" + ckpt_.string() + "': config.json ";
  const std::string tail = "; echo does not read it (trainer/trainer_state.json holds the config), but Hugging Face "
                           "tools loading this folder do";
  const auto warned = [&](const std::string& what) {
    echo::testing::LogCapture log;
    EXPECT_EQ(load(), "") << what;
    const bool said = log.text().find(changed + what + tail) != std::string::npos;
    EXPECT_EQ(said, world_rank() == 0) << what << ": " << log.text();
  };
  warned("does not match its checksum (edited or damaged)");
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove(config);
  MPI_Barrier(MPI_COMM_WORLD);
  warned("is missing or not a file");
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) write_file(config, text);
  MPI_Barrier(MPI_COMM_WORLD);
  echo::testing::LogCapture log;
  EXPECT_EQ(load(), "");
  EXPECT_EQ(log.text().find("config.json"), std::string::npos) << "the saved text is no change: " << log.text();
}

TEST_F(ChecksumsTest, ACheckpointWithoutChecksumsLoads) { EXPECT_EQ(load_without_checksums(), ""); }

// A state that records consumed_samples (2026-12-06) was written by a trainer that writes checksums
// (2026-12-02): without checksums.json the file was removed, and the tensors cannot be verified.
TEST_F(ChecksumsTest, ACurrentCheckpointWhoseChecksumsWereRemovedIsRefused) {
  const fs::path state = ckpt_ / "trainer" / "trainer_state.json";
  const std::string text = read_file(state);
  const size_t at = text.find("\"data_position\"");
  ASSERT_NE(at, std::string::npos) << text;
  // Either field marks a current trainer's state; the refusal names the one recorded.
  for (const auto& [field, entry] :
       {std::pair<std::string, std::string>{"consumed_samples", "\"consumed_samples\": 1003, "},
        {"train_data_xxh3", "\"train_data_xxh3\": \"0123456789abcdef\", "}}) {
    SCOPED_TRACE(field);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::ofstream(state, std::ios::trunc) << text.substr(0, at) + entry + text.substr(at);
    const std::string want = "checkpoint '" + ckpt_.string() + "' has no trainer/checksums.json, but its trainer " +
                             "state records " + field + ", which only trainers that write checksums record";
    const std::string msg = load_without_checksums(/*corrupted=*/true);
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    // The resume's first look at a checkpoint (before the data scan) refuses it too.
    const std::string first_look = error_of([&] { read_checkpoint_meta(ckpt_.string()); });
    EXPECT_NE(first_look.find(want), std::string::npos) << first_look;
  }
}

TEST_F(ChecksumsTest, MalformedOrIncompleteChecksumsAreRefused) {
  const fs::path path = ckpt_ / "trainer" / "checksums.json";
  const std::string good = read_file(path);
  nlohmann::json j = nlohmann::json::parse(good);
  nlohmann::json missing = j, extra = j;
  missing["files"]["model.safetensors"]["tensors"].erase("model.norm.weight");
  extra["files"]["trainer/optimizer.safetensors"]["tensors"]["model.extra.weight.exp_avg"] = "0123456789abcdef";
  const std::pair<std::string, std::string> cases[] = {
      {good.substr(0, good.size() / 3), "checksums.json' is not valid JSON"},
      {std::string("\x01\xff garbage \x00 bytes", 18), "checksums.json' is not valid JSON"},
      {"{}", "checksums.json' is malformed: 'format' is not"},
      {missing.dump(), "has no checksum for tensor 'model.norm.weight' of model.safetensors"},
      {extra.dump(), "lists tensor 'model.extra.weight.exp_avg' of trainer/optimizer.safetensors, which the file "
                     "does not hold"},
  };
  for (const auto& [text, needle] : cases) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) write_file(path, text);
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string msg = load();
    EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
  }
}

// Tensor 1 of model.safetensors (data order) is hashed by world rank 1 alone; its mismatch must
// still reach every rank as the same error, reported by rank 1.
TEST_F(ChecksumsTest, AMismatchInRank1sShareIsReportedOnEveryRank) {
  const fs::path model = ckpt_ / "model.safetensors";
  const std::string tensor = SafetensorsFile(model.string()).names().at(1);
  flip_byte(model, middle_of(model, tensor), 0x01);
  const std::string msg = load();
  EXPECT_NE(msg.find("tensor '" + tensor + "' in model.safetensors does not match its checksum"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(fmt::format("(reported by rank 1 of {})", world_size())), std::string::npos) << msg;
}

TEST_F(ChecksumsTest, HuggingFaceLoadOfOurCheckpointVerifiesTheModel) {
  dist::World world = dist::World::create(world_size());
  {
    Shard s(cfg_, world_size(), world.layout.tp_rank);
    load_hf_weights(ckpt_.string(), s.params, world);
    expect_matches(s, ref_, false, 0);
  }
  const std::string tensor = "model.embed_tokens.weight";
  flip_byte(ckpt_ / "model.safetensors", middle_of(ckpt_ / "model.safetensors", tensor), 0x01);
  for (const fs::path& path : {ckpt_, ckpt_ / "model.safetensors"}) {
    Shard s(cfg_, world_size(), world.layout.tp_rank);
    const std::string msg = error_of([&] { load_hf_weights(path.string(), s.params, world); });
    EXPECT_NE(msg.find("cannot load Hugging Face weights: '" + ckpt_.string() + "': tensor '" + tensor +
                       "' in model.safetensors does not match its checksum"),
              std::string::npos)
        << msg;
  }
}

// With data parallelism the hashing is still split over the world, not over a tensor-parallel
// group: at each tp below the world size (np 2: tp 1; np 4: tp 1 and 2), the tensor in data
// position k of the load (the model file's, then the optimizer file's counted on from them) is
// hashed by world rank k % P alone. A changed tensor in each rank's share (the last of its share
// in each file) is found by that rank, so the agreed error names it and is reported by it, the
// same on every rank. For a rank >= tp this is not the lowest rank with the same tp rank, the one
// a share by tp rank would name.
TEST_F(ChecksumsTest, WithDataParallelismEachTensorIsHashedByItsWorldRank) {
  const int P = world_size();
  const fs::path model = ckpt_ / "model.safetensors", opt = ckpt_ / "trainer" / "optimizer.safetensors";
  const std::vector<std::string> model_names = SafetensorsFile(model.string()).names();
  const std::vector<std::string> opt_names = SafetensorsFile(opt.string()).names();
  const size_t num_model = model_names.size(), np = static_cast<size_t>(P);
  ASSERT_GE(num_model, np);
  // NOTE: only then does the optimizer case tell items counted on from the model file's from
  // items counted from 0 again.
  EXPECT_NE(num_model % np, 0u) << "pick a config whose model tensor count does not divide by " << P;
  // The last of `names` (its items counted on from `first_item`) in world rank `rank`'s share.
  auto last_of_share = [&](const std::vector<std::string>& names, size_t first_item, int rank) {
    size_t i = names.size() - 1;
    while ((first_item + i) % np != static_cast<size_t>(rank)) --i;
    return names.at(i);
  };
  for (int tp = 1; tp < P; tp *= 2) {
    if (P % tp) continue;
    SCOPED_TRACE(fmt::format("loaded at tp = {}, dp = {}", tp, P / tp));
    EXPECT_EQ(load(false, tp), "");
    for (int rank = 0; rank < P; ++rank) {
      const std::pair<fs::path, std::string> targets[] = {{model, last_of_share(model_names, 0, rank)},
                                                          {opt, last_of_share(opt_names, num_model, rank)}};
      for (const auto& [path, tensor] : targets) {
        SCOPED_TRACE(fmt::format("tensor '{}' (rank {}'s)", tensor, rank));
        const uint64_t at = middle_of(path, tensor);
        flip_byte(path, at, 0x01);
        const std::string msg = load(/*corrupted=*/true, tp);
        flip_byte(path, at, 0x01);  // back as saved
        EXPECT_NE(msg.find(fmt::format("tensor '{}' in {} does not match its checksum", tensor,
                                       fs::relative(path, ckpt_).string())),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find(fmt::format("(reported by rank {} of {})", rank, P)), std::string::npos) << msg;
      }
    }
    EXPECT_EQ(load(false, tp), "");  // every byte is back
  }
}

// load_hf_weights splits its hashing over the world too: with data parallelism, the last rank's
// tensor is found by the last rank (not by the lowest rank with its tp rank).
TEST_F(ChecksumsTest, HuggingFaceLoadWithDataParallelismHashesByWorldRank) {
  const int P = world_size();
  const fs::path model = ckpt_ / "model.safetensors";
  const std::string tensor = SafetensorsFile(model.string()).names().at(static_cast<size_t>(P - 1));
  flip_byte(model, middle_of(model, tensor), 0x01);
  for (int tp = 1; tp < P; tp *= 2) {
    if (P % tp) continue;
    SCOPED_TRACE(fmt::format("loaded at tp = {}, dp = {}", tp, P / tp));
    dist::World world = dist::World::create(tp);
    Shard s(cfg_, tp, world.layout.tp_rank);
    const std::string msg = error_of([&] { load_hf_weights(ckpt_.string(), s.params, world); });
    EXPECT_NE(msg.find("cannot load Hugging Face weights: '" + ckpt_.string() + "': tensor '" + tensor +
                       "' in model.safetensors does not match its checksum"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(fmt::format("(reported by rank {} of {})", P - 1, P)), std::string::npos) << msg;
    EXPECT_TRUE(same_on_every_rank(msg));
  }
}

}  // namespace
}  // namespace echo::train
