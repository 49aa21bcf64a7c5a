// The check of an option naming a file a program writes when it has finished (--json, --csv).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/atomic_file.h"
#include "core/needed_file.h"

namespace echo::apps {

// A CLI11 validator: the path must be one write_file_atomic can write (why_not_writable: a missing
// or read-only folder, a directory, a folder-form name, a link loop, a FIFO no one reads), so a
// long measurement is refused before it starts instead of losing its result at the end, and must
// not be a file that a run, a checkpoint or a dataset needs (needed_file: a typo once replaced a
// checkpoint's weights or a live run's metrics.jsonl, which stopped that run).
inline CLI::Validator writable_output() {
  return CLI::Validator(
      [](std::string& path) {
        if (const std::string needed = needed_file(path); !needed.empty())
          return path + " is " + needed + ": it would be overwritten; write the output elsewhere";
        const std::string why = why_not_writable(path);
        return why.empty() ? std::string() : path + " cannot be written: " + why;
      },
      "FILE", "writable output file");
}

}  // namespace echo::apps
