// A scratch directory for one test: fresh, named after the running test and unique to this
// process and directory, removed (with everything in it) when it goes out of scope.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

namespace echo::testing {

// Hold one as a fixture member or a local of the test body (the test's name is read when it is
// built). path() and write() take a name relative to the directory; write() creates no folders.
class ScratchDir {
 public:
  ScratchDir() {
    // A death test in the threadsafe style re-runs the test body in a child that dies without
    // running destructors, so a directory of its own would be left behind: the child works in
    // its parent's, which the parent removes.
    if (!GTEST_FLAG_GET(internal_run_death_test).empty()) {
      if (const char* parents = std::getenv(kParentDirVariable)) {
        root_ = parents;
        owned_ = false;
        return;
      }
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "_" + info->name() : "no_test";
    for (char& c : name)  // a parameterised test's "Suite/Name/0" is one folder, not three
      if (c == '/') c = '_';
    // NOTE: mkdtemp, not a fixed name removed and re-created: two runs of one test at once (build
    // trees sharing /tmp) or two directories in one test never share, nor remove, each other's.
    std::string tmpl =
        (std::filesystem::temp_directory_path() / ("echo_" + name + "_" + std::to_string(::getpid()) + "_XXXXXX"))
            .string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::filesystem::filesystem_error("mkdtemp", tmpl, std::error_code(errno, std::generic_category()));
    root_ = tmpl;
    ::setenv(kParentDirVariable, root_.c_str(), 1);
  }
  ~ScratchDir() {
    std::error_code ec;
    if (owned_) std::filesystem::remove_all(root_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // The directory itself.
  const std::filesystem::path& root() const { return root_; }
  std::string str() const { return root_.string(); }
  // `name` inside the directory (nothing is created).
  std::string path(const std::string& name) const { return (root_ / name).string(); }
  // Writes `text` (bytes, as is) to `name`, replacing it; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) ADD_FAILURE() << "cannot write " << p;
    return p;
  }

 private:
  static constexpr const char* kParentDirVariable = "ECHO_TEST_SCRATCH_DIR";
  std::filesystem::path root_;
  bool owned_ = true;
};

// Removes `path` with everything in it when the process exits normally (after main returns):
// for a directory the ranks of an MPI test share, which must outlive every test that uses it.
inline void remove_at_exit(const std::filesystem::path& path) {
  struct Removals {
    std::vector<std::filesystem::path> paths;
    ~Removals() {
      std::error_code ec;
      for (const auto& p : paths) std::filesystem::remove_all(p, ec);
    }
  };
  static Removals removals;
  removals.paths.push_back(path);
}

}  // namespace echo::testing
