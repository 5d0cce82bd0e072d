// tests/gtest_main.cpp: a test executable whose run skipped every test exits 77, which ctest
// reports as skipped; a run with a pass or a failure exits as GoogleTest says. Checked by
// running this executable on the disabled tests below (ctest never runs those).
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace {

TEST(GtestMain, DISABLED_Skips) {
  GTEST_SKIP() << "no device";
}
TEST(GtestMain, DISABLED_AlsoSkips) {
  GTEST_SKIP() << "no feature";
}
TEST(GtestMain, DISABLED_Passes) {
  SUCCEED();
}
TEST(GtestMain, DISABLED_Fails) {
  FAIL() << "as meant";
}

// The exit code of this executable running the disabled tests `filter` names.
int exit_code_of(const std::string& filter) {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return -1;
  self[n] = '\0';
  const std::string command = std::string("'") + self + "' --gtest_also_run_disabled_tests " +
                              "--gtest_filter='" + filter + "' >/dev/null 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(GtestMain, ARunThatSkippedEveryTestExits77AndAnyOtherAsGoogleTestSays) {
  EXPECT_EQ(exit_code_of("GtestMain.DISABLED_Skips"), 77);
  EXPECT_EQ(exit_code_of("GtestMain.DISABLED_Skips:GtestMain.DISABLED_AlsoSkips"), 77);
  EXPECT_EQ(exit_code_of("GtestMain.DISABLED_Skips:GtestMain.DISABLED_Passes"), 0);
  EXPECT_EQ(exit_code_of("GtestMain.DISABLED_Skips:GtestMain.DISABLED_Fails"), 1);
  EXPECT_EQ(exit_code_of("GtestMain.DISABLED_Passes"), 0);
  EXPECT_EQ(exit_code_of("NoSuchSuite.*"), 0);  // nothing ran: not a skip
}

}  // namespace
