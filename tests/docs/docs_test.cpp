// The documentation's examples, run (docs/ci.md#the-docs-test): every `$ command` line in
// a fenced block of README.md and docs/*.md runs from the repository root, in the file's order,
// with /tmp/ redirected to a scratch directory; it must exit 0 (or the code a directive names),
// and the lines the doc shows after it must be what it prints (stdout and stderr together);
// a command shown with no output and followed by another must print nothing.
//
// A command that the doc shows failing (an `error: ` line in its output, or `$ echo $?` after
// it) must fail; `$ cat /tmp/FILE` with the file's text shown makes that file first.
//
// Directives, an HTML comment on its own line just before a block:
//   <!-- docs-test: skip REASON -->   not run here (several hosts, a GPU, ...)
//   <!-- docs-test: file PATH -->     the block is a file's text: written to PATH, not run
//   <!-- docs-test: same-as PATH -->  the block is the text of the repository's file PATH,
//                                     line for line (a program CI builds, shown in full)
//   <!-- docs-test: exit N -->        each command of the block exits N
//   <!-- docs-test: numbers vary -->  numbers in the shown output match any numbers
// In shown output a line `...` stands for any number of lines, and `...` inside a line for
// any text.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/subprocess.h"

namespace mfsdp::testing {
namespace {

namespace fs = std::filesystem;

const std::string kRepo = MFSDP_SOURCE_DIR;
const std::string kBinaryDir = fs::path(MFSDP_BINARY).parent_path().string();

struct Example {
  int line = 0;  // of the command, 1-based
  std::string command;
  std::vector<std::string> shown;  // the output lines after it
};

struct Block {
  int line = 0;
  std::vector<std::string> directives;
  std::vector<std::string> text;
  std::vector<Example> examples;
};

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<Block> read_blocks(const std::string& path) {
  std::ifstream in(path);
  std::vector<Block> blocks;
  std::vector<std::string> pending;  // directives seen since the last block
  std::string line;
  int number = 0;
  bool inside = false;
  Block block;
  while (std::getline(in, line)) {
    ++number;
    const std::string t = trim(line);
    if (!inside) {
      if (starts_with(t, "<!-- docs-test:")) {
        pending.push_back(trim(t.substr(15, t.size() - 15 - (t.size() >= 3 ? 3 : 0))));
      } else if (starts_with(t, "```")) {
        inside = true;
        block = Block{};
        block.line = number;
        block.directives = std::move(pending);
        pending.clear();
      } else if (!t.empty()) {
        pending.clear();
      }
      continue;
    }
    if (starts_with(t, "```")) {
      inside = false;
      blocks.push_back(block);
      continue;
    }
    block.text.push_back(line);
  }
  for (Block& b : blocks) {
    for (size_t i = 0; i < b.text.size(); ++i) {
      const std::string& l = b.text[i];
      if (starts_with(l, "$ ")) {
        Example e;
        e.line = b.line + 1 + static_cast<int>(i);
        e.command = l.substr(2);
        // Continuation lines: a trailing backslash.
        while (!e.command.empty() && e.command.back() == '\\' && i + 1 < b.text.size()) {
          e.command += "\n" + b.text[++i];
        }
        b.examples.push_back(e);
      } else if (!b.examples.empty()) {
        b.examples.back().shown.push_back(l);
      }
    }
  }
  return blocks;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// For `numbers vary`: every number is `#`, a duration (`25s`, `1m08s`, `2h01m`) is `#s`, and
// runs of spaces are one (columns padded to a number's width move with it).
std::string digits_as_hash(const std::string& s) {
  static const std::regex number("[0-9]+(\\.[0-9]+)?");
  static const std::regex duration("#[hms](#[hms])*\\b");
  static const std::regex spaces(" +");
  const std::string hashed = std::regex_replace(s, number, "#");
  return std::regex_replace(std::regex_replace(hashed, duration, "#s"), spaces, " ");
}

// `...` inside a shown line matches any text.
bool line_matches(const std::string& shown, const std::string& actual) {
  if (shown.find("...") == std::string::npos) return shown == actual;
  std::vector<std::string> parts;
  size_t from = 0;
  for (size_t at; (at = shown.find("...", from)) != std::string::npos; from = at + 3) {
    parts.push_back(shown.substr(from, at - from));
  }
  parts.push_back(shown.substr(from));
  if (!starts_with(actual, parts.front())) return false;
  size_t pos = parts.front().size();
  for (size_t p = 1; p + 1 < parts.size(); ++p) {
    pos = actual.find(parts[p], pos);
    if (pos == std::string::npos) return false;
    pos += parts[p].size();
  }
  const std::string& last = parts.back();
  return actual.size() >= pos + last.size() &&
         actual.compare(actual.size() - last.size(), last.size(), last) == 0;
}

// Shown lines against actual ones; a shown `...` line matches any number of lines.
bool lines_match(const std::vector<std::string>& shown, size_t s,
                 const std::vector<std::string>& actual, size_t a) {
  if (s == shown.size()) return a == actual.size();
  if (trim(shown[s]) == "...") {
    for (size_t skip = a; skip <= actual.size(); ++skip) {
      if (lines_match(shown, s + 1, actual, skip)) return true;
    }
    return false;
  }
  return a < actual.size() && line_matches(shown[s], actual[a]) &&
         lines_match(shown, s + 1, actual, a + 1);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // A terminal would have drawn over a carriage-returned line: keep what is left.
    const auto cr = line.rfind('\r');
    if (cr != std::string::npos) line = line.substr(cr + 1);
    lines.push_back(line);
  }
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
  return lines;
}

std::string directive_value(const Block& b, const std::string& name) {
  for (const std::string& d : b.directives) {
    if (d == name || starts_with(d, name + " "))
      return d == name ? "" : trim(d.substr(name.size()));
  }
  return "\x01";  // absent
}

bool has(const Block& b, const std::string& name) {
  return directive_value(b, name) != "\x01";
}

class DocsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DocsTest, ExamplesRunAndPrintWhatTheyShow) {
  const std::string doc = GetParam();
  const fs::path scratch =
      fs::path(::testing::TempDir()) / ("docs_" + fs::path(doc).stem().string());
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  const std::string tmp = scratch.string() + "/";
  int ran = 0;
  for (const Block& block : read_blocks(kRepo + "/" + doc)) {
    if (has(block, "skip")) continue;
    if (has(block, "same-as")) {
      const std::string path = directive_value(block, "same-as");
      SCOPED_TRACE(doc + ":" + std::to_string(block.line) + ": the block shows " + path);
      std::ifstream in(kRepo + "/" + path);
      EXPECT_TRUE(in.good()) << "no such file in the repository";
      std::vector<std::string> file;
      for (std::string l; std::getline(in, l);) file.push_back(l);
      EXPECT_EQ(block.text, file) << "the block and the file differ: copy the file into the doc";
      ++ran;
      continue;
    }
    if (has(block, "file")) {
      const std::string path = replace_all(directive_value(block, "file"), "/tmp/", tmp);
      fs::create_directories(fs::path(path).parent_path());
      std::ofstream out(path.front() == '/' ? path : kRepo + "/" + path);
      for (const std::string& l : block.text) out << l << "\n";
      continue;
    }
    if (block.examples.empty()) continue;
    const std::string exit_text = directive_value(block, "exit");
    const bool numbers_vary = has(block, "numbers vary");
    // One shell per block, so that `$ echo $?` sees the command before it; each command's
    // output ends with a marker line that carries its exit status.
    const std::string marker = "@@docs-test-exit@@ ";
    // `$ cat /tmp/FILE` followed by its text shows a file the reader is to make: make it.
    for (const Example& e : block.examples) {
      if (starts_with(e.command, "cat /tmp/") && e.command.find(' ', 4) == std::string::npos &&
          !e.shown.empty()) {
        std::ofstream out(replace_all(e.command.substr(4), "/tmp/", tmp));
        for (const std::string& l : e.shown) out << l << "\n";
      }
    }
    std::string script = "export PATH='" + kBinaryDir + "':\"$PATH\"\n";
    for (const Example& e : block.examples) {
      script += "(exit $__status)\n" + replace_all(e.command, "/tmp/", tmp) +
                "\n__status=$?; echo; echo \"" + marker + "$__status\"\n";
    }
    const RunResult r =
        run_program("/bin/bash", {"-c", "__status=0\n{\n" + script + "} 2>&1"}, kRepo);
    const std::string all = replace_all(r.out, tmp, "/tmp/");
    size_t from = 0;
    for (size_t i = 0; i < block.examples.size(); ++i) {
      const Example& e = block.examples[i];
      SCOPED_TRACE(doc + ":" + std::to_string(e.line) + ": $ " + e.command);
      ++ran;
      const size_t at = all.find(marker, from);
      if (at == std::string::npos) {
        ADD_FAILURE() << "the block stopped before this command:\n" << all;
        break;
      }
      const std::string output = all.substr(from, at - from);
      const int status = std::atoi(all.c_str() + at + marker.size());
      from = all.find('\n', at);
      from = from == std::string::npos ? all.size() : from + 1;
      // A failure the doc shows on purpose: an `exit N` directive, `$ echo $?` next (which
      // shows the code), or an error line in the shown output.
      const bool echoed =
          i + 1 < block.examples.size() && trim(block.examples[i + 1].command) == "echo $?";
      const bool shows_error =
          std::any_of(e.shown.begin(), e.shown.end(),
                      [](const std::string& l) { return l.find("error: ") != std::string::npos; });
      if (exit_text != "\x01") {
        EXPECT_EQ(status, std::stoi(exit_text)) << output;
      } else if (shows_error) {
        EXPECT_NE(status, 0) << output;
      } else if (!echoed) {
        EXPECT_EQ(status, 0) << output;
      }
      if (e.shown.empty()) {
        // A command the doc shows printing nothing, followed by the next command: it must
        // print nothing (a block's last command may leave its output out).
        if (i + 1 < block.examples.size()) {
          EXPECT_EQ(output.find_first_not_of(" \t\n"), std::string::npos)
              << "the doc shows no output, but it printed:\n"
              << output;
        }
        continue;
      }
      std::vector<std::string> shown = e.shown, actual = split_lines(output);
      while (!shown.empty() && trim(shown.back()).empty()) shown.pop_back();
      if (numbers_vary) {
        for (auto& l : shown) l = digits_as_hash(l);
        for (auto& l : actual) l = digits_as_hash(l);
      }
      EXPECT_TRUE(lines_match(shown, 0, actual, 0)) << "the doc shows:\n"
                                                    <<
          [&] {
            std::string s;
            for (const auto& l : e.shown) s += "  " + l + "\n";
            return s;
          }() << "it printed:\n" << output;
    }
  }
  RecordProperty("examples", ran);
}

// The `Examples:` of every command's --help, run in a scratch directory that holds what they
// name: gpt.pt (the bundled example model), scope.json, train.json, plans to compare (traced),
// a traced plan gpt-traced.plan.json, a profile probe.json, and a run's m.jsonl and t.json.
// Training runs are cut to 3 steps; commands with a `...` placeholder, for GPUs, other hosts
// or torchrun, and pipes into programs this machine lacks, are left out.
std::vector<std::string> help_examples(const std::string& command) {
  const RunResult help = run_program(MFSDP_BINARY, {command, "--help"});
  std::vector<std::string> examples;
  bool in_examples = false;
  std::string pending;
  for (const std::string& line : split_lines(help.out)) {
    if (line == "Examples:") {
      in_examples = true;
      continue;
    }
    if (!in_examples) continue;
    if (!line.empty() && line[0] != ' ') break;  // the next section
    const std::string t = trim(line);
    if (!pending.empty()) {
      pending += " " + t;
    } else if (starts_with(t, "mfsdp ")) {
      pending = t;
    } else {
      continue;
    }
    if (pending.back() == '\\') {
      pending.pop_back();
      continue;
    }
    examples.push_back(pending);
    pending.clear();
  }
  return examples;
}

bool runnable_here(const std::string& example) {
  for (const char* left_out : {"...", "--device cuda", "--nnodes 2", "torchrun"}) {
    if (example.find(left_out) != std::string::npos) return false;
  }
  static const std::regex pipe_into("\\| *([a-z]+)");
  for (std::sregex_iterator it(example.begin(), example.end(), pipe_into), end; it != end; ++it) {
    const RunResult found = run_program("/bin/sh", {"-c", "command -v " + (*it)[1].str()});
    if (found.exit_code != 0) return false;
  }
  return true;
}

TEST(HelpExamples, EveryCommandsExamplesRun) {
  const fs::path dir = fs::path(::testing::TempDir()) / "help_examples";
  fs::remove_all(dir);
  fs::create_directories(dir / "plans");
  fs::create_directories(dir / "models");
  const std::string tmp = (dir / "tmp").string() + "/";
  fs::create_directories(tmp);
  fs::create_directory_symlink(kRepo + "/examples", dir / "examples");
  fs::copy_file(kRepo + "/examples/bytegpt.pt", dir / "gpt.pt");
  fs::copy_file(kRepo + "/examples/bytegpt.pt", dir / "models" / "gpt.pt");
  std::ofstream(dir / "scope.json")
      << R"({"mesh": {"world_size": 2}, "fully_shard": [{"type": "Block"}, "<root>"]})"
      << "\n";
  std::ofstream(dir / "train.json") << R"({"steps": 3, "lr": 0.003})"
                                    << "\n";
  const std::string shell = "export PATH='" + kBinaryDir + "':\"$PATH\"\n";
  // Traced plans, a profile and a short run's metrics and trace, for the prediction examples.
  const std::string traced = " --trace-input 8x64:int64 --trace-repeats 1";
  const std::string setup =
      "mfsdp plan gpt.pt --world-size 2 --unit 'layers.*' --unit '<root>' -o main.plan.json -q" +
      traced +
      " && mfsdp plan gpt.pt --world-size 2 --unit layers.0 --unit '<root>' -o pr.plan.json -q" +
      traced +
      " && cp main.plan.json gpt-traced.plan.json && "
      "mfsdp probe --sizes 4KiB..64KiB --repeats 3 --master-port 0 -o probe.json -q && "
      "mfsdp run gpt-traced.plan.json --data examples/tiny_corpus.txt --seq-len 64 "
      "--global-batch 16 --steps 3 --metrics m.jsonl --trace t.json --trace-steps 1 "
      "--master-port 0 >/dev/null 2>&1 && "
      "cp main.plan.json a.json && cp pr.plan.json b.json && cp main.plan.json plans/gpt.plan.json "
      "&& cp main.plan.json " +
      tmp + "gpt.plan.json";
  ASSERT_EQ(run_program("/bin/bash", {"-c", shell + setup}, dir.string()).exit_code, 0);
  static const std::regex steps("--steps [0-9]+");
  int ran = 0;
  // run before export and reshard: their examples read the checkpoints that training wrote.
  for (const char* command : {"plan", "validate", "show", "diff", "run", "export", "reshard"}) {
    for (const std::string& example : help_examples(command)) {
      if (!runnable_here(example)) continue;
      SCOPED_TRACE("mfsdp " + std::string(command) + " --help: " + example);
      std::string line = std::regex_replace(example, steps, "--steps 3");
      line = replace_all(line, "/tmp/", tmp);
      line = replace_all(line, "ckpt/step-00001000", "ckpt/step-00000003");
      const RunResult r = run_program("/bin/bash", {"-c", shell + line + " 2>&1"}, dir.string());
      ++ran;
      // diff exits 1 when the plans differ, as its help says; a --fail-on that trips, too.
      const bool diff = std::string(command) == "diff";
      EXPECT_TRUE(r.exit_code == 0 || (diff && r.exit_code == 1)) << r.exit_code << "\n" << r.out;
    }
  }
  EXPECT_GE(ran, 20);
  RecordProperty("examples", ran);
}

std::vector<std::string> documents() {
  std::vector<std::string> docs = {"README.md"};
  for (const auto& entry : fs::directory_iterator(kRepo + "/docs")) {
    if (entry.path().extension() == ".md")
      docs.push_back("docs/" + entry.path().filename().string());
  }
  std::sort(docs.begin() + 1, docs.end());
  return docs;
}

INSTANTIATE_TEST_SUITE_P(Docs, DocsTest, ::testing::ValuesIn(documents()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = fs::path(info.param).stem().string();
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace mfsdp::testing
