// same_file: one file under every spelling (".", "..", relative and absolute, a symlinked
// directory, a symlink, a hard link), existing or still to be created; distinct files are not.
#include "core/same_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "../support/scratch_dir.h"

namespace echo {
namespace {

namespace fs = std::filesystem;

class SameFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path("d"));
    dir_.write("d/a", "a");
    dir_.write("d/b", "b");
  }
  std::string path(const std::string& name) const { return dir_.path(name); }
  echo::testing::ScratchDir dir_;
};

TEST_F(SameFileTest, SpellingsOfAnExistingFile) {
  EXPECT_TRUE(same_file(path("d/a"), path("d/a")));
  EXPECT_TRUE(same_file(path("d/a"), path("d/./a")));
  EXPECT_TRUE(same_file(path("d/a"), path("d/../d/a")));
  EXPECT_TRUE(same_file(path("d/a"), path("d//a")));
  EXPECT_FALSE(same_file(path("d/a"), path("d/b")));
  // Relative to the working directory.
  const fs::path cwd = fs::current_path();
  fs::current_path(path("d"));
  EXPECT_TRUE(same_file("a", path("d/a")));
  EXPECT_TRUE(same_file("./a", "a"));
  EXPECT_FALSE(same_file("a", "b"));
  fs::current_path(cwd);
}

TEST_F(SameFileTest, PathsNotCreatedYet) {
  EXPECT_TRUE(same_file(path("d/new.bin"), path("d/./new.bin")));
  EXPECT_TRUE(same_file(path("d/new.bin"), path("d/../d/new.bin")));
  EXPECT_TRUE(same_file(path("nodir/sub/x"), path("nodir/./sub/x")));  // no directory exists yet
  EXPECT_FALSE(same_file(path("d/new.bin"), path("d/new.idx")));
  EXPECT_FALSE(same_file(path("d/new.bin"), path("d/a")));
  // Relative names of files not created yet, in the working directory: "x" and "./x" (libstdc++'s
  // weakly_canonical left the first relative and made the second absolute: echo_eval's --json and
  // --dump-batch, echo_depth's --json and --csv wrote one file, losing the other).
  const fs::path cwd = fs::current_path();
  fs::current_path(path("d"));
  EXPECT_TRUE(same_file("zz.json", "./zz.json"));
  EXPECT_TRUE(same_file("zz.json", path("d/zz.json")));
  EXPECT_TRUE(same_file("sub/zz.json", "./sub/../sub/zz.json"));
  EXPECT_FALSE(same_file("zz.json", "./zz.csv"));
  fs::current_path(cwd);
}

// A dangling symbolic link is where a write through it creates its target.
TEST_F(SameFileTest, ADanglingLinkIsItsTarget) {
  fs::create_symlink(path("d/target.json"), path("dangling"));
  fs::create_symlink("target.json", path("d/relative_dangling"));
  fs::create_symlink(path("dangling"), path("chain"));
  EXPECT_TRUE(same_file(path("dangling"), path("d/target.json")));
  EXPECT_TRUE(same_file(path("d/relative_dangling"), path("d/./target.json")));
  EXPECT_TRUE(same_file(path("chain"), path("d/target.json")));
  EXPECT_FALSE(same_file(path("dangling"), path("d/other.json")));
}

TEST_F(SameFileTest, SymlinksAndHardLinks) {
  fs::create_directory_symlink(path("d"), path("link_to_d"));
  EXPECT_TRUE(same_file(path("link_to_d/a"), path("d/a")));
  EXPECT_TRUE(same_file(path("link_to_d/new.bin"), path("d/new.bin")));  // through the link, not created
  fs::create_symlink(path("d/a"), path("sym_a"));
  EXPECT_TRUE(same_file(path("sym_a"), path("d/a")));
  fs::create_hard_link(path("d/a"), path("hard_a"));
  EXPECT_TRUE(same_file(path("hard_a"), path("d/a")));
  EXPECT_TRUE(same_file(path("d/a"), path("hard_a")));
  EXPECT_FALSE(same_file(path("hard_a"), path("d/b")));
}

TEST_F(SameFileTest, UnresolvablePathsDoNotThrow) {
  fs::create_symlink(path("loop2"), path("loop1"));
  fs::create_symlink(path("loop1"), path("loop2"));
  EXPECT_TRUE(same_file(path("loop1/x"), path("loop1/x")));
  EXPECT_FALSE(same_file(path("loop1/x"), path("d/a")));
  EXPECT_FALSE(same_file(path("loop1"), path("loop2")));
}

// is_inside: at any depth and under any spelling of either path; the directory itself, a sibling
// whose name extends the directory's ("d2" beside "d") and the parent are not inside.
TEST_F(SameFileTest, InsideADirectory) {
  fs::create_directories(path("d/sub"));
  fs::create_directories(path("d2"));
  dir_.write("d/sub/c", "c");
  EXPECT_TRUE(is_inside(path("d/a"), path("d")));
  EXPECT_TRUE(is_inside(path("d/sub/c"), path("d")));
  EXPECT_TRUE(is_inside(path("d/sub/not_yet"), path("d")));
  EXPECT_TRUE(is_inside(path("d2/../d/./a"), path("d/sub/..")));
  EXPECT_TRUE(is_inside(path("d/a"), path("d") + "/"));
  EXPECT_FALSE(is_inside(path("d"), path("d")));
  EXPECT_FALSE(is_inside(path("d2/x"), path("d")));
  EXPECT_FALSE(is_inside(path("d"), path("d/sub")));
  ASSERT_EQ(::symlink(path("d").c_str(), path("link").c_str()), 0);
  EXPECT_TRUE(is_inside(path("link/a"), path("d")));
  EXPECT_TRUE(is_inside(path("d/a"), path("link")));
  // A Hugging Face cache: the snapshot's files are links into ../blobs. A link in the folder is
  // inside it (writing to it would overwrite the blob), and so is a link elsewhere into it.
  fs::create_directories(path("blobs"));
  dir_.write("blobs/abc", "weights");
  ASSERT_EQ(::symlink("../blobs/abc", path("d/model.safetensors").c_str()), 0);
  EXPECT_TRUE(is_inside(path("d/model.safetensors"), path("d")));
  ASSERT_EQ(::symlink(path("d/a").c_str(), path("d2/to_a").c_str()), 0);
  EXPECT_TRUE(is_inside(path("d2/to_a"), path("d")));
  // An empty directory (the parent of a bare file name) holds nothing.
  EXPECT_FALSE(is_inside(path("d/a"), ""));
  EXPECT_FALSE(is_inside("", path("d")));
}

}  // namespace
}  // namespace echo
