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

// True when `path` is a stream rather than a file to replace: a path under /dev or /proc
// (/dev/stdout, also when redirected to a file) or an existing target that is neither a regular
// file nor a directory (a FIFO). Such a target is written once, in place, appending; a caller
// that rewrites its output whole after every row writes it row by row instead.
bool writes_in_place(const std::string& path);

// Writes `bytes` to `path` through a unique temp file beside it (`path`.tmp.XXXXXX): written,
// synced, given the mode of the file it replaces (0666 less the umask for a new one), renamed
// over `path`, and the directory synced. `what` starts the error messages and names the file
// ("--json out.json"). A `path` that is a directory is refused (InputError) before anything is
// written; a failure removes the temp file and leaves any old file intact. A symbolic link is
// followed (the file it names is replaced, the link stays). A target for which writes_in_place()
// holds is appended to in place: there is nothing to rename over. NOTE: the directory must be
// writable (a writable file in a read-only directory cannot be replaced this way).
void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what);

}  // namespace echo
