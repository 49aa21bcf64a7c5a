// Writing an output file so that a reader (or a later run) never sees half of it: the bytes go to
// a temp file beside the target, are synced, and the temp file is renamed over the target; a
// failure or a kill at any point leaves the old file (or none) and no truncated result that looks
// like one. Also the fsync helper the checkpoint and dataset writers use.
#pragma once

#include <string>
#include <string_view>

namespace echo {

// fsync(2) of a file or a directory (a directory after a rename in it, so the new name is on disk
// too); a RunError "cannot sync '<path>' to disk: <why>" otherwise.
void fsync_path(const std::string& path, bool directory);
// The same for a descriptor already open (a file being written), `path` naming it in the error.
void fsync_fd(int fd, const std::string& path);

// Writes `bytes` to `path` through `path`.tmp: written, synced, renamed over `path`, and the
// directory synced. `what` starts the error messages and names the file ("--json out.json"). A `path` that is a
// directory, or a temp name held by something other than a regular file, is refused (InputError)
// before anything is written; a failure removes the temp file and leaves any old file intact. A
// symbolic link is followed (the file it names is replaced, the link stays); an existing target
// that is not a regular file (/dev/stdout, a FIFO) is written in place, as there is nothing to
// rename over. The new file has the usual mode (0666 less the umask).
void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what);

}  // namespace echo
