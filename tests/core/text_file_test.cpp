// read_text_file / try_read_text_file: every byte back (NULs and high bytes included), the size
// bound at its exact edge, and each refusal (missing, a directory, too large, a non-regular file
// past the bound) named; read_untrusted_json_file names the file in a parse error; is_absent only
// for nothing at the name.
#include "core/text_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "core/json_guard.h"
#include "../support/scratch_dir.h"
#include "../support/test_util.h"

namespace echo {
namespace {

using testing::kind_and_what_of;

class TextFileTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes) { return dir_.write(name, bytes); }
  echo::testing::ScratchDir dir_;
};

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

TEST_F(TextFileTest, ReturnsEveryByte) {
  // 200,003 bytes: more than the 64 KiB read chunk, not a multiple of it.
  const std::string bytes = random_bytes(200003, static_cast<unsigned>(::getpid()));
  ASSERT_NE(bytes.find('\0'), std::string::npos);
  EXPECT_EQ(read_text_file(write("r.bin", bytes), "r"), bytes);
  EXPECT_EQ(read_text_file(write("empty", ""), "empty"), "");
}

TEST_F(TextFileTest, TheBoundIsInclusive) {
  const std::string bytes = random_bytes(1000, 7);
  const std::string path = write("b.bin", bytes);
  EXPECT_EQ(read_text_file(path, "b", 1000), bytes);
  EXPECT_EQ(kind_and_what_of([&] { read_text_file(path, "sidecar 'b'", 999); }),
            "input: cannot read sidecar 'b': it is larger than 999 bytes");
}

TEST_F(TextFileTest, RefusalsNameTheFileAndTheReason) {
  const std::string missing = dir_.path("missing.json");
  EXPECT_EQ(kind_and_what_of([&] { read_text_file(missing, "tokenizer.json 'm'"); }),
            "input: cannot read tokenizer.json 'm': No such file or directory");
  // An ifstream would open the directory and read nothing: an empty file, silently.
  EXPECT_EQ(kind_and_what_of([&] { read_text_file(dir_.str(), "config 'd'"); }),
            "input: cannot read config 'd': it is a directory");
  std::string why;
  EXPECT_FALSE(try_read_text_file(std::string(5000, 'x'), why).has_value());
  EXPECT_EQ(why, "File name too long");
}

TEST_F(TextFileTest, OnlyRegularFilesAreRead) {
  // A FIFO without a writer used to block in open(); /dev/zero used to fill the memory.
  const std::string fifo = dir_.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(kind_and_what_of([&] { read_text_file(fifo, "config 'f'"); }),
            "input: cannot read config 'f': it is not a regular file");
  EXPECT_EQ(kind_and_what_of([&] { read_text_file("/dev/zero", "tokenizer.json 'z'"); }),
            "input: cannot read tokenizer.json 'z': it is not a regular file");
}

// is_absent, what lets a caller skip an optional file, holds only when nothing is at the name:
// a directory, a FIFO, a dangling symbolic link or a name too long to look at are all there, for
// read_text_file to refuse with its reason.
TEST_F(TextFileTest, OnlyNothingAtTheNameIsAbsent) {
  EXPECT_TRUE(is_absent(dir_.path("missing.json")));
  EXPECT_TRUE(is_absent(dir_.path("missing/inside.json")));
  EXPECT_TRUE(is_absent(write("file", "x") + "/inside.json"));  // a parent that is a file
  EXPECT_FALSE(is_absent(dir_.path("file")));
  EXPECT_FALSE(is_absent(dir_.str()));
  const std::string fifo = dir_.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(is_absent(fifo));
  const std::string link = dir_.path("dangling");
  ASSERT_EQ(::symlink(dir_.path("nowhere").c_str(), link.c_str()), 0);
  EXPECT_FALSE(is_absent(link));
  EXPECT_FALSE(is_absent(std::string(5000, 'x')));
}

// A symbolic link that is there but leads nowhere, or round in a loop, says so: it read "No such
// file or directory" (as if nothing were there) or "does not exist" in its callers.
TEST_F(TextFileTest, AnUnresolvableLinkSaysWhatItIs) {
  const std::string file = write("file", "x");
  EXPECT_EQ(why_unresolvable(file), "");
  EXPECT_EQ(why_unresolvable(dir_.str()), "");
  const std::string dangling = dir_.path("dangling"), loop = dir_.path("loop");
  ASSERT_EQ(::symlink(dir_.path("nowhere").c_str(), dangling.c_str()), 0);
  ASSERT_EQ(::symlink(loop.c_str(), loop.c_str()), 0);
  const std::string to_nowhere = "it is a symbolic link to '" + dir_.path("nowhere") + "', which does not exist";
  EXPECT_EQ(why_unresolvable(dangling), to_nowhere);
  EXPECT_EQ(why_unresolvable(loop), "it is a symbolic-link loop (too many levels of symbolic links)");
  EXPECT_EQ(kind_and_what_of([&] { read_text_file(dangling, "config 'l'"); }),
            "input: cannot read config 'l': " + to_nowhere);
  EXPECT_EQ(kind_and_what_of([&] { read_text_file(loop, "config 'l'"); }),
            "input: cannot read config 'l': it is a symbolic-link loop (too many levels of symbolic links)");
}

// A name a caller needs: nothing there "does not exist" with the caller's hint; a link that leads
// nowhere or loops "cannot be resolved" with what it is; a file, a directory or a good link pass.
TEST_F(TextFileTest, ARequiredNameIsThereAndResolvable) {
  const std::string file = write("file", "x"), link = dir_.path("link"), dangling = dir_.path("dangling");
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  ASSERT_EQ(::symlink(dir_.path("nowhere").c_str(), dangling.c_str()), 0);
  for (const std::string& there : {file, link, dir_.str()})
    EXPECT_EQ(kind_and_what_of([&] { require_resolvable(there, "data 'd'", "; make it"); }), testing::kNoErrorThrown) << there;
  EXPECT_EQ(kind_and_what_of([&] { require_resolvable(dir_.path("missing.idx"), "data 'd'", "; make it"); }),
            "input: data 'd' does not exist; make it");
  EXPECT_EQ(kind_and_what_of([&] { require_resolvable(dir_.path("missing.idx"), "checkpoint 'c'"); }),
            "input: checkpoint 'c' does not exist");
  EXPECT_EQ(kind_and_what_of([&] { require_resolvable(dangling, "data 'd'", "; make it"); }),
            "input: data 'd' cannot be resolved: it is a symbolic link to '" + dir_.path("nowhere") +
                "', which does not exist");
}

TEST_F(TextFileTest, AProcFileIsReadToItsEndAndBounded) {
  // /proc files are regular but report size 0: read to their end, the bound applies to what is read.
  const std::string whole = read_text_file("/proc/self/cmdline", "cmdline");
  ASSERT_GT(whole.size(), 4u);
  std::string why;
  EXPECT_FALSE(try_read_text_file("/proc/self/cmdline", why, whole.size() - 1).has_value());
  EXPECT_EQ(why, "it is larger than " + std::to_string(whole.size() - 1) + " bytes");
}

TEST_F(TextFileTest, JsonFileErrorsNameTheFile) {
  EXPECT_EQ(read_untrusted_json_file(write("ok.json", R"({"a": [1, 2]})"), "x")["a"][1], 2);
  const std::string message = kind_and_what_of([&] { read_untrusted_json_file(write("bad.json", "{\"a\": "), "state 's'"); });
  EXPECT_EQ(message.rfind("input: state 's' is not valid JSON: ", 0), 0u) << message;
  // The parser's excerpt of damaged bytes is escaped (no invalid UTF-8 reaches a terminal or a log),
  // and its exception tag is not shown.
  const std::string damaged =
      kind_and_what_of([&] { read_untrusted_json_file(write("esc.json", "{\"a\": \"x\xff\"}"), "state 'e'"); });
  EXPECT_EQ(damaged.find("[json.exception"), std::string::npos) << damaged;
  EXPECT_EQ(damaged.find('\xff'), std::string::npos) << damaged;
  EXPECT_NE(damaged.find("\\xff"), std::string::npos) << damaged;
  EXPECT_EQ(kind_and_what_of([&] { read_untrusted_json_file(dir_.str(), "state 'd'"); }),
            "input: cannot read state 'd': it is a directory");
}

}  // namespace
}  // namespace echo
