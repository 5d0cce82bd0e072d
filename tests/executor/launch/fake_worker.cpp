// A worker for the launcher tests: runs its arguments as actions, in order. An action
// prefixed "@R:" runs only on rank R (from RANK). All output goes through write(2), unbuffered.
//   pid            print "pid=<pid>"
//   out=N, err=N   print N lines "out <i> of rank <R>" to stdout ("err ..." to stderr)
//   burst=N        print N long lines to stdout in small writes that split lines (eburst: stderr)
//   partial=TEXT   print TEXT without a newline
//   error=TEXT     print "mfsdp: error: TEXT" to stderr, as mfsdp reports a failure
//   env=NAME       print "NAME=<value>" or "NAME unset"
//   create=PATH    create the file PATH
//   wait-usr1      wait until the test sends SIGUSR1 (blocked from the start, so none is lost)
//   ignore-term    ignore SIGTERM;  trap-term: on SIGTERM print "terminated by SIGTERM", exit 143
//   block          wait forever
//   exit=K         exit with K;  kill=S: send itself signal S

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) _exit(120);
    done += static_cast<size_t>(n);
  }
}

extern "C" void on_sigterm(int) {
  const char text[] = "terminated by SIGTERM\n";
  ssize_t ignored = write(STDOUT_FILENO, text, sizeof text - 1);
  (void)ignored;
  _exit(143);
}

// Lines of a fixed form the tests can check for damage: "rank R line I " + 300 letters.
void burst(int fd, const std::string& rank, int count) {
  std::string text;
  const char letter = static_cast<char>('a' + std::atoi(rank.c_str()) % 26);
  for (int i = 1; i <= count; ++i) {
    text += "rank " + rank + " line " + std::to_string(i) + " " + std::string(300, letter) + "\n";
  }
  // 97-byte writes: lines arrive at the launcher in pieces, as from a real program.
  for (size_t at = 0; at < text.size(); at += 97) write_all(fd, text.substr(at, 97));
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, nullptr);
  const char* rank_variable = std::getenv("RANK");
  const std::string rank = rank_variable ? rank_variable : "?";

  for (int i = 1; i < argc; ++i) {
    std::string action = argv[i];
    if (action.rfind('@', 0) == 0) {
      const size_t colon = action.find(':');
      if (action.substr(1, colon - 1) != rank) continue;
      action = action.substr(colon + 1);
    }
    const size_t equals = action.find('=');
    const std::string name = action.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : action.substr(equals + 1);
    if (name == "pid") {
      write_all(STDOUT_FILENO, "pid=" + std::to_string(getpid()) + "\n");
    } else if (name == "out" || name == "err") {
      const int fd = name == "out" ? STDOUT_FILENO : STDERR_FILENO;
      for (int line = 1; line <= std::atoi(value.c_str()); ++line) {
        write_all(fd, name + " " + std::to_string(line) + " of rank " + rank + "\n");
      }
    } else if (name == "burst" || name == "eburst") {
      burst(name == "burst" ? STDOUT_FILENO : STDERR_FILENO, rank, std::atoi(value.c_str()));
    } else if (name == "partial") {
      write_all(STDOUT_FILENO, value);
    } else if (name == "error") {
      write_all(STDERR_FILENO, "mfsdp: error: " + value + "\n");
    } else if (name == "env") {
      const char* set = std::getenv(value.c_str());
      write_all(STDOUT_FILENO, set ? value + "=" + set + "\n" : value + " unset\n");
    } else if (name == "create") {
      close(open(value.c_str(), O_WRONLY | O_CREAT, 0644));
    } else if (name == "wait-usr1") {
      int signal = 0;
      sigwait(&usr1, &signal);
    } else if (name == "ignore-term") {
      signal(SIGTERM, SIG_IGN);
    } else if (name == "trap-term") {
      signal(SIGTERM, on_sigterm);
    } else if (name == "block") {
      for (;;) pause();
    } else if (name == "exit") {
      _exit(std::atoi(value.c_str()));
    } else if (name == "kill") {
      kill(getpid(), std::atoi(value.c_str()));
    } else {
      write_all(STDERR_FILENO, "fake worker: unknown action " + action + "\n");
      return 125;
    }
  }
  return 0;
}
