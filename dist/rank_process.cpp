// Starting a rank: everything the child needs is built before fork, because between fork and
// exec a child of a multithreaded process may only make async-signal-safe calls.
#include "dist/rank_process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <thread>

#include "base/error.h"

namespace frugal::dist {

namespace {

// Sets NAME=value in env, replacing an existing NAME, or only where NAME is absent.
void set_variable(std::vector<std::string>& env, const std::string& name, const std::string& value,
                  bool replace) {
  const std::string prefix = name + "=";
  for (std::string& entry : env) {
    if (entry.rfind(prefix, 0) == 0) {
      if (replace) entry = prefix + value;
      return;
    }
  }
  env.push_back(prefix + value);
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// What SIGINT and SIGTERM did before the launcher caught them, in SignalCatcher::kSignals' order.
using Dispositions = std::array<struct sigaction, SignalCatcher::kSignals.size()>;

// The child's side of spawn_rank: async-signal-safe calls only, and never a return.
[[noreturn]] void exec_rank(char* const* argv, char* const* envp, const Dispositions& previous,
                            const sigset_t& old_mask, pid_t launcher, std::string& error_line) {
  setpgid(0, 0);
  // Note [Launching ranks]: a rank dies with the launcher. The check after prctl closes the race
  // of a launcher that died before it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(128 + SIGKILL);
  for (size_t i = 0; i < previous.size(); ++i) {
    sigaction(SignalCatcher::kSignals[i], &previous[i], nullptr);
  }
  // The rank's group is in the terminal's background: reading the terminal would stop it
  // (SIGTTIN), a hang that waitpid does not report, so a terminal stdin becomes /dev/null.
  if (isatty(STDIN_FILENO)) {
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      close(null_fd);
    }
  }
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);  // a signal pending since fork arrives here
  execvpe(argv[0], argv, envp);
  // error_line holds the prefix and room for the reason: append in place, one write.
  const char* why = strerrordesc_np(errno);
  if (why == nullptr) why = "unknown error";
  const size_t prefix = strlen(error_line.data());
  const size_t room = error_line.size() - prefix - 2;
  const size_t n = std::min(strlen(why), room);
  memcpy(error_line.data() + prefix, why, n);
  error_line[prefix + n] = '\n';
  if (write(STDERR_FILENO, error_line.data(), prefix + n + 1) < 0) {
  }  // nothing more to say
  _exit(127);
}

}  // namespace

int default_omp_threads(int nproc) {
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, threads / std::max(1, nproc));
}

std::vector<std::string> rank_environment(const std::vector<std::string>& inherited,
                                          const LaunchOptions& options, int rank, int port,
                                          int omp_threads) {
  std::vector<std::string> env = inherited;
  set_variable(env, "RANK", std::to_string(options.node_rank * options.nproc + rank), true);
  set_variable(env, "WORLD_SIZE", std::to_string(options.nnodes * options.nproc), true);
  set_variable(env, "LOCAL_RANK", std::to_string(rank), true);
  set_variable(env, "LOCAL_WORLD_SIZE", std::to_string(options.nproc), true);
  set_variable(env, "MASTER_ADDR", options.master_addr, true);
  set_variable(env, "MASTER_PORT", std::to_string(port), true);
  set_variable(env, kLaunchedVariable, "1", true);  // Note [Ranks behind a wrapper]
  for (const auto& [name, value] : options.extra_env) set_variable(env, name, value, true);
  set_variable(env, "NCCL_NVLS_ENABLE", "0", false);
  set_variable(env, "OMP_NUM_THREADS", std::to_string(omp_threads), false);
  return env;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

pid_t spawn_rank(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 const SignalCatcher& signals) {
  const std::vector<char*> c_argv = c_strings(argv), c_env = c_strings(env);
  std::string error_line = "frugal launch: cannot run '" + argv[0] + "': ";
  error_line.resize(error_line.size() + 256, '\0');
  const pid_t launcher = getpid();
  Dispositions previous;
  for (size_t i = 0; i < previous.size(); ++i) {
    previous[i] = signals.previous(SignalCatcher::kSignals[i]);
  }
  // SIGINT and SIGTERM wait until the child has its own dispositions back: caught in between,
  // they would run the launcher's handler in the child and be lost.
  sigset_t block, old_mask;
  sigemptyset(&block);
  for (int sig : SignalCatcher::kSignals) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old_mask);
  const pid_t pid = fork();
  if (pid == 0) exec_rank(c_argv.data(), c_env.data(), previous, old_mask, launcher, error_line);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  FRUGAL_CHECK(pid > 0, "launch: cannot start a process for '", argv[0],
               "': fork failed: ", strerror(fork_errno));
  // Also here, so that the group exists before launch() may signal it, whoever runs first.
  setpgid(pid, pid);
  return pid;
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;  // stopped or continued: not an end, never passed here
}

bool failed(int wait_status) { return exit_code_of(wait_status) != 0; }

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string describe_exit(int rank, pid_t pid, int wait_status) {
  std::string s = "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    s += " was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
    if (WCOREDUMP(wait_status)) s += " and dumped core";
    return s;
  }
  const int code = exit_code_of(wait_status);
  s += " exited with code " + std::to_string(code);
  if (code == 127) s += " (a command not found or that could not run)";
  return s;
}

}  // namespace frugal::dist
