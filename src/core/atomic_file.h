// Writing an output file so that a reader (or a later run) never sees half of it: the bytes go to
// a temp file beside the target, are synced, and the temp file is renamed over the target; a
// failure or a kill at any point leaves the old file (or none) and no truncated result that looks
// like one. Also the fsync helper the checkpoint and dataset writers use.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace echo {

// fsync(2) of a file or a directory (a directory after a rename in it, so the new name is on disk
// too); a RunError "cannot sync '<path>' to disk: <why>" otherwise.
void fsync_path(const std::string& path, bool directory);
// The same for a descriptor already open (a file being written), `path` naming it in the error.
void fsync_fd(int fd, const std::string& path);

// Creates `path` anew for writing ("wb"), for a temporary name that belongs to the writer: what is
// there first (a killed run's file, a symbolic or hard link planted at the name, a FIFO) is
// unlinked, never followed, opened or truncated, so no other file can be overwritten through the
// name. A RunError naming `path` when it cannot be made (a directory is there, no permission).
std::FILE* create_fresh_file(const std::string& path);

// The descriptor of this process that `path` names, or -1: /dev/stdin, /dev/stdout, /dev/stderr,
// /dev/fd/N, /proc/self/fd/N, /proc/thread-self/fd/N or /proc/<this pid>/fd/N of an open N, taken
// lexically (absolute, normalized, links not followed); or a path that is the very file, pipe or
// device standard output or standard error is (a link to /dev/stdout, the file stdout is
// redirected to).
int own_descriptor_named(const std::string& path);

// True when `path` is a stream rather than a file to replace: one of this process's descriptors
// (own_descriptor_named), another process's /proc/<pid>/fd/N, or an existing target that is neither
// a regular file nor a directory (a FIFO, /dev/null). A regular file is a file wherever it lies
// (/dev/shm too). A caller that rewrites its output whole after every row writes a stream row by
// row instead (StreamOutput).
bool writes_in_place(const std::string& path);

// An output for which writes_in_place() holds, opened once and written in order. One of this
// process's descriptors is written through that descriptor after stdio is flushed, so the bytes
// land in order with what the program prints, at the descriptor's own position. NOTE: opening
// /dev/stdout again, when it is redirected to a file, would write at another offset, and the
// program's later output would overwrite it. Anything else is opened for appending, without
// waiting: a FIFO no one reads is an error, not a hang.
class StreamOutput {
 public:
  // `what` starts the error messages ("--json /dev/stdout").
  StreamOutput(const std::string& path, std::string what);
  ~StreamOutput();
  StreamOutput(const StreamOutput&) = delete;
  StreamOutput& operator=(const StreamOutput&) = delete;
  // All of `bytes`, or a RunError naming `what`.
  void write(std::string_view bytes);

 private:
  int fd_ = -1;
  bool owned_ = false;  // opened here (closed by the destructor), not one of the process's own
  std::string what_;
};

// Writes `bytes` to `path` through a unique temp file beside it (`path`.tmp.XXXXXX): written,
// synced, given the mode of the file it replaces (0666 less the umask for a new one), renamed
// over `path`, and the directory synced. `what` starts the error messages and names the file
// ("--json out.json"). A `path` that is a directory, or named as one ("out.json/"), is refused
// (InputError) before anything is written; a failure removes the temp file and leaves any old file
// intact. A symbolic link is followed (the file it names is replaced, or made where a dangling link
// points; the link stays). A target for which writes_in_place()
// holds is written in place as a StreamOutput: there is nothing to rename over. NOTE: the directory must be
// writable (a writable file in a read-only directory cannot be replaced this way).
void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what);

// Why write_file_atomic(path) would fail before writing a byte, or "": `path` is a directory or
// named as one, a link loop, its folder (the link's target's, for a link) does not exist or is not
// writable (the temp file is made there), or a stream target cannot be opened for writing (a FIFO
// no one reads: the open would wait; one that is read is kept open until the process ends, so
// its reader does not see end-of-file before the result). For a program to refuse an output before a long computation
// instead of losing its result at the end (echo_eval --json). The file system can still refuse
// later (full, a race).
std::string why_not_writable(const std::string& path);

}  // namespace echo
