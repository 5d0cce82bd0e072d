#include "cli/command_line.h"

#include <algorithm>
#include <iostream>
#include <vector>

#include "schema/error.h"

namespace mfsdp::cli {
namespace {

struct QuietExit {
  ExitCode code;
};

// Levenshtein distance, '_' and '-' counted as the same (torchrun's flags take both).
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const char x = a[i - 1] == '_' ? '-' : a[i - 1];
      const char y = b[j - 1] == '_' ? '-' : b[j - 1];
      const size_t substitute = diagonal + (x == y ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

// For a command line CLI11 found extra arguments in: the first --flag the chosen command does
// not know, with the closest one it does ("did you mean"), as one line; "" when there is none
// (the extras are positional).
std::string unknown_flag(const CLI::App& app, int argc, char** argv) {
  const CLI::App* command = &app;
  for (const CLI::App* sub : app.get_subcommands()) command = sub;
  const std::string usage = command == &app ? "mfsdp" : "mfsdp " + command->get_name();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
    const std::string name =
        arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    bool known = false;
    std::string best;
    size_t best_distance = std::string::npos;
    for (const CLI::App* scope : {command, &app}) {
      for (const CLI::Option* option : scope->get_options()) {
        for (const std::string& long_name : option->get_lnames()) {
          if (long_name == name) known = true;
          const size_t d = distance(name, long_name);
          if (d < best_distance) {
            best_distance = d;
            best = long_name;
          }
        }
      }
    }
    if (known) continue;
    std::string message = usage + " has no flag --" + name;
    if (!best.empty() && best_distance <= std::max<size_t>(2, name.size() / 4)) {
      message += "; did you mean --" + best + "?";
    }
    return message + " (see " + usage + " --help)";
  }
  return "";
}

// For a command line whose first word names no command: one line saying so, with the commands
// and the closest one, or the command that has it as a flag (`mfsdp predict` -> `mfsdp show
// --predict`); "" when the first word is a command or a flag.
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-' || !app.get_subcommands().empty()) return "";
  const std::string word = argv[1];
  std::string names, best, as_flag;
  size_t best_distance = std::string::npos;
  for (const CLI::App* sub : app.get_subcommands({})) {
    const std::string& name = sub->get_name();
    if (name == word) return "";
    names += (names.empty() ? "" : ", ") + name;
    const size_t d = distance(word, name);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
    for (const CLI::Option* option : sub->get_options()) {
      for (const std::string& long_name : option->get_lnames()) {
        if (long_name == word && as_flag.empty()) as_flag = "mfsdp " + name + " --" + word;
      }
    }
  }
  std::string message = "'" + word + "' is not a command; the commands are " + names;
  if (!as_flag.empty()) {
    message += "; did you mean " + as_flag + "?";
  } else if (best_distance <= std::max<size_t>(2, word.size() / 3)) {
    message += "; did you mean mfsdp " + best + "?";
  }
  return message + " (see mfsdp --help)";
}

}  // namespace

void exit_with(ExitCode code) {
  throw QuietExit{code};
}

void describe_app(CLI::App& app, const std::string& version) {
  app.description(
      "mfsdp: compile a fully-sharded data-parallel schedule for a TorchScript model into a "
      "plan file, then train by it.");
  app.name("mfsdp");
  app.set_version_flag("--version", version,
                       "Print the version, the LibTorch it was built with and whether the CUDA "
                       "backend is in, then exit");
  app.require_subcommand(1);
  app.footer("Run 'mfsdp <command> --help' for a command's flags and examples. Docs: docs/.");
}

int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const QuietExit& e) {
    return static_cast<int>(e.code);
  } catch (const CLI::ExtrasError& e) {
    const std::string command = unknown_command(app, argc, argv);
    const std::string flag = command.empty() ? unknown_flag(app, argc, argv) : command;
    std::cerr << "mfsdp: error: " << (flag.empty() ? std::string(e.what()) + " (see --help)" : flag)
              << "\n";
    return static_cast<int>(ExitCode::kUsage);
  } catch (const CLI::ParseError& e) {
    const std::string command = unknown_command(app, argc, argv);
    if (!command.empty()) {
      std::cerr << "mfsdp: error: " << command << "\n";
      return static_cast<int>(ExitCode::kUsage);
    }
    std::cerr << "mfsdp: error: " << e.what() << " (see --help)\n";
    return static_cast<int>(ExitCode::kUsage);
  } catch (const Error& e) {
    std::cerr << "mfsdp: error: " << e.what() << "\n";
    return e.exit_status();
  } catch (const std::exception& e) {
    std::cerr << "mfsdp: internal error: " << e.what() << " (please report this)\n";
    return static_cast<int>(ExitCode::kInternal);
  }
  return 0;
}

}  // namespace mfsdp::cli
