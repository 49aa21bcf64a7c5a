// Captures every echo log line (as rank 0 of 1, info and up) for the life of the object, so a
// test can assert what a user would read.
#pragma once

#include <spdlog/sinks/ostream_sink.h>

#include <memory>
#include <sstream>
#include <string>

#include "core/log.h"

namespace echo::testing {

class LogCapture {
 public:
  LogCapture() { log::init(0, 1, spdlog::level::info, {std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)}); }
  ~LogCapture() { log::init(0, 1); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

}  // namespace echo::testing
