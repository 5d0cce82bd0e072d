#include "executor/launch/rank_output.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace mfsdp::launch {
namespace {

// A temporary file standing in for the launcher's stdout or a log file.
class CapturedFile {
 public:
  CapturedFile() {
    std::string path = ::testing::TempDir() + "/mfsdp_rank_output_XXXXXX";
    fd_ = mkstemp(path.data());
    unlink(path.c_str());
  }
  ~CapturedFile() { close(fd_); }
  int fd() const { return fd_; }
  std::string text() const {
    std::string result;
    char buffer[4096];
    ssize_t n;
    for (off_t at = 0; (n = pread(fd_, buffer, sizeof buffer, at)) > 0; at += n) {
      result.append(buffer, static_cast<size_t>(n));
    }
    return result;
  }

 private:
  int fd_;
};

TEST(RankOutput, PassesOnAnErrorLineEveryRankPrintsOnce) {
  CapturedFile out, err;
  ErrorLines errors;
  RankOutput rank0(0, out.fd(), err.fd(), true, "test", 10, &errors);
  RankOutput rank1(1, out.fd(), err.fd(), true, "test", 10, &errors);
  rank1.add(Output::kStderr, "mfsdp: error: bad batch\n");
  rank0.add(Output::kStderr, "mfsdp: error: bad batch\n");
  rank0.add(Output::kStderr, "mfsdp: error: another\n");
  // The same error with each rank's own numbers in it.
  rank0.add(Output::kStderr, "mfsdp: error: ids 5..204 of rank 0\n");
  rank1.add(Output::kStderr, "mfsdp: error: ids 38..232 of rank 1\n");
  rank1.add(Output::kStderr, "not an error\n");
  rank0.add(Output::kStderr, "not an error\n");
  EXPECT_EQ(err.text(),
            "[rank 1] mfsdp: error: bad batch\n"
            "[rank 0] mfsdp: error: another\n"
            "[rank 0] mfsdp: error: ids 5..204 of rank 0\n"
            "[rank 1] not an error\n"
            "[rank 0] not an error\n");
  EXPECT_EQ(errors.ranks_of("mfsdp: error: bad batch"), (std::vector<int>{1, 0}));
  EXPECT_EQ(errors.ranks_of("mfsdp: error: ids 38..232 of rank 1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(errors.ranks_of("mfsdp: error: another"), (std::vector<int>{0}));
  // Each rank's own recent lines still hold what it printed.
  EXPECT_EQ(rank0.recent().front(), "mfsdp: error: bad batch");
}

TEST(RankOutput, PassesOnOnlyWholeLinesWithThePrefix) {
  CapturedFile out, err;
  RankOutput output(3, out.fd(), err.fd(), true, "test");
  output.add(Output::kStdout, "ab");
  EXPECT_EQ(out.text(), "");
  output.add(Output::kStdout, "c\nde");
  output.add(Output::kStderr, "warn");
  EXPECT_EQ(out.text(), "[rank 3] abc\n");
  output.add(Output::kStdout, "f\n\n");
  output.add(Output::kStderr, "ing\n");
  EXPECT_EQ(out.text(), "[rank 3] abc\n[rank 3] def\n[rank 3] \n");
  EXPECT_EQ(err.text(), "[rank 3] warning\n");
}

TEST(RankOutput, FinishPassesOnALastLineWithoutNewline) {
  CapturedFile out, err;
  RankOutput output(0, out.fd(), err.fd(), true, "test");
  output.add(Output::kStdout, "done\nno newline");
  output.finish(Output::kStdout);
  output.finish(Output::kStdout);
  EXPECT_EQ(out.text(), "[rank 0] done\n[rank 0] no newline\n");
}

// Rank 0's live progress: "\r\033[K<status>\r" redraws one line in place; the next whole
// line clears it first. Status lines are not kept for failure reports.
TEST(RankOutput, StatusLinesAreDrawnInPlaceAndClearedByTheNextLine) {
  CapturedFile out, err;
  RankOutput output(0, out.fd(), err.fd(), true, "test");
  output.add(Output::kStdout, "\r\033[Kstep 1\r");
  EXPECT_EQ(out.text(), "\r\033[K[rank 0] step 1");
  output.add(Output::kStdout, "\r\033[Kstep 2\r\r\033[Kdone\n");
  EXPECT_EQ(out.text(), "\r\033[K[rank 0] step 1\r\033[K[rank 0] step 2\r\033[K[rank 0] done\n");
  output.add(Output::kStdout, "plain\n");
  EXPECT_EQ(out.text().substr(out.text().size() - 15), "[rank 0] plain\n");
  ASSERT_EQ(output.recent().size(), 2u);
  EXPECT_EQ(output.recent().front(), "done");
}

TEST(RankOutput, LogFilesDropStatusLines) {
  CapturedFile log;
  RankOutput output(1, log.fd(), log.fd(), false, "log");
  output.add(Output::kStdout, "\r\033[Kstep 1\r\r\033[Kstep 2\n");
  EXPECT_EQ(log.text(), "step 2\n");
}

TEST(RankOutput, LogFilesGetBothStreamsWithoutPrefix) {
  CapturedFile log;
  RankOutput output(1, log.fd(), log.fd(), false, "rank-1.log");
  output.add(Output::kStdout, "out ");
  output.add(Output::kStderr, "err\n");
  output.add(Output::kStdout, "line\n");
  EXPECT_EQ(log.text(), "err\nout line\n");
}

TEST(RankOutput, EndlessLineIsPassedOnInPieces) {
  CapturedFile out, err;
  RankOutput output(0, out.fd(), err.fd(), false, "test");
  output.add(Output::kStdout, std::string(RankOutput::kMaxLine + 10, 'x'));
  EXPECT_EQ(out.text(), std::string(RankOutput::kMaxLine, 'x') + "\n");
  output.finish(Output::kStdout);
  EXPECT_EQ(out.text(),
            std::string(RankOutput::kMaxLine, 'x') + "\n" + std::string(10, 'x') + "\n");
}

TEST(RankOutput, KeepsTheLastLinesOfBothStreams) {
  CapturedFile out, err;
  RankOutput output(0, out.fd(), err.fd(), true, "test", 3);
  output.add(Output::kStdout, "1\n2\n");
  output.add(Output::kStderr, "3\n");
  output.add(Output::kStdout, "4\n5");
  EXPECT_EQ(output.recent(), (std::deque<std::string>{"2", "3", "4"}));
  output.finish(Output::kStdout);
  EXPECT_EQ(output.recent(), (std::deque<std::string>{"3", "4", "5"}));
}

}  // namespace
}  // namespace mfsdp::launch
