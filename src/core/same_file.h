// Whether two paths name one file, however they are spelled: for refusing a run whose output
// would overwrite its own input (echo_prep) before anything is written.
#pragma once

#include <filesystem>

namespace echo {

// True when `a` and `b` lead to the same place once symbolic links, "." and ".." are resolved
// (std::filesystem::weakly_canonical, so a path that does not exist yet compares by where it
// would be created, through the directories that do), or when both exist and are one file under
// two names (std::filesystem::equivalent: hard links). Never throws: a path that cannot be
// resolved (a looping link, an unreadable directory) compares by its absolute, lexically normal
// spelling.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// True when `path` lies inside the directory `dir` (at any depth; `dir` itself is not inside),
// both resolved as same_file resolves them, where `path` counts by its own location (a symbolic
// link in `dir` is inside, wherever it points) and by what it resolves to. An empty path or
// directory is inside nothing. For refusing outputs that would overwrite a file of a checkpoint
// folder, whatever its name.
bool is_inside(const std::filesystem::path& path, const std::filesystem::path& dir);

}  // namespace echo
