// Fuzz test of the safetensors reader: a few hundred seeded mutants of a valid file (the header
// JSON mutated with its length fixed up, or the raw file bytes) each end in success or in an
// echo::InputError, never a signal, a hang or another exception. An accepted file is read whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz/fuzz_util.h"
#include "train/checkpoint/safetensors.h"

namespace echo::train {
namespace {

namespace fs = std::filesystem;
using fuzz::slurp;
using fuzz::spit;

// Opens `path` and reads every tensor, converting the floating ones.
void read_everything(const std::string& path) {
  const SafetensorsFile f(path);
  for (const std::string& name : f.names()) {
    const StTensorInfo& info = f.info(name);
    ASSERT_EQ(f.bytes(name).size(), static_cast<size_t>(info.numel()) * st_dtype_size(info.dtype)) << name;
    const bool floating = info.dtype == StDtype::f32 || info.dtype == StDtype::bf16 || info.dtype == StDtype::f16 ||
                          info.dtype == StDtype::f64;
    if (floating) {
      ASSERT_EQ(f.read_f32(name).size(), static_cast<size_t>(info.numel())) << name;
    }
  }
}

TEST(SafetensorsFuzz, MutantsEndInSuccessOrInputError) {
  const fs::path dir = fs::temp_directory_path() / ("echo_safetensors_fuzz_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string seed_path = (dir / "seed.safetensors").string();
  const std::vector<float> a = {1, -2, 3, 0.5f, 7, 8, -9, 10, 11, 12, 13, 14}, b = {1, 2, 3, 4, 5}, c = {};
  write_safetensors(seed_path,
                    {{"a", StDtype::f32, {3, 4}},
                     {"b", StDtype::bf16, {5}},
                     {"c", StDtype::f16, {0, 2}},
                     {"d", StDtype::f64, {1, 5}}},
                    {a, b, c, b}, {{"format", "pt"}});
  const std::string seed = slurp(seed_path);
  read_everything(seed_path);  // the seed itself is valid

  uint64_t header_len = 0;
  std::memcpy(&header_len, seed.data(), 8);
  const std::string header = seed.substr(8, header_len), data = seed.substr(8 + header_len);
  const std::vector<std::string> tokens = {R"("shape")",
                                           R"("dtype")",
                                           R"("data_offsets")",
                                           R"("__metadata__")",
                                           R"("F32")",
                                           R"("BF16")",
                                           R"("I64")",
                                           R"("F8_E4M3")",
                                           "18446744073709551615",
                                           "18446744073709551616",
                                           "9223372036854775807",
                                           "4611686018427387904",
                                           "-1",
                                           "1.5",
                                           "1e308",
                                           "[]",
                                           "{}",
                                           "null",
                                           "[0,0]",
                                           R"("\u0000")",
                                           "[[[[[[[[",
                                           "]]]]",
                                           ",",
                                           ":",
                                           "0"};
  const fs::path file = dir / "mutant.safetensors";

  // Half the mutants edit the header JSON and keep the length prefix right, so they get past
  // the framing and into the entry checks; the other half edit the raw file.
  const fuzz::Mutator header_mutator(header, tokens), file_mutator(seed, tokens);
  const fuzz::Outcome from_header = fuzz::run_mutants(header_mutator, 300, [&](const fuzz::Mutant& m) {
    std::string bytes(8, '\0');
    const uint64_t n = m.bytes.size();
    std::memcpy(bytes.data(), &n, 8);
    spit(file.string(), bytes + m.bytes + data);
    read_everything(file.string());
  });
  const fuzz::Outcome from_file = fuzz::run_mutants(file_mutator, 200, [&](const fuzz::Mutant& m) {
    spit(file.string(), m.bytes);
    read_everything(file.string());
  });
  fs::remove_all(dir);
  // The mutants reach both ends: some still parse, most are refused.
  std::printf("header mutants: %d accepted, %d refused; file mutants: %d accepted, %d refused\n",
              from_header.accepted, from_header.refused, from_file.accepted, from_file.refused);
  EXPECT_GT(from_header.accepted, 2);
  EXPECT_GT(from_header.refused, 100);
  EXPECT_GT(from_file.refused, 100);
}

}  // namespace
}  // namespace echo::train
