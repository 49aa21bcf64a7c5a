// End-to-end tests of echo_prep (the binary beside this test's build tree): JSONL, JSON arrays
// and text in, indexed datasets out, read back with data::IndexedDataset; the train/valid split;
// identical output for any thread count; the sidecar PREFIX.meta.json (tokenizer, vocabulary, EOS);
// the error messages for bad input; and Ctrl-C, SIGTERM or SIGHUP mid-run, which leaves no partial
// files (and SIGHUP under nohup, which changes nothing).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "../support/scratch_dir.h"
#include "core/sha256.h"
#include "data/dataset_meta.h"
#include "data/indexed_dataset.h"
#include "data/split.h"
#include "tokenizer/unicode.h"

namespace echo {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// echo_prep is built into the project's binary directory; this test runs from
// <build>/tests/tokenizer/.
fs::path echo_prep_path() {
  return fs::read_symlink("/proc/self/exe").parent_path().parent_path().parent_path() / "echo_prep";
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> documents_of(const std::string& prefix) {
  const auto ds = data::IndexedDataset::open(prefix);
  std::vector<std::string> docs;
  for (size_t i = 0; i < ds.num_documents(); ++i) {
    std::string text;
    for (const int32_t id : ds.document(i)) {
      EXPECT_LT(id, 256);
      text.push_back(static_cast<char>(id));
    }
    docs.push_back(text);
  }
  return docs;
}

// A byte-level BPE tokenizer.json whose vocabulary is the 256 bytes, with <|endoftext|> = 256.
std::string byte_level_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[tokenizer::bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  const nlohmann::json tok = {
      {"added_tokens", nlohmann::json::array({{{"id", 256}, {"content", "<|endoftext|>"}, {"special", true}}})},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  return tok.dump();
}

class EchoPrep : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(echo_prep_path()))
        << echo_prep_path() << " is not built (cmake --build ... --target echo_prep)";
  }

  // Runs echo_prep with `args`; returns the exit status, keeps stderr in err_.
  int run(const std::string& args) {
    const std::string cmd =
        echo_prep_path().string() + " " + args + " >" + dir_.path("stdout.txt") + " 2>" + dir_.path("stderr.txt");
    const int status = std::system(cmd.c_str());
    err_ = slurp(dir_.path("stderr.txt"));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  echo::testing::ScratchDir dir_;
  std::string err_;
};

TEST_F(EchoPrep, JsonlSplitsDocumentsByTheKeyedHash) {
  std::string jsonl;
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    texts.push_back("document " + std::to_string(i) + (i % 7 == 0 ? "\nwith\ttabs and \"quotes\" é" : ""));
    jsonl += nlohmann::json{{"id", i}, {"text", texts.back()}}.dump() + "\n";
    if (i == 50) jsonl += "\n";  // blank lines are skipped
  }
  const std::string in = dir_.write("in.jsonl", jsonl);
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("out/train") + " --valid-prefix " +
                dir_.path("out/valid") + " --valid-fraction 0.25 --seed 9 --threads 2"),
            0)
      << err_;
  std::vector<std::string> want_train, want_valid;
  for (size_t i = 0; i < texts.size(); ++i)
    (data::is_valid_document(i, 0.25, 9) ? want_valid : want_train).push_back(texts[i]);
  EXPECT_EQ(documents_of(dir_.path("out/train")), want_train);
  EXPECT_EQ(documents_of(dir_.path("out/valid")), want_valid);
  EXPECT_FALSE(want_valid.empty());
  EXPECT_THAT(err_, HasSubstr("200 documents"));
}

TEST_F(EchoPrep, JsonArraysOfStringsOrObjects) {
  // nlp-corpus ships files holding one JSON array of sentences.
  const std::string strings = dir_.write("doc-0.json", "[\n  \"First sentence.\",\n  \"Second one.\"\n]\n");
  const std::string objects = dir_.write("objs.json", R"([{"text": "third"}, {"text": "fourth", "meta": 1}])");
  ASSERT_EQ(run("--input " + strings + " " + objects + " --tokenizer byte --output-prefix " + dir_.path("train")), 0)
      << err_;
  EXPECT_THAT(documents_of(dir_.path("train")),
              ::testing::ElementsAre("First sentence.", "Second one.", "third", "fourth"));
  // A UTF-8 byte-order mark before the '[' (as Windows editors write): it was read as JSONL and
  // refused as a malformed line 1.
  const std::string bom = dir_.write("bom.json", "\xEF\xBB\xBF [\"with a mark\",\n\"second\"]\n");
  ASSERT_EQ(run("--input " + bom + " --tokenizer byte --output-prefix " + dir_.path("bom")), 0) << err_;
  EXPECT_THAT(documents_of(dir_.path("bom")), ::testing::ElementsAre("with a mark", "second"));
  // The array is parsed as a stream, one element at a time: elements with nested objects and
  // arrays around the text, a repeated key (the last value, as a whole-file parse takes), an
  // empty text (no document, as in JSONL), escapes and multi-byte UTF-8.
  const std::string nested = dir_.write(
      "nested.json",
      R"([{"meta": {"x": [1, {"y": null}], "z": true}, "text": "a\u00e9\n"}, "b", {"text": "first", "text": "c"},)"
      "\n"
      R"( {"text": "", "more": [[], {}]}, {"tags": ["t"], "text": "\u4e2d\ud83d\ude00"}])");
  ASSERT_EQ(run("--input " + nested + " --tokenizer byte --output-prefix " + dir_.path("nested")), 0) << err_;
  EXPECT_THAT(documents_of(dir_.path("nested")),
              ::testing::ElementsAre("a\xc3\xa9\n", "b", "c", "\xe4\xb8\xad\xf0\x9f\x98\x80"));
}

TEST_F(EchoPrep, TextFilesAndTheirSplits) {
  const std::string a = dir_.write("a.txt", "para one\nstill one\n\n\npara two\n");
  const std::string b = dir_.write("b.txt", "");
  ASSERT_EQ(run("--format text --input " + a + " " + b + " --tokenizer byte --output-prefix " + dir_.path("file")), 0)
      << err_;
  EXPECT_THAT(documents_of(dir_.path("file")), ::testing::ElementsAre("para one\nstill one\n\n\npara two\n"));
  EXPECT_THAT(err_, HasSubstr("1 empty, skipped"));
  ASSERT_EQ(
      run("--format text --text-split paragraph --input " + a + " --tokenizer byte --output-prefix " + dir_.path("p")),
      0);
  EXPECT_THAT(documents_of(dir_.path("p")), ::testing::ElementsAre("para one\nstill one", "para two"));
  ASSERT_EQ(run("--format text --text-split line --input " + a + " --tokenizer byte --output-prefix " + dir_.path("l")),
            0);
  EXPECT_THAT(documents_of(dir_.path("l")), ::testing::ElementsAre("para one", "still one", "para two"));
  // CRLF line endings and blank lines of spaces: the '\r' ended every document, and "  \r" was one.
  const std::string crlf = dir_.write("crlf.txt", "para one\r\nstill one\r\n  \r\n\t\r\npara two\r\n");
  ASSERT_EQ(
      run("--format text --text-split line --input " + crlf + " --tokenizer byte --output-prefix " + dir_.path("cl")),
      0);
  EXPECT_THAT(documents_of(dir_.path("cl")), ::testing::ElementsAre("para one", "still one", "para two"));
  ASSERT_EQ(run("--format text --text-split paragraph --input " + crlf + " --tokenizer byte --output-prefix " +
                dir_.path("cp")),
            0);
  EXPECT_THAT(documents_of(dir_.path("cp")), ::testing::ElementsAre("para one\nstill one", "para two"));
  // Lone CRs (classic Mac OS): the whole file was one document.
  const std::string cr = dir_.write("cr.txt", "first\rsecond\r\rthird\r");
  ASSERT_EQ(
      run("--format text --text-split line --input " + cr + " --tokenizer byte --output-prefix " + dir_.path("cr")), 0);
  EXPECT_THAT(documents_of(dir_.path("cr")), ::testing::ElementsAre("first", "second", "third"));
  // UTF-16 (here with its byte-order mark) was stored as letters and NULs with no word.
  const std::string utf16 = dir_.write("utf16.txt", std::string("\xFF\xFEh\0i\0", 6));
  EXPECT_NE(run("--format text --input " + utf16 + " --tokenizer byte --output-prefix " + dir_.path("u")), 0);
  EXPECT_THAT(err_, HasSubstr("input '" + utf16 + "' starts with a UTF-16 byte-order mark: echo_prep reads UTF-8"));
}

TEST_F(EchoPrep, OutputDoesNotDependOnThreadsOrChunks) {
  std::string jsonl;
  for (int i = 0; i < 3000; ++i) jsonl += nlohmann::json{{"text", std::string(i % 97, 'a' + i % 26)}}.dump() + "\n";
  const std::string in = dir_.write("in.jsonl", jsonl);
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("t1") + " --threads 1"), 0) << err_;
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("t3") + " --threads 3 --chunk-mb 1"),
            0)
      << err_;
  EXPECT_EQ(slurp(dir_.path("t1.bin")), slurp(dir_.path("t3.bin")));
  EXPECT_EQ(slurp(dir_.path("t1.idx")), slurp(dir_.path("t3.idx")));
}

TEST_F(EchoPrep, AppendEosStoresTheTokenizersEos) {
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"ab\"}\n");
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --append-eos --output-prefix " + dir_.path("e")), 0) << err_;
  const auto ds = data::IndexedDataset::open(dir_.path("e"));
  EXPECT_THAT(std::vector<int32_t>(ds.document(0).begin(), ds.document(0).end()),
              ::testing::ElementsAre('a', 'b', 256));
}

TEST_F(EchoPrep, ErrorsNameTheFileAndLine) {
  const std::string bad = dir_.write("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  EXPECT_NE(run("--input " + bad + " --tokenizer byte --output-prefix " + dir_.path("x")), 0);
  EXPECT_THAT(err_, HasSubstr(bad + ":2: malformed JSON line"));
  EXPECT_FALSE(fs::exists(dir_.path("x.idx")));
  EXPECT_FALSE(fs::exists(dir_.path("x.meta.json")));

  // Each input, written as `name`, is refused with an error that starts with its path.
  const auto refused = [&](const std::string& name, const std::string& text, const std::string& after_path) {
    SCOPED_TRACE(name);
    const std::string input = dir_.write(name, text);
    EXPECT_NE(run("--input " + input + " --tokenizer byte --output-prefix " + dir_.path("x")), 0);
    EXPECT_THAT(err_, HasSubstr(input + after_path));
  };
  refused("notext.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"body\": \"c\"}\n", ":3: no \"text\" field");
  refused("num.jsonl", "{\"text\": 5}\n", ":1: \"text\" is a number, not a string");
  refused("obj.jsonl", "{\"text\": {\"a\": 1}}\n", ":1: \"text\" is an object, not a string");
  // A number past double's range is nlohmann's out_of_range, not a parse_error: it escaped
  // without the file and line.
  refused("huge.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\", \"n\": 1e400}\n", ":2: malformed JSON line");
  refused("huge.json", "[{\"text\": \"b\", \"n\": -1e400}]", ": malformed JSON array");
  refused("arr.json", "[\"a\",\n\"b\",\n]", ":3: malformed JSON array");
  refused("after.json", "[\"a\"]\n[\"b\"]", ":2: malformed JSON array");
  refused("element.json", "[\"a\", {\"text\": \"b\"},\n 5]",
          ": element 2: expected a JSON object with a \"text\" field");
  refused("nested_bad.json", "[{\"text\": \"a\", \"m\": [1, 2}]", ":1: malformed JSON array");
  // Ill-formed UTF-8 quoted by the parser reaches the terminal escaped, without the library's tag.
  refused("utf8.jsonl", "{\"text\":\"a\xff\x9b b\"}\n", ":1: malformed JSON line: parse error at line 1");
  EXPECT_THAT(err_, HasSubstr("\\xff"));
  EXPECT_THAT(err_, ::testing::Not(HasSubstr("\xff")));
  EXPECT_THAT(err_, ::testing::Not(HasSubstr("[json.exception")));
  // The JSON parser stops at a NUL byte: the rest of the line, or of the whole array, was dropped.
  refused("nul.jsonl", std::string("{\"text\": \"kept\"}\n{\"text\":\"a\"}\0{\"text\": \"lost\"}\n", 47),
          ":2: a NUL byte at column 13: JSON text cannot hold one");
  refused("nul.json", std::string("[\"first\",\n\"x\"]\0, \"lost\"]\n", 25), ":2: a NUL byte at column 5");
  refused("nul_last.json", std::string("[\"a\"]\0", 6), ":1: a NUL byte at column 6");
  refused("nul_inside.json", std::string("[\"a\", \"b\0c\"]", 13), ":1: a NUL byte at column 9");
  refused("nul_between.json", std::string("[\"a\",\n\0 \"b\"]", 12), ":2: a NUL byte at column 1");
  refused("utf16.jsonl", std::string("\xFE\xFF\0{", 4), "' starts with a UTF-16 byte-order mark");

  EXPECT_NE(run("--input " + dir_.path("missing.jsonl") + " --tokenizer byte --output-prefix " + dir_.path("x")), 0);
  EXPECT_THAT(err_, HasSubstr("input '" + dir_.path("missing.jsonl") + "' does not exist"));

  const std::string ok = dir_.write("ok.jsonl", "{\"text\": \"a\"}\n");
  EXPECT_NE(run("--input " + ok + " --tokenizer byte --output-prefix " + dir_.path("x") + " --valid-fraction 0.1"), 0);
  EXPECT_THAT(err_, HasSubstr("--valid-fraction needs --valid-prefix"));

  EXPECT_NE(run("--input " + ok + " --tokenizer " + dir_.path("nope.json") + " --output-prefix " + dir_.path("x")), 0);
  EXPECT_THAT(err_, HasSubstr("nope.json' does not exist"));
}

TEST_F(EchoPrep, PrefixesMustEndInAFileName) {
  // "dir/" used to write the hidden files dir/.bin and dir/.idx.
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"a\"}\n");
  EXPECT_NE(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("out") + "/"), 0);
  EXPECT_THAT(err_, HasSubstr("--output-prefix '" + dir_.path("out") + "/' has no file name: it would write '" +
                              dir_.path("out") + "/.bin' and '" + dir_.path("out") + "/.idx'; give a name such as '" +
                              dir_.path("out") + "/train'"));
  EXPECT_THAT(err_, Not(HasSubstr("[at ")));  // an input error: no source location
  EXPECT_FALSE(fs::exists(dir_.path("out") + "/.bin"));
  EXPECT_NE(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("t") + " --valid-prefix " +
                dir_.path("v") + "/.."),
            0);
  EXPECT_THAT(err_, HasSubstr("--valid-prefix '" + dir_.path("v") + "/..' has no file name"));
}

// --threads is a count of OS threads: 0, negative or absurd counts are refused by name (100000
// used to start 100000 threads and exhaust the machine).
TEST_F(EchoPrep, ThreadCountIsChecked) {
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"a\"}\n");
  for (const std::string n : {"0", "-3", "100000"}) {
    EXPECT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("t") + " --threads " + n), 105)
        << n;
    EXPECT_THAT(err_, HasSubstr("--threads: Value " + n + " not in range 1 to 1024")) << n;
    EXPECT_FALSE(fs::exists(dir_.path("t.idx")));
  }
  EXPECT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("t") + " --threads 2"), 0) << err_;
}

// --seed -1 ran with seed 18446744073709551615 (strtoull wraps it) and a seed past 2^64 - 1 with
// that maximum: a different split with no word. Each is refused now; 2^64 - 1 itself is a seed.
TEST_F(EchoPrep, SeedMustBeAWholeNumberThatFits) {
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
  const std::string base = "--input " + in + " --tokenizer byte --output-prefix " + dir_.path("t") +
                           " --valid-prefix " + dir_.path("v") + " --valid-fraction 0.5 --seed ";
  const std::pair<std::string, std::string> bad[] = {{"-1", "-1 is not a whole number >= 0"},
                                                     {"18446744073709551616", "18446744073709551616 is above 2^64 - 1"},
                                                     {"1.5", "1.5 is not a whole number >= 0"},
                                                     // CLI11 reads a leading zero as octal: 010 ran seed 8
                                                     {"010", "010 has a leading zero"},
                                                     {"09", "09 has a leading zero"}};
  for (const auto& [seed, message] : bad) {
    EXPECT_NE(run(base + seed), 0) << seed;
    EXPECT_THAT(err_, HasSubstr("--seed: " + message)) << seed;
    EXPECT_FALSE(fs::exists(dir_.path("t.idx"))) << seed;
  }
  EXPECT_EQ(run(base + "18446744073709551615"), 0) << err_;
}

// A --format text input (read whole) or a JSON array file larger than the memory available ended
// in a bare std::bad_alloc naming no file. A sparse 1 TiB file stands for it: no byte of it is read.
TEST_F(EchoPrep, AnInputLargerThanMemoryIsNamed) {
  const std::string big = dir_.path("big.txt");
  std::ofstream(big).close();
  std::error_code ec;
  fs::resize_file(big, uintmax_t{1} << 40, ec);
  ASSERT_FALSE(ec) << "the scratch folder's file system cannot hold a sparse 1 TiB file: " << ec.message();
  EXPECT_EQ(run("--format text --input " + big + " --tokenizer byte --output-prefix " + dir_.path("b")), 1);
  EXPECT_THAT(err_, HasSubstr("input '" + big + "' is 1024.0 GiB, more than the "));
  EXPECT_THAT(err_, HasSubstr("of memory available: --format text reads a file whole; split it into smaller files"));
  EXPECT_FALSE(fs::exists(dir_.path("b.bin")));
  fs::remove(big);
  // A JSON array file is parsed as a stream, but its texts are all held before they are encoded.
  const std::string array = dir_.path("big.json");
  std::ofstream(array) << "[";
  fs::resize_file(array, uintmax_t{1} << 40, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(run("--input " + array + " --tokenizer byte --output-prefix " + dir_.path("b")), 1);
  EXPECT_THAT(err_, HasSubstr("input '" + array + "' is 1024.0 GiB, more than the "));
  EXPECT_THAT(err_, HasSubstr("of memory available: a JSON array file's texts are all held in memory before they are "
                              "encoded; split it into smaller files"));
  EXPECT_FALSE(fs::exists(dir_.path("b.bin")));
  fs::remove(array);
}

// A dangling symbolic link where the output folder should be read as "File exists".
TEST_F(EchoPrep, AnOutputFolderThatIsADanglingLinkIsNamed) {
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"a\"}\n");
  fs::create_symlink(dir_.path("not_there"), dir_.path("out"));
  EXPECT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("out") + "/x"), 1);
  EXPECT_THAT(err_, HasSubstr("'" + dir_.path("out") + "' is a symbolic link to '" + dir_.path("not_there") +
                              "', which does not exist"));
}

// An output file that cannot be written is the user's path problem: a plain message naming it,
// not an internal error with a source location.
TEST_F(EchoPrep, OutputPathErrorsArePlainMessages) {
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"a\"}\n");
  fs::create_directories(dir_.path("d.bin"));  // the .bin's name is taken by a directory
  EXPECT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("d")), 1);
  // Named before anything is read (it was found at the rename, after all the encoding).
  EXPECT_THAT(err_, HasSubstr(dir_.path("d.bin") + " is a directory, where --output-prefix '" + dir_.path("d") +
                              "' writes a file of its dataset; move it away"));
  EXPECT_THAT(err_, Not(HasSubstr("[check ")));
  EXPECT_FALSE(fs::exists(dir_.path("d.bin.tmp")));
}

TEST_F(EchoPrep, InvalidUtf8IsCountedAndReported) {
  // Latin-1 text: "café" with é = E9, and a stray continuation byte; the second file is clean.
  const std::string latin1 = dir_.write("latin1.txt", "caf\xe9 and \x80!");
  const std::string clean = dir_.write("clean.txt", "fine");
  ASSERT_EQ(
      run("--format text --input " + clean + " " + latin1 + " --tokenizer byte --output-prefix " + dir_.path("b")), 0)
      << err_;
  EXPECT_THAT(err_, HasSubstr("1 of 2 documents hold invalid UTF-8 (2 ill-formed sequences; the first in document "
                              "1): the byte tokenizer stored their raw bytes"));
  EXPECT_THAT(documents_of(dir_.path("b")), ::testing::ElementsAre("fine", "caf\xe9 and \x80!"));

  // A byte-level BPE tokenizer.json whose vocabulary is the 256 bytes: ill-formed sequences
  // become U+FFFD (EF BF BD), and the warning says so.
  const std::string tok_path = dir_.write("tokenizer.json", byte_level_tokenizer_json());
  ASSERT_EQ(run("--format text --input " + latin1 + " --tokenizer " + tok_path + " --output-prefix " + dir_.path("h")),
            0)
      << err_;
  EXPECT_THAT(err_, HasSubstr("1 of 1 documents hold invalid UTF-8 (2 ill-formed sequences; the first in document "
                              "0): the tokenizer replaced each sequence with U+FFFD"));
  EXPECT_THAT(documents_of(dir_.path("h")), ::testing::ElementsAre("caf\xef\xbf\xbd and \xef\xbf\xbd!"));

  // Valid UTF-8 gives no warning.
  ASSERT_EQ(run("--format text --input " + clean + " --tokenizer byte --output-prefix " + dir_.path("c")), 0) << err_;
  EXPECT_THAT(err_, Not(HasSubstr("invalid UTF-8")));
}

// A tokenizer.json whose vocab spells "</s>" only as a merged piece of text (no added tokens):
// before, echo_prep took that piece as the EOS without a word; now it is refused, and
// --eos-token or a tokenizer_config.json beside the file names the EOS.
TEST_F(EchoPrep, EosIsNeverGuessedFromAVocabPiece) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[tokenizer::bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  vocab["</"] = 256;
  vocab["</s"] = 257;
  vocab["</s>"] = 258;
  const nlohmann::json tok = {
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", nlohmann::json::array({nlohmann::json::array({"<", "/"}), nlohmann::json::array({"</", "s"}),
                                          nlohmann::json::array({"</s", ">"})})}}}};
  const std::string tok_path = dir_.write("tokenizer.json", tok.dump());
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"a</s>b\"}\n");
  const std::string base = "--input " + in + " --tokenizer " + tok_path + " --append-eos --output-prefix ";
  EXPECT_EQ(run(base + dir_.path("x")), 1);
  EXPECT_THAT(err_, HasSubstr("tokenizer.json '" + tok_path + "': no EOS token found"));
  EXPECT_THAT(err_, HasSubstr("\"</s>\" is only an ordinary vocab entry (id 258)"));
  EXPECT_THAT(err_, HasSubstr("there is no tokenizer_config.json beside it"));
  EXPECT_THAT(err_, HasSubstr("echo_prep --eos-token TEXT"));
  EXPECT_FALSE(fs::exists(dir_.path("x.idx")));

  ASSERT_EQ(run(base + dir_.path("o") + " --eos-token '</s>'"), 0) << err_;
  EXPECT_THAT(err_, HasSubstr("eos 258: --eos-token \"</s>\""));
  const auto named = data::IndexedDataset::open(dir_.path("o"));
  const auto doc = named.document(0);
  // The text's own "</s>" is the same id: why a vocab piece is no EOS unless the user says so.
  EXPECT_EQ(std::vector<int32_t>(doc.begin(), doc.end()), (std::vector<int32_t>{'a', 258, 'b', 258}));

  dir_.write("tokenizer_config.json", R"({"eos_token": {"content": "</s>"}})");
  ASSERT_EQ(run(base + dir_.path("c")), 0) << err_;
  EXPECT_THAT(err_, HasSubstr("eos 258: eos_token of tokenizer_config.json '" + dir_.path("tokenizer_config.json") +
                              "' = \"</s>\""));
}

// The sidecar of a dataset: what echo_train checks data.eos_id and model.vocab_size against.
void expect_sidecar_matches(const std::string& prefix, const data::DatasetMeta& want) {
  SCOPED_TRACE(prefix);
  const auto meta = data::read_dataset_meta(prefix);
  ASSERT_TRUE(meta.has_value()) << prefix << ".meta.json is missing";
  const auto ds = data::IndexedDataset::open(prefix);
  EXPECT_EQ(meta->tokenizer, want.tokenizer);
  EXPECT_EQ(meta->tokenizer_sha256, want.tokenizer_sha256);
  EXPECT_EQ(meta->vocab_size, want.vocab_size);
  EXPECT_EQ(meta->eos_id, want.eos_id);
  EXPECT_THAT(meta->eos_source, HasSubstr(want.eos_source));
  EXPECT_EQ(meta->append_eos, want.append_eos);
  EXPECT_EQ(meta->documents, ds.num_documents());
  EXPECT_EQ(meta->tokens, ds.num_tokens());
  EXPECT_FALSE(fs::exists(prefix + ".meta.json.tmp"));
}

TEST_F(EchoPrep, SidecarRecordsTheByteTokenizer) {
  std::mt19937 gen(static_cast<unsigned>(getpid()));
  std::string jsonl;
  const int n = 20 + static_cast<int>(gen() % 200);
  for (int i = 0; i < n; ++i)
    jsonl += nlohmann::json{{"text", std::string(gen() % 50, 'a' + gen() % 26)}}.dump() + "\n";
  const std::string in = dir_.write("in.jsonl", jsonl);
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("d/train") + " --valid-prefix " +
                dir_.path("d/valid") + " --valid-fraction 0.3"),
            0)
      << err_;
  data::DatasetMeta want;
  want.tokenizer = "byte";
  want.vocab_size = 257;
  want.eos_id = 256;
  want.eos_source = "<|endoftext|>";
  expect_sidecar_matches(dir_.path("d/train"), want);
  expect_sidecar_matches(dir_.path("d/valid"), want);
  EXPECT_THAT(err_, HasSubstr("wrote " + dir_.path("d/train") + ".{bin,idx,meta.json}"));
  const auto j = nlohmann::json::parse(slurp(dir_.path("d/train.meta.json")));
  EXPECT_EQ(j["format"], "echo-dataset-meta");
  EXPECT_TRUE(j["tokenizer_sha256"].is_null());
}

// A small Hugging Face tokenizer whose EOS sits at a random id past the bytes, and a larger id
// after it: the sidecar's vocabulary is one past the largest id, its EOS the special token's.
TEST_F(EchoPrep, SidecarRecordsAHuggingFaceTokenizerAndItsEos) {
  std::mt19937 gen(static_cast<unsigned>(getpid()));
  const int eos = 256 + static_cast<int>(gen() % 1000), top = eos + 1 + static_cast<int>(gen() % 1000);
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[tokenizer::bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  const nlohmann::json tok = {
      {"added_tokens", nlohmann::json::array({{{"id", eos}, {"content", "<|endoftext|>"}, {"special", true}},
                                              {{"id", top}, {"content", "<|other|>"}, {"special", true}}})},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  const std::string tok_path = dir_.write("tokenizer.json", tok.dump());
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"ab\"}\n{\"text\": \"c\"}\n");
  // The directory as the spec: the sidecar hashes the tokenizer.json inside it.
  ASSERT_EQ(run("--input " + in + " --tokenizer " + dir_.str() + " --append-eos --output-prefix " + dir_.path("h")), 0)
      << err_;
  data::DatasetMeta want;
  want.tokenizer = dir_.str();
  want.tokenizer_sha256 = sha256_file_hex(tok_path);
  want.vocab_size = top + 1;
  want.eos_id = eos;
  want.eos_source = "special added token \"<|endoftext|>\"";
  want.append_eos = true;
  expect_sidecar_matches(dir_.path("h"), want);
  EXPECT_EQ(want.tokenizer_sha256, sha256_hex(slurp(tok_path)));
  EXPECT_FALSE(fs::exists(dir_.path("h.meta.json.tmp")));

  // Prepared again over the same prefix with the byte tokenizer: the sidecar follows the data.
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + dir_.path("h")), 0) << err_;
  const auto again = data::read_dataset_meta(dir_.path("h"));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->eos_id, 256);
  EXPECT_EQ(again->vocab_size, 257);
  EXPECT_TRUE(again->tokenizer_sha256.empty());
  EXPECT_FALSE(again->append_eos);
}

// True when no file that writing at `prefix` touches exists (IndexedDatasetWriter::files_written),
// `except` aside (an input placed at one of those names).
bool nothing_written_at(const std::string& prefix, const std::string& except = "") {
  for (const std::string& path : data::IndexedDatasetWriter::files_written(prefix))
    if (path != except && fs::exists(fs::symlink_status(path))) {
      ADD_FAILURE() << path << " was written";
      return false;
    }
  return true;
}

// An input at one of the names a run writes used to be lost: same.bin was replaced by the tokens
// of its own text, t.bin.tmp (or a hard link to it) truncated before it was read, x.meta.json
// renamed away. Refused before anything is written, by file identity, not spelling.
TEST_F(EchoPrep, RefusesAnInputThatIsAnOutputFile) {
  const std::string jsonl = "{\"text\": \"precious\"}\n";
  const std::string first = dir_.write("first.jsonl", "{\"text\": \"first\"}\n");
  fs::create_directories(dir_.path("d"));
  fs::create_directory_symlink(dir_.path("d"), dir_.path("link"));
  struct Case {
    std::string input;        // given as --input (after first.jsonl)
    std::string real;         // the file holding the input's bytes
    std::string prefixes;     // the prefix options
    std::string output_file;  // the file the message names
  };
  const std::vector<Case> cases = {
      {dir_.path("same.bin"), dir_.path("same.bin"), "--output-prefix " + dir_.path("same"), dir_.path("same.bin")},
      {dir_.path("x.meta.json"), dir_.path("x.meta.json"), "--output-prefix " + dir_.path("x"),
       dir_.path("x.meta.json")},
      {dir_.path("v.idx"), dir_.path("v.idx"),
       "--output-prefix " + dir_.path("t") + " --valid-prefix " + dir_.path("v"), dir_.path("v.idx")},
      {dir_.path("t.bin.tmp"), dir_.path("t.bin.tmp"), "--output-prefix " + dir_.path("t"), dir_.path("t.bin.tmp")},
      {dir_.path("t.meta.json.old"), dir_.path("t.meta.json.old"), "--output-prefix " + dir_.path("t"),
       dir_.path("t.meta.json.old")},
      {dir_.path("v.meta.json.tmp"), dir_.path("v.meta.json.tmp"),
       "--output-prefix " + dir_.path("t") + " --valid-prefix " + dir_.path("v"), dir_.path("v.meta.json.tmp")},
      // Other spellings of one file: ".", "..", a symlinked directory.
      {dir_.path("d/./a.bin"), dir_.path("d/a.bin"), "--output-prefix " + dir_.path("d/a"), dir_.path("d/a.bin")},
      {dir_.path("d/../b.idx"), dir_.path("b.idx"), "--output-prefix " + dir_.path("b"), dir_.path("b.idx")},
      {dir_.path("d/c.bin"), dir_.path("d/c.bin"), "--output-prefix " + dir_.path("link/c"), dir_.path("link/c.bin")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.input + " with " + c.prefixes);
    dir_.write(fs::relative(c.real, dir_.root()).string(), jsonl);
    EXPECT_EQ(run("--input " + first + " " + c.input + " --tokenizer byte " + c.prefixes), 1);
    EXPECT_THAT(err_, HasSubstr("input '" + c.input + "' is the file '" + c.output_file + "' that"));
    EXPECT_THAT(err_, HasSubstr("echo_prep would overwrite its own input"));
    EXPECT_EQ(slurp(c.real), jsonl);
    for (const char* prefix : {"same", "x", "t", "v", "d/a", "b", "d/c"})
      EXPECT_TRUE(nothing_written_at(dir_.path(prefix), c.real)) << prefix;
    fs::remove(c.real);
  }

  // A hard link to the writer's temporary file: the same inode, truncated when writing starts.
  const std::string linked = dir_.write("linked.jsonl", jsonl);
  fs::create_hard_link(linked, dir_.path("h.bin.tmp"));
  EXPECT_EQ(run("--input " + linked + " --tokenizer byte --output-prefix " + dir_.path("h")), 1);
  EXPECT_THAT(err_, HasSubstr("input '" + linked + "' is the file '" + dir_.path("h.bin.tmp") + "' that"));
  EXPECT_EQ(slurp(linked), jsonl);
  EXPECT_FALSE(fs::exists(dir_.path("h.idx")));

  // A symlink whose target the run replaces.
  const std::string target = dir_.write("k.bin", jsonl);
  fs::create_symlink(target, dir_.path("k.jsonl"));
  EXPECT_EQ(run("--input " + dir_.path("k.jsonl") + " --tokenizer byte --output-prefix " + dir_.path("k")), 1);
  EXPECT_THAT(err_, HasSubstr("input '" + dir_.path("k.jsonl") + "' is the file '" + target + "' that"));
  EXPECT_EQ(slurp(target), jsonl);

  // The tokenizer.json is read as well: it is not an output either.
  const std::string tok = byte_level_tokenizer_json();
  const std::string tok_path = dir_.write("tok.meta.json", tok);
  EXPECT_EQ(run("--input " + first + " --tokenizer " + tok_path + " --output-prefix " + dir_.path("tok")), 1);
  EXPECT_THAT(err_, HasSubstr("--tokenizer file '" + tok_path + "' is the file '" + tok_path + "' that"));
  EXPECT_EQ(slurp(tok_path), tok);
}

// Two spellings of one prefix used to pass the string comparison: both writers wrote one
// .bin.tmp, and one half of the split was left without its sidecar.
TEST_F(EchoPrep, PrefixesNamingTheSameFilesAreRefused) {
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c\"}\n");
  fs::create_directories(dir_.path("d"));
  fs::create_directory_symlink(dir_.path("d"), dir_.path("link"));
  const std::vector<std::pair<std::string, std::string>> spellings = {
      {dir_.path("d/x"), dir_.path("d/./x")},
      {dir_.path("d/x"), dir_.path("link/x")},
      {dir_.path("d/x"), dir_.path("e/../d/x")},
      {dir_.path("d/x"), dir_.path("d/x")},
  };
  for (const auto& [train, valid] : spellings) {
    SCOPED_TRACE(train + " and " + valid);
    EXPECT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + train + " --valid-prefix " + valid +
                  " --valid-fraction 0.5"),
              1);
    EXPECT_THAT(err_, HasSubstr("--output-prefix '" + train + "' and --valid-prefix '" + valid +
                                "' name the same files ('" + train + ".bin' is '" + valid + ".bin')"));
    EXPECT_TRUE(nothing_written_at(train));
  }
}

// --valid-fraction 0 with a --valid-prefix used to write an empty validation set, refused only
// later by echo_train; 1 leaves the training set empty. Both are refused before anything is made.
TEST_F(EchoPrep, ValidFractionZeroOrOneIsRefused) {
  const std::string in = dir_.write("in.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
  const std::string base = "--input " + in + " --tokenizer byte --output-prefix " + dir_.path("new/t") +
                           " --valid-prefix " + dir_.path("new/v") + " --valid-fraction ";
  for (const std::string zero : {"0", "0.0"}) {
    EXPECT_EQ(run(base + zero), 1) << zero;
    EXPECT_THAT(err_, HasSubstr("--valid-fraction 0 with --valid-prefix '" + dir_.path("new/v") +
                                "' is no validation split: it would write an empty validation set; drop "
                                "--valid-prefix, or give a fraction above 0"));
  }
  EXPECT_EQ(run(base + "1"), 1);
  EXPECT_THAT(err_, HasSubstr("--valid-fraction 1 sends every document to --valid-prefix '" + dir_.path("new/v") +
                              "' and leaves --output-prefix '" + dir_.path("new/t") + "' empty"));
  EXPECT_FALSE(fs::exists(dir_.path("new")));  // refused before even the directory was made
}

// A fraction so small (or so near 1) that one side of the split gets no document: that side is
// not written (it used to be an empty dataset, with a warning), the other side is kept, and the
// run fails saying which was written. A dataset already at the empty side's prefix is left as it
// was, and the message says it is an earlier run's.
TEST_F(EchoPrep, AOneSidedSplitFailsAndKeepsTheWrittenSide) {
  std::string jsonl;
  std::vector<std::string> texts;
  for (int i = 0; i < 20; ++i) {
    texts.push_back("doc " + std::to_string(i));
    jsonl += nlohmann::json{{"text", texts.back()}}.dump() + "\n";
  }
  jsonl += "{\"text\": \"\"}\n";  // an empty document: not written, not split
  const std::string in = dir_.write("in.jsonl", jsonl);
  const std::string train = dir_.path("t"), valid = dir_.path("v");
  const std::string base = "--input " + in + " --tokenizer byte --output-prefix " + train + " --valid-prefix " + valid +
                           " --valid-fraction ";
  const std::string tiny = "1e-12", near_one = "0.999999999999";
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_FALSE(data::is_valid_document(i, 1e-12, 1234)) << "the test's premise";
    ASSERT_TRUE(data::is_valid_document(i, 0.999999999999, 1234)) << "the test's premise";
  }

  EXPECT_EQ(run(base + tiny), 1);
  EXPECT_THAT(err_, HasSubstr("no document fell into the validation set: --valid-fraction 1e-12 drew none of the 20 "
                              "non-empty documents"));
  EXPECT_THAT(err_, HasSubstr("wrote only the training set " + train + ".{bin,idx,meta.json} (20 documents, "));
  EXPECT_THAT(err_, HasSubstr("nothing at --valid-prefix '" + valid + "'; give a larger --valid-fraction"));
  EXPECT_EQ(documents_of(train), texts);
  ASSERT_TRUE(data::read_dataset_meta(train).has_value());
  EXPECT_EQ(data::read_dataset_meta(train)->documents, 20u);
  EXPECT_TRUE(nothing_written_at(valid));

  EXPECT_EQ(run(base + near_one), 1);
  EXPECT_THAT(err_, HasSubstr("no document fell into the training set: --valid-fraction 0.999999999999 sent all 20 "
                              "non-empty documents to the validation set; wrote only the validation set " +
                              valid + ".{bin,idx,meta.json} (20 documents, "));
  // The training set of the run before is untouched, and said to be that run's.
  EXPECT_THAT(err_, HasSubstr("nothing at --output-prefix '" + train + "' ('" + train +
                              ".idx' there is an earlier run's, not this one's); give a smaller --valid-fraction"));
  EXPECT_EQ(documents_of(valid), texts);
  EXPECT_EQ(documents_of(train), texts);
  ASSERT_TRUE(data::read_dataset_meta(valid).has_value());
  EXPECT_EQ(data::read_dataset_meta(valid)->documents, 20u);
  EXPECT_FALSE(fs::exists(train + ".bin.tmp"));

  // A directory at a name the run writes was found only after the encoding, at the sidecar's
  // temporary name after the .bin and .idx were replaced (the old data lost its sidecar). Now
  // before anything is read; both datasets are as they were.
  const std::string train_bin = slurp(train + ".bin"), valid_bin = slurp(valid + ".bin");
  fs::create_directories(valid + ".meta.json.tmp/blocker");
  EXPECT_EQ(run(base + "0.5"), 1);
  EXPECT_THAT(err_, HasSubstr(valid + ".meta.json.tmp is a directory, where --valid-prefix '" + valid +
                              "' writes a file of its dataset; move it away"));
  EXPECT_EQ(slurp(train + ".bin"), train_bin);
  EXPECT_EQ(slurp(valid + ".bin"), valid_bin);
  EXPECT_TRUE(data::read_dataset_meta(valid).has_value());
}

// echo_prep started with its stderr in `log`, no signal blocked and SIGINT, SIGTERM and SIGHUP at
// their default action, or SIGHUP ignored (as under nohup).
pid_t spawn_prep(const fs::path& exe, std::vector<std::string> args, const std::string& log, bool ignore_hup) {
  args.insert(args.begin(), exe.string());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // NOTE: stdout too, so a child left behind holds no pipe of ctest's open.
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  if (!ignore_hup) sigaddset(&defaults, SIGHUP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  // An ignored disposition is inherited: ignore SIGHUP here just around the spawn.
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  if (ignore_hup) sigaction(SIGHUP, &ign, &old);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, &attr, argv.data(), environ);
  if (ignore_hup) sigaction(SIGHUP, &old, nullptr);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// The child's wait status, or -1 when it has not ended within `limit` (it is then killed).
int wait_or_kill(pid_t pid, std::chrono::seconds limit) {
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  while (std::chrono::steady_clock::now() - start < limit) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

// Ctrl-C, SIGTERM or SIGHUP while echo_prep is encoding: it dies of the signal as before (status
// 128 + signal to a shell), but its partial PREFIX.bin.tmp is removed (it stayed behind: the
// signal's default action runs no destructor), and the dataset already at the prefix is untouched.
// Under nohup (SIGHUP ignored) a SIGHUP changes nothing: the run completes. To land mid-run for
// certain, echo_prep is stopped (SIGSTOP) once its first chunk is in the .bin.tmp, signalled, and
// continued; an input it finishes before it can be stopped is retried larger.
TEST_F(EchoPrep, ASignalMidRunRemovesThePartialFilesAndKeepsTheOldDataset) {
  const std::string prefix = dir_.path("train");
  const std::string small = dir_.write("small.txt", "an earlier dataset\n");
  const std::string small_args =
      "--input " + small + " --format text --text-split line --tokenizer byte --output-prefix " + prefix;
  std::map<int, std::string> inputs;  // MiB -> path
  std::map<int, size_t> line_count;
  const auto input_of = [&](int mib) {
    if (!inputs.count(mib)) {
      std::string lines;
      std::mt19937 rng(static_cast<uint32_t>(mib));
      while (lines.size() < (static_cast<size_t>(mib) << 20)) {
        lines += "line " + std::to_string(rng()) + " of text\n";
        ++line_count[mib];
      }
      inputs[mib] = dir_.write("big" + std::to_string(mib) + ".txt", lines);
    }
    return inputs[mib];
  };
  struct Case {
    int sig;
    bool ignored;
  };
  for (const Case c : {Case{SIGINT, false}, Case{SIGTERM, false}, Case{SIGHUP, false}, Case{SIGHUP, true}}) {
    SCOPED_TRACE(std::string(strsignal(c.sig)) + (c.ignored ? " (ignored, as under nohup)" : ""));
    const std::string log = dir_.path("interrupted.log");
    pid_t pid = -1;
    int input_mib = 0;
    std::string old_bin, old_idx, old_meta;
    for (const int mib : {16, 48}) {
      ASSERT_EQ(run(small_args), 0) << err_;  // the earlier dataset, again if an attempt replaced it
      old_bin = slurp(prefix + ".bin"), old_idx = slurp(prefix + ".idx"), old_meta = slurp(prefix + ".meta.json");
      pid = spawn_prep(echo_prep_path(),
                       {"--input", input_of(mib), "--format", "text", "--text-split", "line", "--tokenizer", "byte",
                        "--chunk-mb", "1", "--threads", "2", "--output-prefix", prefix},
                       log, c.ignored);
      ASSERT_GT(pid, 0);
      // Stop it once the first chunk (1 MiB of text, 4 MiB of int32 ids) is being written.
      const auto start = std::chrono::steady_clock::now();
      std::error_code ec;
      int status = 0;
      bool ended = false;
      while (!(fs::file_size(prefix + ".bin.tmp", ec) >= (1u << 20) && !ec)) {
        ended = ::waitpid(pid, &status, WNOHANG) == pid;
        if (ended || std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!ended) {
        ::kill(pid, SIGSTOP);
        ended = ::waitpid(pid, &status, WUNTRACED) == pid && !WIFSTOPPED(status);
      }
      // Stopped in the encoding loop only if at most half the ids are written: late (the test
      // descheduled a while) it may be in the final renames, where a signal waits for them.
      const uintmax_t all_ids = 4 * (fs::file_size(input_of(mib)) - line_count[mib]);
      const uintmax_t written = fs::file_size(prefix + ".bin.tmp", ec);
      if (!ended && !ec && written <= all_ids / 2) {
        input_mib = mib;
        break;
      }
      if (!ended) {  // too late: let it finish, then a larger input
        ::kill(pid, SIGCONT);
        ASSERT_NE(wait_or_kill(pid, std::chrono::seconds(120)), -1) << slurp(log);
      }
      pid = -1;
    }
    ASSERT_GT(input_mib, 0) << "echo_prep could not be stopped mid-run: " << slurp(log);
    ::kill(pid, c.sig);
    ::kill(pid, SIGCONT);
    const int status = wait_or_kill(pid, std::chrono::seconds(120));
    ASSERT_NE(status, -1) << "echo_prep did not end within 120 s of the signal: " << slurp(log);
    for (const auto& tmp : data::IndexedDatasetWriter::temporary_files(prefix))
      EXPECT_FALSE(fs::exists(tmp)) << tmp << " was left behind";
    if (c.ignored) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ": " << slurp(log);
      EXPECT_EQ(data::IndexedDataset::open(prefix).num_documents(), line_count[input_mib])
          << "the run went on to write every line of the input";
    } else {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == c.sig) << "status " << status << ": " << slurp(log);
      EXPECT_EQ(slurp(prefix + ".bin"), old_bin);
      EXPECT_EQ(slurp(prefix + ".idx"), old_idx);
      EXPECT_EQ(slurp(prefix + ".meta.json"), old_meta);
    }
  }
}

// Two echo_prep runs on one prefix both wrote PREFIX.bin.tmp, the second truncating the first's,
// and each renamed it into place: a .bin of both runs' tokens under one run's index. The second
// is now refused while the first holds PREFIX.lock, and the first's dataset comes out whole.
TEST_F(EchoPrep, ASecondWriterOfOnePrefixIsRefused) {
  const std::string prefix = dir_.path("shared");
  std::string lines;
  size_t count = 0;
  for (std::mt19937 rng(5); lines.size() < (8u << 20); ++count) lines += "row " + std::to_string(rng()) + "\n";
  const std::string big = dir_.write("big.txt", lines);
  const std::string log = dir_.path("first.log");
  const pid_t first = spawn_prep(echo_prep_path(),
                                 {"--input", big, "--format", "text", "--text-split", "line", "--tokenizer", "byte",
                                  "--chunk-mb", "1", "--threads", "1", "--output-prefix", prefix},
                                 log, false);
  ASSERT_GT(first, 0);
  // Stopped once it writes its .bin.tmp (it holds the lock from before that file is made).
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  while (!fs::exists(prefix + ".bin.tmp", ec) && std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(first, SIGSTOP);
  const bool stopped_mid_run = fs::exists(prefix + ".bin.tmp", ec);
  const std::string small = dir_.write("small.txt", "another run's text\n");
  const int second =
      run("--input " + small + " --format text --text-split line --tokenizer byte --output-prefix " + prefix);
  ::kill(first, SIGCONT);
  const int status = wait_or_kill(first, std::chrono::seconds(120));
  ASSERT_TRUE(stopped_mid_run) << "the first echo_prep ended before it could be stopped: " << slurp(log);
  EXPECT_NE(second, 0);
  EXPECT_THAT(err_, HasSubstr("another process is writing the dataset '" + prefix + "' (it holds the lock on " +
                              prefix + ".lock)"));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ": " << slurp(log);
  EXPECT_EQ(data::IndexedDataset::open(prefix).num_documents(), count);
  EXPECT_EQ(data::IndexedDataset::open(prefix).num_tokens(), lines.size() - count);
  EXPECT_FALSE(fs::exists(prefix + ".lock")) << "the lock file is removed with the lock";
  // Free again: the second run now replaces the dataset.
  ASSERT_EQ(run("--input " + small + " --format text --text-split line --tokenizer byte --output-prefix " + prefix), 0)
      << err_;
  EXPECT_EQ(documents_of(prefix), std::vector<std::string>{"another run's text"});
}

// A link planted at a temporary name (.bin.tmp, .idx.tmp, .meta.json.tmp) had the file it named
// truncated and overwritten; now the name is replaced and the file it named is untouched. A link
// at the lock file's name is refused.
TEST_F(EchoPrep, LinksAtTheTemporaryNamesAreNotFollowed) {
  const std::string prefix = dir_.path("linked");
  const std::string input = dir_.write("in.txt", "one\ntwo\n");
  const std::string args =
      "--input " + input + " --format text --text-split line --tokenizer byte --output-prefix " + prefix;
  std::vector<std::string> victims;
  for (const std::string suffix : {".bin.tmp", ".idx.tmp", ".meta.json.tmp"}) {
    victims.push_back(dir_.write("victim" + suffix, "precious " + suffix));
    if (suffix == ".idx.tmp")
      fs::create_hard_link(victims.back(), prefix + suffix);  // a hard link: the same file by another name
    else
      fs::create_symlink(victims.back(), prefix + suffix);
  }
  const mode_t umask_before = ::umask(002);  // the files get 0666 less the umask, as fopen's did
  const int status = run(args);
  ::umask(umask_before);
  ASSERT_EQ(status, 0) << err_;
  EXPECT_EQ(documents_of(prefix), (std::vector<std::string>{"one", "two"}));
  for (const std::string suffix : {".bin", ".idx", ".meta.json"})
    EXPECT_EQ(fs::status(prefix + suffix).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::group_write |
                  fs::perms::others_read)
        << suffix;
  for (const std::string& victim : victims)
    EXPECT_EQ(slurp(victim), "precious " + victim.substr(victim.rfind("victim") + 6));
  const std::string victim = dir_.write("victim.lock", "precious");
  fs::create_symlink(victim, prefix + ".lock");
  EXPECT_NE(run(args), 0);
  EXPECT_THAT(err_, HasSubstr("the dataset's lock file " + prefix + ".lock is a symbolic link"));
  EXPECT_EQ(slurp(victim), "precious");
}

}  // namespace
}  // namespace echo
