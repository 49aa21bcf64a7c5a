// The rank-aware logger: rank 0 logs info, other ranks only warnings and errors; every line names
// the rank and the subsystem; loggers obtained before init follow it.
#include "core/log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

#include "core/error.h"

namespace echo {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { spdlog::drop_all(); }
  void TearDown() override { spdlog::drop_all(); }

  // Routes every echo logger to `out` as `rank` of `world_size`.
  static void init_to(std::ostringstream& out, int rank, int world_size,
                      spdlog::level::level_enum level = spdlog::level::info) {
    log::init(rank, world_size, level, {std::make_shared<spdlog::sinks::ostream_sink_mt>(out)});
  }
};

TEST_F(LogTest, RankZeroLogsInfoWithRankAndSubsystem) {
  std::ostringstream out;
  init_to(out, 0, 4);
  ECHO_INFO("comm", "site {} uses {} bits", 3, 4);
  ECHO_DEBUG("comm", "debug is below the level");
  const std::string text = out.str();
  EXPECT_NE(text.find("site 3 uses 4 bits"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 0/4]"), std::string::npos) << text;
  EXPECT_NE(text.find("[comm]"), std::string::npos) << text;
  EXPECT_NE(text.find("info"), std::string::npos) << text;
  EXPECT_EQ(text.find("debug is below"), std::string::npos) << text;
}

TEST_F(LogTest, OtherRanksSuppressInfoButKeepWarningsAndErrors) {
  std::ostringstream out;
  init_to(out, 1, 4);
  ECHO_INFO("train", "step 1 loss 2.5");
  ECHO_WARN("train", "loss spike on this rank");
  ECHO_ERROR("comm", "peer {} lost", 2);
  const std::string text = out.str();
  EXPECT_EQ(text.find("step 1 loss"), std::string::npos) << text;
  EXPECT_NE(text.find("loss spike on this rank"), std::string::npos) << text;
  EXPECT_NE(text.find("peer 2 lost"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 1/4] [train]"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 1/4] [comm]"), std::string::npos) << text;
  // Even a debug level does not let info through on a non-zero rank.
  std::ostringstream out2;
  init_to(out2, 1, 4, spdlog::level::debug);
  ECHO_INFO("train", "still quiet");
  EXPECT_EQ(out2.str(), "");
}

TEST_F(LogTest, LoggersObtainedBeforeInitFollowIt) {
  // Before init: a usable logger that behaves as rank 0 of 1.
  auto comm = log::get("comm");
  ASSERT_NE(comm, nullptr);
  EXPECT_TRUE(comm->should_log(spdlog::level::info));
  EXPECT_EQ(log::get("comm"), comm);

  std::ostringstream out;
  init_to(out, 2, 4);
  EXPECT_FALSE(comm->should_log(spdlog::level::info));
  comm->warn("after init");
  EXPECT_NE(out.str().find("[rank 2/4] [comm]"), std::string::npos) << out.str();

  std::ostringstream out0;
  init_to(out0, 0, 4);
  comm->info("rank zero again");
  EXPECT_NE(out0.str().find("[rank 0/4] [comm]"), std::string::npos) << out0.str();
  EXPECT_EQ(out.str().find("rank zero again"), std::string::npos);  // the old sink is detached
}

TEST_F(LogTest, ForeignLoggersAreLeftAlone) {
  std::ostringstream theirs, ours;
  auto foreign = std::make_shared<spdlog::logger>("foreign", std::make_shared<spdlog::sinks::ostream_sink_mt>(theirs));
  spdlog::register_logger(foreign);
  init_to(ours, 1, 2);
  EXPECT_TRUE(foreign->should_log(spdlog::level::info));
  foreign->info("not ours");
  EXPECT_NE(theirs.str().find("not ours"), std::string::npos);
  EXPECT_EQ(ours.str(), "");
}

TEST_F(LogTest, LevelRulesAndBadRanks) {
  EXPECT_EQ(log::level_for_rank(0, spdlog::level::debug), spdlog::level::debug);
  EXPECT_EQ(log::level_for_rank(3, spdlog::level::debug), spdlog::level::warn);
  EXPECT_EQ(log::level_for_rank(3, spdlog::level::err), spdlog::level::err);
  EXPECT_THROW(log::init(2, 2), Error);
  EXPECT_THROW(log::init(-1, 2), Error);
  EXPECT_THROW(log::init(0, 0), Error);
}

}  // namespace
}  // namespace echo
