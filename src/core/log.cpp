// The rank-aware spdlog setup behind log.h. State lives in spdlog's registry only: the base
// logger "echo" holds the sinks, pattern and level; subsystem loggers are clones sharing its sinks.
#include "core/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>

#include "core/error.h"

namespace echo::log {

namespace {

constexpr const char* kBaseName = "echo";

struct Settings {
  std::vector<spdlog::sink_ptr> sinks;
  spdlog::level::level_enum level;
};

Settings make_settings(int rank, int world_size, spdlog::level::level_enum level, std::vector<spdlog::sink_ptr> sinks) {
  if (sinks.empty()) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  const std::string pattern = pattern_for_rank(rank, world_size);
  // The rank is literal text in each sink's pattern; %n (the logger name) names the subsystem.
  for (auto& sink : sinks) sink->set_formatter(std::make_unique<spdlog::pattern_formatter>(pattern));
  return Settings{std::move(sinks), level_for_rank(rank, level)};
}

void apply(spdlog::logger& logger, const Settings& s) {
  logger.sinks() = s.sinks;
  logger.set_level(s.level);
  logger.flush_on(spdlog::level::warn);  // warnings and errors reach the file before an MPI_Abort
}

// Registers `logger` unless another thread got there first; returns the registered one.
std::shared_ptr<spdlog::logger> register_or_get(std::shared_ptr<spdlog::logger> logger) {
  try {
    spdlog::register_logger(logger);
    return logger;
  } catch (const spdlog::spdlog_ex&) {
    if (auto existing = spdlog::get(logger->name())) return existing;
    throw;
  }
}

std::shared_ptr<spdlog::logger> base_logger() {
  if (auto base = spdlog::get(kBaseName)) return base;
  Settings s = make_settings(0, 1, spdlog::level::info, {});
  auto base = std::make_shared<spdlog::logger>(kBaseName);
  apply(*base, s);
  return register_or_get(std::move(base));
}

}  // namespace

spdlog::level::level_enum level_for_rank(int rank, spdlog::level::level_enum level) {
  return rank == 0 ? level : std::max(level, spdlog::level::warn);
}

std::string pattern_for_rank(int rank, int world_size) {
  return fmt::format("[%Y-%m-%d %H:%M:%S.%e] [rank {}/{}] [%n] [%^%l%$] %v", rank, world_size);
}

void init(int rank, int world_size, spdlog::level::level_enum level, std::vector<spdlog::sink_ptr> sinks) {
  ECHO_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "log::init: rank {} outside a world of {}", rank,
             world_size);
  const Settings s = make_settings(rank, world_size, level, std::move(sinks));
  auto base = base_logger();
  // Loggers cloned from the base share its sink list: that is how the echo loggers are told
  // apart from any other logger in spdlog's registry.
  const std::vector<spdlog::sink_ptr> old_sinks = base->sinks();
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& logger) {
    if (logger != base && logger->sinks() == old_sinks) apply(*logger, s);
  });
  apply(*base, s);
}

std::shared_ptr<spdlog::logger> get(const std::string& subsystem) {
  if (auto logger = spdlog::get(subsystem)) return logger;
  return register_or_get(base_logger()->clone(subsystem));
}

}  // namespace echo::log
