// echo_prep: text or JSON lines -> Megatron indexed datasets (prefix.bin + prefix.idx, int32
// token ids), like Megatron-LM's tools/preprocess_data.py.
//   echo_prep --input corpus/*.jsonl --format jsonl --tokenizer data/tokenizer/qwen3/tokenizer.json
//             --output-prefix data/demo/train --valid-prefix data/demo/valid --valid-fraction 0.05
// Inputs: --format jsonl reads one JSON object per line and takes its "text" field (--json-key);
// a file whose first character is '[' is read as one JSON array of strings (nlp-corpus's layout)
// or of such objects. --format text reads each file as one document (--text-split paragraph or
// line cuts it at blank lines or at every line). Documents are encoded on --threads threads in
// chunks and written in input order; each goes to the validation set when
// data::is_valid_document(index, valid_fraction, seed) says so. No EOS is stored: the data
// loader puts one after every document (--append-eos stores it, for Megatron's own loader; the
// sidecar records it, and echo's loader then packs the documents as stored).
// The EOS is the tokenizer's (tokenizer/hf_eos.h: a special added token <|endoftext|> ..., else
// tokenizer_config.json's eos_token, else refused), or the token --eos-token names; it is logged
// with its source so data.eos_id of the training config can be set to it. Beside each dataset
// goes PREFIX.meta.json (data/dataset_meta.h), recording the tokenizer, its vocabulary and that
// EOS, so that echo_train and echo_eval refuse a data.eos_id or model.vocab_size that does not fit.
// Refused before anything is written: an input that is one of the files the run writes, two
// prefixes that are one, a --valid-fraction of 0 or 1; a split that leaves one side without a
// document writes the other side and then fails (fail_empty_split).
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "apps/parse_command_line.h"
#include "apps/prep/json_array_stream.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/json_guard.h"
#include "core/log.h"
#include "core/remove_on_signal.h"
#include "core/same_file.h"
#include "core/sha256.h"
#include "core/text_file.h"
#include "data/dataset_meta.h"
#include "data/indexed_dataset.h"
#include "data/prefix_lock.h"
#include "data/split.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace echo::prep {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// --threads above this is refused: each thread is a real OS thread with its own stack and buffers,
// and an absurd count (--threads 100000) exhausts the machine instead of failing cleanly.
constexpr int kMaxThreads = 1024;

struct Options {
  std::vector<std::string> inputs;
  std::string format = "jsonl";
  std::string json_key = "text";
  std::string text_split = "file";
  std::string tokenizer;
  std::string output_prefix;
  std::string valid_prefix;
  double valid_fraction = 0.05;
  bool valid_fraction_set = false;
  int num_threads = 0;
  uint64_t seed = 1234;
  bool append_eos = false;
  std::string eos_token;  // empty: the tokenizer's own rule
  size_t chunk_mb = 16;
};

// Persistent worker threads; run(n, fn) calls fn(i) for every i in [0, n) across the workers
// and the calling thread and returns when all are done, rethrowing the first exception.
class WorkerPool {
 public:
  explicit WorkerPool(int num_threads) {
    for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this] { work_loop(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& w : workers_) w.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void run(size_t n, const std::function<void(size_t)>& fn) {
    {
      std::lock_guard lock(mutex_);
      fn_ = &fn;
      n_ = n;
      next_ = 0;
      busy_ = workers_.size();
      error_ = nullptr;
      ++generation_;
    }
    start_.notify_all();
    drain();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void drain() {
    for (size_t i; (i = next_.fetch_add(1)) < n_;) {
      try {
        (*fn_)(i);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
        next_ = n_;  // the others stop at their next item
      }
    }
  }
  void work_loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
      std::lock_guard lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  size_t busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

std::string read_file(const std::string& path) { return read_text_file(path, fmt::format("input '{}'", path)); }

// 1-based line of byte `offset` in `text`.
size_t line_of(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

// nlohmann's parser takes a NUL byte for the end of its input: the rest of a JSONL line, or of a
// whole JSON array file, was dropped with exit status 0. No JSON text holds a raw NUL (a string
// writes \u0000), so one is refused, by line and column. `text` starts at line `first_line`.
void refuse_nul(std::string_view text, const std::string& path, size_t first_line) {
  const size_t at = text.find('\0');
  if (at == std::string_view::npos) return;
  const size_t line_start = text.rfind('\n', at);
  const size_t column = at - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
  ECHO_INPUT_FAIL(
      "{}:{}: a NUL byte at column {}: JSON text cannot hold one (a string writes \\u0000); a file full of "
      "them is UTF-16 or UTF-32, which echo_prep does not read: convert it to UTF-8 (iconv -t UTF-8)",
      path, first_line + line_of(text, at) - 1, column);
}

// A UTF-16 or UTF-32 byte-order mark at the start of `head` (a file's first bytes): echo_prep
// reads UTF-8, and took such a file's letters and NULs as bytes with no word.
void refuse_utf16(std::string_view head, const std::string& path) {
  const bool utf16 = head.starts_with("\xFF\xFE") || head.starts_with("\xFE\xFF");
  const bool utf32 =
      head.starts_with(std::string_view("\xFF\xFE\0\0", 4)) || head.starts_with(std::string_view("\0\0\xFE\xFF", 4));
  ECHO_INPUT_CHECK(!utf16 && !utf32,
                   "input '{}' starts with a {} byte-order mark: echo_prep reads UTF-8; convert it first (iconv -f {} "
                   "-t UTF-8)",
                   path, utf32 ? "UTF-32" : "UTF-16", utf32 ? "UTF-32" : "UTF-16");
}

// --format text files are read whole, and a JSON array file's texts are all queued before the
// first is encoded: one larger than the memory available ended in a bare std::bad_alloc naming no
// file. `held` says what is held.
void refuse_larger_than_memory(const std::string& path, const char* held) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  const std::optional<size_t> available = host_memory_available_bytes();
  if (ec || !available || size <= *available) return;
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  ECHO_INPUT_FAIL(
      "input '{}' is {:.1f} GiB, more than the {:.1f} GiB of memory available: {}; split it into smaller files, "
      "or write it as JSONL (one JSON object a line), which is read line by line",
      path, static_cast<double>(size) / kGiB, static_cast<double>(*available) / kGiB, held);
}

// `text` with each CRLF and each lone CR made an LF.
std::string unix_line_endings(std::string text) {
  if (text.find('\r') == std::string::npos) return text;
  std::string lf;
  lf.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      lf += text[i];
      continue;
    }
    lf += '\n';
    if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
  }
  return lf;
}

// The text of one JSON document: a string, or an object's `key` string. `where` names it.
std::string text_of(const Json& value, const std::string& key, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  ECHO_INPUT_CHECK(value.is_object(), "{}: expected a JSON object with a \"{}\" field (or a string), got {}", where,
                   key, value.type_name());
  const auto it = value.find(key);
  ECHO_INPUT_CHECK(it != value.end(), "{}: no \"{}\" field", where, key);
  const std::string type = it->type_name();  // "number", "object", "array", "boolean", "null"
  ECHO_INPUT_CHECK(it->is_string(), "{}: \"{}\" is {} {}, not a string", where, key,
                   type == "object" || type == "array" ? "an" : "a", type);
  return it->get<std::string>();
}

// Yields the documents of all inputs in order, reading one file at a time (JSONL line by line).
class DocumentReader {
 public:
  explicit DocumentReader(const Options& o) : o_(o) {}

  // The next document, or nullopt after the last one. `bytes_read` counts input bytes consumed.
  std::optional<std::string> next() {
    for (;;) {
      if (!pending_.empty()) {
        std::string doc = std::move(pending_.front());
        pending_.pop_front();
        return doc;
      }
      if (jsonl_.is_open()) {
        std::string line;
        if (std::getline(jsonl_, line)) {
          ++line_no_;
          bytes_read_ += line.size() + 1;
          if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are no documents
          const std::string where = fmt::format("{}:{}", o_.inputs[file_idx_ - 1], line_no_);
          refuse_nul(line, o_.inputs[file_idx_ - 1], line_no_);
          Json value;
          try {
            value = Json::parse(line);
          } catch (const Json::exception& e) {
            // parse_error, and out_of_range for a number past double's range (1e400).
            ECHO_INPUT_FAIL("{}: malformed JSON line: {}", where, json_error_text(e));
          }
          return text_of(value, o_.json_key, where);
        }
        ECHO_INPUT_CHECK(!jsonl_.bad(), "{}: read error after line {}: {}", o_.inputs[file_idx_ - 1], line_no_,
                         std::strerror(errno));
        jsonl_.close();
      }
      if (file_idx_ == o_.inputs.size()) return std::nullopt;
      open(o_.inputs[file_idx_++]);
    }
  }
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  // A JSON array file's documents, queued: the file is parsed as a stream (one element's value at
  // a time), so it needs about its texts' size in memory, not the file's text and tree besides.
  void read_json_array(const std::string& path) {
    refuse_larger_than_memory(path, "a JSON array file's texts are all held in memory before they are encoded");
    std::ifstream in(path, std::ios::binary);
    ECHO_INPUT_CHECK(in.good(), "cannot read input '{}': {}", path, std::strerror(errno));
    std::optional<Json::parse_error> malformed;
    try {
      prep::for_each_array_element(in, [&](Json&& element, size_t i) {
        pending_.push_back(text_of(element, o_.json_key, fmt::format("{}: element {}", path, i)));
      });
    } catch (const Json::parse_error& e) {
      malformed.emplace(e);
    } catch (const Json::exception& e) {
      // out_of_range (a number past double's range) carries no position.
      ECHO_INPUT_FAIL("{}: malformed JSON array: {}", path, json_error_text(e));
    }
    ECHO_INPUT_CHECK(!in.bad(), "{}: read error: {}", path, std::strerror(errno));
    // The parser ends at a NUL byte outside a string (as at the end of the input) and fails at one
    // inside: either way the file is read again whole to name it (an error path only). A parse
    // that succeeded stopped at a NUL when bytes are left, or when the file's last byte is one.
    const auto last_byte_is_nul = [&] {
      std::ifstream tail(path, std::ios::binary | std::ios::ate);
      char last = 1;
      return tail.seekg(-1, std::ios::end) && tail.get(last) && last == '\0';
    };
    const bool stopped_early = !malformed && (in.peek() != std::char_traits<char>::eof() || last_byte_is_nul());
    if (malformed || stopped_early) {
      const std::string text = read_file(path);
      refuse_nul(text, path, 1);
      ECHO_INPUT_CHECK(!stopped_early, "{}: the JSON array's parse ended before the end of the file", path);
      ECHO_INPUT_FAIL("{}:{}: malformed JSON array: {}", path, line_of(text, malformed->byte),
                      json_error_text(*malformed));
    }
    std::error_code ec;
    bytes_read_ += std::filesystem::file_size(path, ec);
  }

  void open(const std::string& path) {
    if (o_.format == "jsonl") {
      // Peek at the first non-space byte after a UTF-8 byte-order mark (which the JSON parser
      // skips): '[' means the whole file is one JSON array.
      std::ifstream probe(path, std::ios::binary);
      ECHO_INPUT_CHECK(probe.good(), "cannot read input '{}': {}", path, std::strerror(errno));
      char head[4] = {};
      probe.read(head, 4);
      const std::string_view first(head, static_cast<size_t>(probe.gcount()));
      refuse_utf16(first, path);
      probe.clear();
      probe.seekg(first.starts_with("\xEF\xBB\xBF") ? 3 : 0);
      char c = 0;
      while (probe.get(c) && std::isspace(static_cast<unsigned char>(c))) {
      }
      probe.close();
      if (c == '[') {
        read_json_array(path);
        return;
      }
      jsonl_.open(path, std::ios::binary);
      ECHO_INPUT_CHECK(jsonl_.good(), "cannot read input '{}': {}", path, std::strerror(errno));
      line_no_ = 0;
      return;
    }
    refuse_larger_than_memory(path, "--format text reads a file whole");
    std::string text = read_file(path);
    bytes_read_ += text.size();
    refuse_utf16(text, path);
    if (o_.text_split == "file") {
      pending_.push_back(std::move(text));
      return;
    }
    // "line": every line that is not blank (only spaces and tabs); "paragraph": runs of lines between
    // blank lines. CRLF (Windows) and a lone CR (classic Mac OS) end a line as LF does: they were
    // kept as text, and a CR-only file was one document.
    std::istringstream lines(unix_line_endings(std::move(text)));
    std::string line, paragraph;
    const auto flush = [&] {
      if (!paragraph.empty()) pending_.push_back(std::move(paragraph));
      paragraph.clear();
    };
    while (std::getline(lines, line)) {
      const bool blank = line.find_first_not_of(" \t") == std::string::npos;
      if (o_.text_split == "line") {
        if (!blank) pending_.push_back(line);
      } else if (blank) {
        flush();
      } else {
        if (!paragraph.empty()) paragraph += '\n';
        paragraph += line;
      }
    }
    flush();
  }

  const Options& o_;
  size_t file_idx_ = 0;
  std::ifstream jsonl_;
  size_t line_no_ = 0;
  std::deque<std::string> pending_;
  uint64_t bytes_read_ = 0;
};

struct Totals {
  uint64_t documents = 0, empty = 0, train_documents = 0, valid_documents = 0;
  // Documents holding ill-formed UTF-8 (--format text; JSON parsing refuses it), the number of
  // ill-formed sequences in them, and the first such document's index.
  uint64_t invalid_utf8_documents = 0, invalid_utf8_sequences = 0, first_invalid_utf8 = 0;
  uint64_t tokens = 0, train_tokens = 0, valid_tokens = 0;
  double read_s = 0, encode_s = 0, write_s = 0;  // wall time of each phase
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One progress line on stderr: in place on a terminal, else a line every 10 s (CI logs).
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO) != 0), start_(Clock::now()), last_(start_) {}
  void update(const Totals& t, uint64_t bytes, bool final = false) {
    const auto now = Clock::now();
    if (!final && now - last_ < (tty_ ? std::chrono::milliseconds(500) : std::chrono::seconds(10))) return;
    last_ = now;
    const double s = std::max(1e-9, seconds());
    fmt::print(stderr, "{}echo_prep: {} documents, {} tokens, {:.1f} MB read, {:.2f} MB/s, {:.0f} tokens/s{}",
               tty_ ? "\r" : "", t.documents, t.tokens, static_cast<double>(bytes) / 1e6,
               static_cast<double>(bytes) / 1e6 / s, static_cast<double>(t.tokens) / s, tty_ && !final ? "" : "\n");
    std::fflush(stderr);
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  bool tty_;
  Clock::time_point start_, last_;
};

void create_parent(const std::string& prefix) {
  const std::filesystem::path parent = std::filesystem::path(prefix).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (!ec) return;
  // A dangling symbolic link in the way read as "File exists": say what it points at.
  std::error_code link_ec;
  for (std::filesystem::path p = parent; !p.empty() && p != p.parent_path(); p = p.parent_path()) {
    if (!std::filesystem::is_symlink(std::filesystem::symlink_status(p, link_ec))) continue;
    if (std::filesystem::exists(p, link_ec)) break;
    ECHO_INPUT_FAIL("cannot create directory '{}' for '{}': '{}' is a symbolic link to '{}', which does not exist",
                    parent.string(), prefix, p.string(), std::filesystem::read_symlink(p, link_ec).string());
  }
  ECHO_INPUT_FAIL("cannot create directory '{}' for '{}': {}", parent.string(), prefix, ec.message());
}

// A prefix must end in a file name: "dir/" would write the hidden files dir/.bin and dir/.idx.
void check_prefix(const std::string& option, const std::string& prefix) {
  ECHO_INPUT_CHECK(!prefix.empty(), "{} is required", option);
  const std::string name = std::filesystem::path(prefix).filename().string();
  ECHO_INPUT_CHECK(!name.empty() && name != "." && name != "..",
                   "{} '{}' has no file name: it would write '{}.bin' and '{}.idx'; give a name such as '{}'", option,
                   prefix, prefix, prefix, (std::filesystem::path(prefix) / "train").lexically_normal().string());
}

// Every file of the dataset at `prefix`, each with the option that named the prefix.
struct OutputFile {
  std::string path;
  std::string option;  // "--output-prefix 'data/train'"
};
std::vector<OutputFile> files_of(const std::string& option, const std::string& prefix) {
  std::vector<OutputFile> files;
  for (std::string& path : data::IndexedDatasetWriter::files_written(prefix))
    files.push_back({std::move(path), fmt::format("{} '{}'", option, prefix)});
  return files;
}

// Every file of this run's datasets: --output-prefix's, then --valid-prefix's.
std::vector<OutputFile> outputs_of(const Options& o) {
  std::vector<OutputFile> outputs = files_of("--output-prefix", o.output_prefix);
  if (!o.valid_prefix.empty())
    for (OutputFile& f : files_of("--valid-prefix", o.valid_prefix)) outputs.push_back(std::move(f));
  return outputs;
}

// The two prefixes must not share a file under two spellings ("d/x" and "d/./x", a symlinked
// directory): both writers would write one .bin.tmp, and the second rename leaves one half of the
// split without its sidecar.
void check_prefixes_differ(const Options& o) {
  for (const OutputFile& train : files_of("--output-prefix", o.output_prefix))
    for (const OutputFile& valid : files_of("--valid-prefix", o.valid_prefix))
      ECHO_INPUT_CHECK(!same_file(train.path, valid.path),
                       "--output-prefix '{}' and --valid-prefix '{}' name the same files ('{}' is '{}'): the "
                       "validation set would overwrite the training set; give --valid-prefix another name",
                       o.output_prefix, o.valid_prefix, train.path, valid.path);
}

// No file the run reads may be one it writes: the writer truncates its .tmp files at the start
// and renames over the others at the end, so such an input is lost (or read back empty) however
// its path is spelled. Checked before anything is written.
void check_inputs_are_not_outputs(const Options& o) {
  const std::vector<OutputFile> outputs = outputs_of(o);
  std::vector<std::pair<std::string, std::string>> reads;  // (role and path for messages, path)
  for (const std::string& path : o.inputs) reads.emplace_back(fmt::format("input '{}'", path), path);
  // The tokenizer is read whole before writing starts, but its file would be gone all the same.
  if (const std::string file = tokenizer::tokenizer_file(o.tokenizer); !file.empty())
    reads.emplace_back(fmt::format("--tokenizer file '{}'", file), file);
  for (const auto& [what, path] : reads)
    for (const OutputFile& out : outputs)
      ECHO_INPUT_CHECK(!same_file(path, out.path),
                       "{} is the file '{}' that {} writes: echo_prep would overwrite its own input; give another "
                       "prefix (nothing was written)",
                       what, out.path, out.option);
}

// One file given twice (or under two spellings) would be encoded twice: its documents doubled,
// and split across train and valid.
// By device and inode, so a glob of many thousands of files costs one stat each. A file that
// cannot be stat'ed is left to the reader, which names it.
void check_inputs_distinct(const Options& o) {
  std::map<std::pair<dev_t, ino_t>, const std::string*> seen;
  for (const std::string& path : o.inputs) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;
    const auto [it, added] = seen.emplace(std::pair{st.st_dev, st.st_ino}, &path);
    ECHO_INPUT_CHECK(added,
                     "--input '{}' and --input '{}' are the same file: its documents would be stored twice; give it "
                     "once",
                     *it->second, path);
  }
}

// A directory at one of the names the run writes or replaces (PREFIX.idx, .meta.json.tmp, ...) was
// found only after all the encoding, and at the sidecar's name after the .bin and .idx were
// already replaced: the old dataset lost its sidecar and the new one had none.
void check_outputs_are_files(const Options& o) {
  for (const OutputFile& out : outputs_of(o)) {
    std::error_code ec;
    ECHO_INPUT_CHECK(!std::filesystem::is_directory(std::filesystem::symlink_status(out.path, ec)),
                     "{} is a directory, where {} writes a file of its dataset; move it away", out.path, out.option);
  }
}

void validate(Options& o) {
  ECHO_INPUT_CHECK(!o.inputs.empty(), "--input: no files given");
  check_inputs_distinct(o);
  ECHO_INPUT_CHECK(o.format == "text" || o.format == "jsonl", "--format must be text or jsonl, got '{}'", o.format);
  check_prefix("--output-prefix", o.output_prefix);
  if (!o.valid_prefix.empty()) check_prefix("--valid-prefix", o.valid_prefix);
  if (o.valid_prefix.empty()) {
    ECHO_INPUT_CHECK(!o.valid_fraction_set,
                     "--valid-fraction needs --valid-prefix (where the validation documents go)");
    o.valid_fraction = 0.0;
  }
  ECHO_INPUT_CHECK(o.valid_fraction >= 0.0 && o.valid_fraction <= 1.0, "--valid-fraction must be in [0, 1], got {}",
                   o.valid_fraction);
  if (!o.valid_prefix.empty()) {
    // NOTE: either end of the range makes one of the two datasets empty for any corpus, which
    // echo_train refuses only when it gets there; a split is a fraction strictly between.
    ECHO_INPUT_CHECK(o.valid_fraction > 0.0,
                     "--valid-fraction 0 with --valid-prefix '{}' is no validation split: it would write an empty "
                     "validation set; drop --valid-prefix, or give a fraction above 0",
                     o.valid_prefix);
    ECHO_INPUT_CHECK(o.valid_fraction < 1.0,
                     "--valid-fraction 1 sends every document to --valid-prefix '{}' and leaves --output-prefix '{}' "
                     "empty; give a fraction below 1",
                     o.valid_prefix, o.output_prefix);
    check_prefixes_differ(o);
  }
  for (const std::string& path : o.inputs) {
    std::error_code ec;
    ECHO_INPUT_CHECK(std::filesystem::is_regular_file(path, ec), "input '{}' does not exist or is not a regular file",
                     path);
  }
  check_inputs_are_not_outputs(o);
  check_outputs_are_files(o);
  if (o.num_threads <= 0)
    o.num_threads = std::min(kMaxThreads, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

// " ('P.idx' there is an earlier run's)" when the prefix holds a dataset this run did not write:
// it now sits beside data of another preparation.
std::string earlier_data_note(const std::string& prefix) {
  std::error_code ec;
  if (!std::filesystem::exists(prefix + ".idx", ec)) return "";
  return fmt::format(" ('{}.idx' there is an earlier run's, not this one's)", prefix);
}

// Refuses a split that came out one-sided (a --valid-fraction too small or too large for the
// corpus), after the side that holds documents was written: says what was written and what not.
[[noreturn]] void fail_empty_split(const Options& o, const Totals& t) {
  const uint64_t n = t.train_documents + t.valid_documents;  // the non-empty documents, all split
  if (t.valid_documents == 0)
    ECHO_INPUT_FAIL(
        "no document fell into the validation set: --valid-fraction {} drew none of the {} non-empty documents "
        "(about {:.3g} expected); wrote only the training set {}.{{bin,idx,meta.json}} ({} documents, {} tokens), "
        "nothing at --valid-prefix '{}'{}; give a larger --valid-fraction, or use the training set as written, "
        "without a validation set",
        o.valid_fraction, n, o.valid_fraction * static_cast<double>(n), o.output_prefix, t.train_documents,
        t.train_tokens, o.valid_prefix, earlier_data_note(o.valid_prefix));
  ECHO_INPUT_FAIL(
      "no document fell into the training set: --valid-fraction {} sent all {} non-empty documents to the "
      "validation set; wrote only the validation set {}.{{bin,idx,meta.json}} ({} documents, {} tokens), nothing at "
      "--output-prefix '{}'{}; give a smaller --valid-fraction",
      o.valid_fraction, n, o.valid_prefix, t.valid_documents, t.valid_tokens, o.output_prefix,
      earlier_data_note(o.output_prefix));
}

int run(Options o) {
  validate(o);
  const auto tokenizer = tokenizer::load_tokenizer(o.tokenizer, o.eos_token);
  ECHO_INFO("prep", "tokenizer {} (vocab {}, eos {}: {}), {} input files, {} threads", o.tokenizer,
            tokenizer->vocab_size(), tokenizer->eos_id(), tokenizer->eos_source(), o.inputs.size(), o.num_threads);
  // What the sidecars record: the same for both datasets, all but the counts.
  data::DatasetMeta meta;
  meta.tokenizer = o.tokenizer;
  if (const std::string file = tokenizer::tokenizer_file(o.tokenizer); !file.empty())
    meta.tokenizer_sha256 = sha256_file_hex(file);
  meta.vocab_size = tokenizer->vocab_size();
  meta.eos_id = tokenizer->eos_id();
  meta.eos_source = tokenizer->eos_source();
  meta.append_eos = o.append_eos;
  // Each prefix is locked until its sidecar is in place: a second echo_prep on it is refused.
  create_parent(o.output_prefix);
  const data::PrefixLock train_lock(o.output_prefix);
  std::optional<data::PrefixLock> valid_lock;
  if (!o.valid_prefix.empty()) {
    create_parent(o.valid_prefix);
    valid_lock.emplace(o.valid_prefix);
  }
  // Ctrl-C (or a SIGTERM or SIGHUP) in the long encoding loop removes the partial files the
  // writers' destructors would have removed on an error; it cannot cut the renames below in half.
  // Armed before the writers create their files, and outlives them.
  std::vector<std::string> partial = data::IndexedDatasetWriter::temporary_files(o.output_prefix);
  if (!o.valid_prefix.empty())
    for (auto& path : data::IndexedDatasetWriter::temporary_files(o.valid_prefix)) partial.push_back(std::move(path));
  RemoveOnSignal remove_partial_on_signal(partial);
  data::IndexedDatasetWriter train(o.output_prefix);
  std::optional<data::IndexedDatasetWriter> valid;
  if (!o.valid_prefix.empty()) valid.emplace(o.valid_prefix);

  // The workers start with the signals blocked (a thread inherits its creator's mask), so they
  // always reach the main thread, which defers them around the renames.
  std::optional<WorkerPool> workers;
  {
    const StopSignalsDeferred while_spawning;
    workers.emplace(o.num_threads);
  }
  WorkerPool& pool = *workers;
  DocumentReader reader(o);
  Progress progress;
  Totals totals;
  std::vector<std::string> docs;
  std::vector<std::vector<int32_t>> ids;
  std::vector<size_t> ill_formed;  // per document of the chunk
  const int32_t eos = tokenizer->eos_id();
  for (bool more = true; more;) {
    // Read a chunk, encode it in parallel, write it in input order.
    auto t = Clock::now();
    docs.clear();
    size_t chunk_bytes = 0;
    while (chunk_bytes < (o.chunk_mb << 20)) {
      std::optional<std::string> doc = reader.next();
      if (!doc) {
        more = false;
        break;
      }
      chunk_bytes += doc->size();
      docs.push_back(std::move(*doc));
    }
    totals.read_s += seconds_since(t);
    t = Clock::now();
    ids.resize(docs.size());
    ill_formed.assign(docs.size(), 0);
    pool.run(docs.size(), [&](size_t i) {
      ill_formed[i] = tokenizer::count_ill_formed_utf8(docs[i]);
      ids[i] = tokenizer->encode(docs[i]);
      if (o.append_eos) ids[i].push_back(eos);
    });
    totals.encode_s += seconds_since(t);
    t = Clock::now();
    for (size_t i = 0; i < docs.size(); ++i) {
      const uint64_t doc_index = totals.documents++;
      if (ill_formed[i] > 0) {
        if (totals.invalid_utf8_documents++ == 0) totals.first_invalid_utf8 = doc_index;
        totals.invalid_utf8_sequences += ill_formed[i];
      }
      if (docs[i].empty()) {
        ++totals.empty;  // as Megatron's preprocessing, an empty document is not written
        continue;
      }
      const bool to_valid = valid && data::is_valid_document(doc_index, o.valid_fraction, o.seed);
      (to_valid ? *valid : train).add_document(ids[i]);
      (to_valid ? totals.valid_documents : totals.train_documents) += 1;
      (to_valid ? totals.valid_tokens : totals.train_tokens) += ids[i].size();
      totals.tokens += ids[i].size();
    }
    totals.write_s += seconds_since(t);
    progress.update(totals, reader.bytes_read());
  }
  ECHO_INPUT_CHECK(totals.train_documents + totals.valid_documents > 0,
                   "no documents for '{}': the inputs hold {} documents, {} of them empty", o.output_prefix,
                   totals.documents, totals.empty);
  if (totals.invalid_utf8_documents > 0) {
    // NOTE: a byte-level BPE tokenizer encodes text, so it replaces each ill-formed sequence by
    // U+FFFD as the tokenizers library does; the byte tokenizer keeps the raw bytes.
    ECHO_WARN("prep",
              "{} of {} documents hold invalid UTF-8 ({} ill-formed sequences; the first in document {}): {}; "
              "is the input in another encoding (Latin-1, UTF-16)?",
              totals.invalid_utf8_documents, totals.documents, totals.invalid_utf8_sequences, totals.first_invalid_utf8,
              o.tokenizer == "byte" ? "the byte tokenizer stored their raw bytes"
                                    : "the tokenizer replaced each sequence with U+FFFD");
  }
  // A side of the split that came out empty is not written: an empty dataset is refused only
  // later, by echo_train. The other side is, so the encoding done is kept; then the run fails.
  const bool write_train = totals.train_documents > 0, write_valid = valid && totals.valid_documents > 0;
  {
    // A signal from here on waits until the datasets and their sidecars are in place.
    const StopSignalsDeferred finish_first;
    // Each dataset, then its sidecar (a sidecar vouches for finished data). A failure on the
    // validation side says what the training side already holds: it said only what failed.
    const auto finish = [&](const std::string& prefix, data::IndexedDatasetWriter& w) {
      w.finalize();
      meta.documents = w.num_documents();
      meta.tokens = w.num_tokens();
      data::write_dataset_meta(prefix, meta);
    };
    if (write_train) finish(o.output_prefix, train);
    try {
      if (write_valid) finish(o.valid_prefix, *valid);
    } catch (const Error& e) {
      if (!write_train) throw;
      rethrow_with_context(
          e, "",
          fmt::format("; the training split {}.{{bin,idx,meta.json}} was written in full ({} "
                      "documents), the validation split '{}' was not written in full: fix the cause and run again",
                      o.output_prefix, totals.train_documents, o.valid_prefix));
    }
    remove_partial_on_signal.disarm();
  }
  progress.update(totals, reader.bytes_read(), true);
  const double s = progress.seconds();
  if (write_train)
    ECHO_INFO("prep", "wrote {}.{{bin,idx,meta.json}}: {} documents, {} tokens", o.output_prefix,
              totals.train_documents, totals.train_tokens);
  if (write_valid)
    ECHO_INFO("prep", "wrote {}.{{bin,idx,meta.json}}: {} documents, {} tokens", o.valid_prefix,
              totals.valid_documents, totals.valid_tokens);
  if (valid && !(write_train && write_valid)) fail_empty_split(o, totals);
  ECHO_INFO("prep",
            "{} documents ({} empty, skipped), {} tokens, {:.1f} MB in {:.2f} s: {:.0f} tokens/s, {:.2f} MB/s "
            "with {} threads (read {:.2f} s, encode {:.2f} s, write {:.2f} s){}",
            totals.documents, totals.empty, totals.tokens, static_cast<double>(reader.bytes_read()) / 1e6, s,
            static_cast<double>(totals.tokens) / s, static_cast<double>(reader.bytes_read()) / 1e6 / s, o.num_threads,
            totals.read_s, totals.encode_s, totals.write_s, o.append_eos ? "; EOS stored after each document" : "");
  return 0;
}

}  // namespace
}  // namespace echo::prep

int main(int argc, char** argv) {
  echo::prep::Options o;
  CLI::App app{"echo_prep: text / JSON lines -> Megatron indexed dataset (.bin + .idx) of token ids"};
  app.add_option("--input", o.inputs, "input files, read in the order given")->required()->expected(1, -1);
  app.add_option("--format", o.format, "jsonl (one JSON object per line, or a JSON array) | text")
      ->check(CLI::IsMember({"text", "jsonl"}))
      ->capture_default_str();
  const CLI::Option* json_key_opt =
      app.add_option("--json-key", o.json_key, "--format jsonl: the field of a JSON object that holds the text")
          ->capture_default_str();
  const CLI::Option* text_split_opt =
      app.add_option("--text-split", o.text_split, "--format text: one document per file | paragraph | line")
          ->check(CLI::IsMember({"file", "paragraph", "line"}))
          ->capture_default_str();
  app.add_option("--tokenizer", o.tokenizer, "byte | path to a Hugging Face tokenizer.json")->required();
  app.add_option("--output-prefix", o.output_prefix,
                 "writes PREFIX.bin, PREFIX.idx and PREFIX.meta.json (the tokenizer and EOS, which echo_train checks)")
      ->required();
  app.add_option("--valid-prefix", o.valid_prefix, "writes the validation documents to PREFIX.bin/.idx/.meta.json");
  app.add_option("--valid-fraction", o.valid_fraction, "expected share of documents in the validation set")
      ->capture_default_str()
      ->each([&](const std::string&) { o.valid_fraction_set = true; });
  app.add_option("--threads", o.num_threads, "encoding threads (default: all cores)")
      ->check(CLI::Range(1, echo::prep::kMaxThreads));
  app.add_option("--seed", o.seed, "seed of the train/valid split")->capture_default_str();
  app.add_flag("--append-eos", o.append_eos, "store EOS after each document (for Megatron's loader; echo's adds it itself, and packs such data as stored)");
  app.add_option("--eos-token", o.eos_token,
                 "the EOS (document separator) as token text, e.g. '<|endoftext|>'; default: the tokenizer's special "
                 "<|endoftext|>, <|end_of_text|>, </s> or <eos>, else tokenizer_config.json's eos_token");
  app.add_option("--chunk-mb", o.chunk_mb, "MB of text read and encoded per chunk")
      ->check(CLI::Range(size_t{1}, size_t{4096}))
      ->capture_default_str();
  try {
    echo::apps::parse_naming_unknown_options(app, argc, argv);
    // An option of the other format would be ignored: the user meant something else.
    if (o.format == "jsonl" && text_split_opt->count() > 0)
      throw CLI::ValidationError("--text-split", "applies to --format text only (this input is --format jsonl)");
    if (o.format == "text" && json_key_opt->count() > 0)
      throw CLI::ValidationError("--json-key", "applies to --format jsonl only (this input is --format text)");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return echo::prep::run(o);
  } catch (const std::exception& e) {
    ECHO_ERROR("prep", "{}", e.what());
    return 1;
  }
}
