// echo::raise_all: the checks of a step's deferred faults all run, and what they threw comes out as
// one error: none, the one as it was (its kind kept), or all of them listed in order.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace echo {
namespace {

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
  }
}

}  // namespace
}  // namespace echo
