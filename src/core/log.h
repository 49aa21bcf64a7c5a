// Rank-aware logging: spdlog behind a thin wrapper. Every line carries the time, the rank and the
// subsystem; info and below come from rank 0 only, warnings and errors from every rank.
//
//   echo::log::init(rank, world_size, spdlog::level::info);   // once, after MPI_Init
//   ECHO_INFO("comm", "site {} uses {} bits", site_idx, bits);
//
// The configuration lives in spdlog's registry (a base logger named "echo" that the subsystem
// loggers are cloned from), so there is no other process-wide state. Logging before init works
// and behaves as rank 0 of 1. NOTE: init is meant for start-up; calling it while other threads
// log is not safe (spdlog does not lock a logger's sink list).
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

namespace echo::log {

// Configures every echo logger, including ones obtained before. `sinks` empty means coloured
// stderr; tests pass their own. Throws echo::Error unless 0 <= rank < world_size.
void init(int rank, int world_size, spdlog::level::level_enum level = spdlog::level::info,
          std::vector<spdlog::sink_ptr> sinks = {});

// The logger for a subsystem ("comm", "train", ...), created on first use. The pointer stays
// valid, and follows later init calls.
std::shared_ptr<spdlog::logger> get(const std::string& subsystem);

// The level a rank logs at: `level` on rank 0, at least warn elsewhere.
spdlog::level::level_enum level_for_rank(int rank, spdlog::level::level_enum level);

// "[%Y-%m-%d %H:%M:%S.%e] [rank R/W] [%n] [%l] %v" with the rank filled in.
std::string pattern_for_rank(int rank, int world_size);

}  // namespace echo::log

#define ECHO_TRACE(subsys, ...) ::echo::log::get(subsys)->trace(__VA_ARGS__)
#define ECHO_DEBUG(subsys, ...) ::echo::log::get(subsys)->debug(__VA_ARGS__)
#define ECHO_INFO(subsys, ...) ::echo::log::get(subsys)->info(__VA_ARGS__)
#define ECHO_WARN(subsys, ...) ::echo::log::get(subsys)->warn(__VA_ARGS__)
#define ECHO_ERROR(subsys, ...) ::echo::log::get(subsys)->error(__VA_ARGS__)
