// The check of an option naming a file a program writes when it has finished (--json, --csv).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/atomic_file.h"

namespace echo::apps {

// A CLI11 validator: the path must be one write_file_atomic can write (why_not_writable: a missing
// or read-only folder, a directory, a folder-form name, a link loop, a FIFO no one reads), so a
// long measurement is refused before it starts instead of losing its result at the end.
inline CLI::Validator writable_output() {
  return CLI::Validator(
      [](std::string& path) {
        const std::string why = why_not_writable(path);
        return why.empty() ? std::string() : path + " cannot be written: " + why;
      },
      "FILE", "writable output file");
}

}  // namespace echo::apps
