// echo::Error's kinds: an internal error's what() points into the source, an input or run error's
// is its message alone. echo::rethrow_with_context keeps the kind and an internal error's place.
// echo::raise_all: the checks of a step's deferred faults all run, and what they threw comes out as
// one error: none, the one as it was (its kind kept), or all of them listed in order.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"

namespace echo {
namespace {

TEST(ErrorKinds, OnlyInternalErrorsNameTheirSource) {
  const int x = 3;
  try {
    ECHO_CHECK(x == 4, "x is {}", x);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::internal);
    EXPECT_EQ(std::string(e.what()).rfind("x is 3 [check 'x == 4' failed at ", 0), 0u) << e.what();
  }
  try {
    ECHO_RUN_CHECK(x == 4, "disk full writing {}", "f.bin");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::run);
    EXPECT_FALSE(e.is_input());
    EXPECT_NE(dynamic_cast<const RunError*>(&e), nullptr);
    EXPECT_STREQ(e.what(), "disk full writing f.bin");
  }
  try {
    ECHO_INPUT_FAIL("bad key {}", "a.b");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::input);
    EXPECT_STREQ(e.what(), "bad key a.b");
  }
}

TEST(ErrorKinds, ContextKeepsTheKindAndTheSource) {
  auto rethrown = [](const std::function<void()>& f) -> std::string {
    try {
      try {
        f();
      } catch (const Error& e) {
        rethrow_with_context(e, "at step 5: ", "; checkpoint kept");
      }
    } catch (const Error& e) {
      return fmt::format("{}|{}|{}", static_cast<int>(e.kind()), e.message(), e.what());
    }
    return "no error";
  };
  EXPECT_EQ(rethrown([] { ECHO_RUN_FAIL("loss nan"); }),
            fmt::format("{}|at step 5: loss nan; checkpoint kept|at step 5: loss nan; checkpoint kept",
                        static_cast<int>(Error::Kind::run)));
  EXPECT_EQ(rethrown([] { ECHO_INPUT_FAIL("bad row"); }),
            fmt::format("{}|at step 5: bad row; checkpoint kept|at step 5: bad row; checkpoint kept",
                        static_cast<int>(Error::Kind::input)));
  // An internal error still points at the line that raised it, not at the caller that added context.
  const int line = __LINE__ + 1;
  const std::string internal = rethrown([] { ECHO_FAIL("broken invariant"); });
  EXPECT_EQ(internal.rfind(fmt::format("{}|at step 5: broken invariant; checkpoint kept|", 0), 0), 0u) << internal;
  EXPECT_NE(internal.find(fmt::format("error_test.cpp:{}]", line)), std::string::npos) << internal;
  // A failed check keeps its condition too.
  const std::string check = rethrown([] {
    const int x = 3;
    ECHO_CHECK(x == 4, "x is {}", x);
  });
  EXPECT_NE(check.find("at step 5: x is 3; checkpoint kept [check 'x == 4' failed at "), std::string::npos) << check;
}

TEST(RaiseAll, NothingWhenNoCheckThrows) {
  int ran = 0;
  EXPECT_NO_THROW(raise_all({[&] { ++ran; }, [&] { ++ran; }}));
  EXPECT_EQ(ran, 2);
}

TEST(RaiseAll, OneErrorComesOutAsItWas) {
  int ran = 0;
  try {
    raise_all({[&] { ++ran; }, [&] { ++ran, ECHO_INPUT_FAIL("bad row {}", 7); }, [&] { ++ran; }});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "bad row 7");
    EXPECT_TRUE(e.is_input());
    EXPECT_NE(dynamic_cast<const InputError*>(&e), nullptr) << "rethrown as the InputError it was";
  }
  EXPECT_EQ(ran, 3);  // the checks after the throwing one ran too
}

TEST(RaiseAll, SeveralErrorsAreListedInOrder) {
  try {
    raise_all({[] { ECHO_FAIL("first cause at site {}", 2); }, [] {}, [] { ECHO_FAIL("a NaN downstream"); }});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_EQ(m.find("2 faults were noted in this step:"), 0u) << m;
    const size_t first = m.find("1. first cause at site 2"), second = m.find("2. a NaN downstream");
    ASSERT_NE(first, std::string::npos) << m;
    ASSERT_NE(second, std::string::npos) << m;
    EXPECT_LT(first, second);
    EXPECT_EQ(e.kind(), Error::Kind::internal) << "a bug among the faults keeps it an internal error";
  }
  try {
    raise_all({[] { ECHO_RUN_FAIL("NaN in x"); }, [] { ECHO_RUN_FAIL("NaN in y"); }});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::run);
    EXPECT_EQ(std::string(e.what()), "2 faults were noted in this step:\n  1. NaN in x\n  2. NaN in y");
  }
  try {
    raise_all({[] { ECHO_INPUT_FAIL("bad a"); }, [] { ECHO_INPUT_FAIL("bad b"); }});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::input) << "inputs alone stay an input error";
  }
  try {
    raise_all({[] { ECHO_INPUT_FAIL("bad a"); }, [] { ECHO_RUN_FAIL("NaN"); }});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::run);
  }
}

}  // namespace
}  // namespace echo
