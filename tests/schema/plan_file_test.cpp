// read_plan_file and write_file_atomically against real files in a scratch directory.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "sample_plan.h"
#include "schema/error.h"
#include "schema/plan_json.h"

namespace mfsdp::schema {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed with everything in it afterwards.
class PlanFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "mfsdp_plan_file_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // The message of the mfsdp::Error that read_plan_file throws, after checking its code.
  static std::string read_error(const std::string& file) {
    try {
      read_plan_file(file);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ExitCode::kUsage);
      const std::string message = error.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      return message;
    }
    ADD_FAILURE() << "read_plan_file(" << file << ") did not throw";
    return "";
  }

  fs::path dir_;
};

std::string read_all(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_F(PlanFile, ReadsWhatWasWritten) {
  const std::string text = dump_plan(sample_plan());
  const std::string file = path("plan.json");
  write_file_atomically(file, text);
  const ParseResult parsed = read_plan_file(file);
  EXPECT_TRUE(parsed.problems.empty());
  EXPECT_EQ(dump_plan(parsed.plan), text);
}

TEST_F(PlanFile, MissingFileIsAUsageError) {
  const std::string file = path("absent.json");
  EXPECT_EQ(read_error(file), file + ": cannot read: No such file or directory");
}

TEST_F(PlanFile, DirectoryIsAUsageError) {
  EXPECT_EQ(read_error(dir_.string()), dir_.string() + ": cannot read: Is a directory");
}

TEST_F(PlanFile, EmptyFileIsAUsageError) {
  const std::string file = write("empty.json", "");
  EXPECT_EQ(read_error(file), file + ": empty file, expected a JSON plan (0 bytes)");
  const std::string blank = write("blank.json", "\n  \n");
  EXPECT_EQ(read_error(blank), blank + ": empty file, expected a JSON plan (4 bytes)");
}

TEST_F(PlanFile, TextThatIsNotJsonIsAUsageError) {
  // The error sits at the newline where the 'e' of true should be.
  const std::string file = write("notes.txt", "{\n  \"schema\": tru\n}\n");
  EXPECT_EQ(read_error(file), file +
                                  ": not valid JSON: syntax error while parsing value - "
                                  "invalid literal (line 2 column 16)");
}

TEST_F(PlanFile, TruncatedPlanIsAUsageError) {
  const std::string text = dump_plan(sample_plan());
  // Cut after a line's comma: the parser runs out of input where the next value should be.
  const size_t cut = text.rfind(",\n", text.size() / 2) + 2;
  const std::string file = write("cut.json", text.substr(0, cut));
  const size_t lines = std::count(text.begin(), text.begin() + cut, '\n');
  const std::string error = read_error(file);
  EXPECT_EQ(error.rfind(file + ": not valid JSON: syntax error while parsing ", 0), 0u) << error;
  EXPECT_NE(error.find(" - unexpected end of input; expected "), std::string::npos) << error;
  const std::string where = "(line " + std::to_string(lines + 1) + " column 1)";
  EXPECT_EQ(error.substr(error.size() - where.size()), where) << error;
}

TEST_F(PlanFile, NumberTooLargeForADoubleIsAUsageError) {
  const std::string file = write("huge.json", "{\"schema\": \"mfsdp.plan/1\",\n \"mesh\": 1e400}");
  EXPECT_EQ(read_error(file),
            file + ": not valid JSON: number overflow parsing '1e400' (line 2 column 14)");
}

TEST_F(PlanFile, ANulByteAndGarbageAfterThePlanAreRefusedAtTheirOffset) {
  const std::string text = dump_plan(sample_plan());
  const size_t lines = std::count(text.begin(), text.end(), '\n');
  const std::string file = write("nul.json", text + std::string("\0garbage", 8));
  EXPECT_EQ(read_error(file), file +
                                  ": not valid JSON: trailing content after the JSON document: a "
                                  "NUL byte at byte offset " +
                                  std::to_string(text.size()) + " (line " +
                                  std::to_string(lines + 1) +
                                  " column 1); a JSON file holds one document, so remove what "
                                  "follows it");
}

TEST_F(PlanFile, TrailingTextAfterThePlanIsRefusedAtItsOffset) {
  const std::string text = dump_plan(sample_plan());
  const std::string file = write("two.json", text + "\n {}");
  const size_t lines = std::count(text.begin(), text.end(), '\n');
  EXPECT_EQ(read_error(file), file +
                                  ": not valid JSON: trailing content after the JSON document at "
                                  "byte offset " +
                                  std::to_string(text.size() + 2) + " (line " +
                                  std::to_string(lines + 2) +
                                  " column 2); a JSON file holds one document, so remove what "
                                  "follows it");
  EXPECT_EQ(read_error(write("true.json", "{} truex")),
            path("true.json") +
                ": not valid JSON: trailing content after the JSON document at byte offset 3 "
                "(line 1 column 4); a JSON file holds one document, so remove what follows it");
}

TEST_F(PlanFile, ANulByteInsideThePlanIsRefusedAtItsOffset) {
  const std::string file = write("inner.json", std::string("{\"schema\": \"mfsdp\0\"}", 20));
  EXPECT_EQ(read_error(file), file +
                                  ": not valid JSON: a NUL byte at byte offset 17 (line 1 column "
                                  "18); JSON text cannot hold one");
  const std::string between = write("between.json", std::string("{\"a\": 1,\0 \"b\": 2}", 17));
  EXPECT_EQ(read_error(between), between +
                                     ": not valid JSON: a NUL byte at byte offset 8 (line 1 "
                                     "column 9); JSON text cannot hold one");
}

TEST_F(PlanFile, UnsupportedSchemaNamesTheFile) {
  const std::string file = write("old.json", R"({"schema": "mfsdp.plan/0"})");
  EXPECT_EQ(read_error(file),
            file + ": unsupported plan schema 'mfsdp.plan/0'; this mfsdp reads: mfsdp.plan/1");
}

TEST_F(PlanFile, DeeplyNestedFileGivesProblems) {
  std::string text = dump_plan(sample_plan());
  const std::string mesh = "\"mesh\": {";
  const size_t at = text.find(mesh);
  const size_t end = text.find('}', at);
  text.replace(at, end + 1 - at,
               "\"mesh\": " + std::string(100000, '[') + std::string(100000, ']'));
  const ParseResult parsed = read_plan_file(write("deep.json", text));
  EXPECT_EQ(problem_lines(parsed.problems),
            std::vector<std::string>{"mesh: expected an object, got an array"});
}

TEST_F(PlanFile, WriteReplacesContentAndLeavesNoTempFile) {
  const std::string file = path("plan.json");
  write_file_atomically(file, "first\n");
  write_file_atomically(file, "second\n");
  EXPECT_EQ(read_all(file), "second\n");
  EXPECT_EQ(listing(), std::vector<std::string>{"plan.json"});
}

TEST_F(PlanFile, WriteOfEmptyTextCreatesEmptyFile) {
  const std::string file = path("empty");
  write_file_atomically(file, "");
  EXPECT_EQ(read_all(file), "");
  EXPECT_EQ(listing(), std::vector<std::string>{"empty"});
}

TEST_F(PlanFile, WriteIntoMissingDirectoryIsAnIoError) {
  const std::string file = path("missing/plan.json");
  try {
    write_file_atomically(file, "text");
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kIo);
    EXPECT_EQ(std::string(error.what()), "cannot write " + file + ": No such file or directory");
  }
  EXPECT_EQ(listing(), std::vector<std::string>{});
}

TEST_F(PlanFile, WriteOverADirectoryFailsAndRemovesTheTempFile) {
  fs::create_directory(path("taken"));
  try {
    write_file_atomically(path("taken"), "text");
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kIo);
    EXPECT_EQ(std::string(error.what()), "cannot write " + path("taken") + ": Is a directory");
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"taken"});
}

}  // namespace
}  // namespace mfsdp::schema
