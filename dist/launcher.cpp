// launch(): check the options, start the ranks, then one loop that reaps them, reacts to the first
// failure or to a signal, and escalates to SIGKILL on a clock (Note [Launching ranks]).
#include "dist/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "dist/rank_process.h"
#include "dist/socket_io.h"

namespace frugal::dist {

namespace {

using Clock = std::chrono::steady_clock;

// Note [Waiting for ranks]
// The loop polls: waitpid(WNOHANG) on each rank, the signal count, the clock, then a short
// sleep. A blocking wait would need SIGCHLD handling, which belongs to the whole process (a
// program embedding launch() may have children of its own); 10 ms costs nothing next to a rank's
// start-up and keeps every deadline within 10 ms.
constexpr auto kPollInterval = std::chrono::milliseconds(10);

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;     // waitpid's, once reaped
  bool lost = false;  // not reaped kKillWaitSeconds after SIGKILL
};

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string joined(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::string ranks_word(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + joined(ranks);
}

void check_options(const LaunchOptions& o) {
  FRUGAL_CHECK(o.nproc >= 1 && o.nproc <= kMaxProcs, "launch: nproc must be from 1 to ", kMaxProcs,
               ", got ", o.nproc);
  FRUGAL_CHECK(!o.command.empty() && !o.command[0].empty(),
               "launch: the command is empty: give the program each rank runs");
  for (const std::string& arg : o.command) {
    FRUGAL_CHECK(arg.find('\0') == std::string::npos,
                 "launch: a command argument holds a NUL character");
  }
  FRUGAL_CHECK(o.nnodes >= 1 && o.node_rank >= 0 && o.node_rank < o.nnodes,
               "launch: node_rank must be from 0 to nnodes - 1, got node_rank ", o.node_rank,
               " of nnodes ", o.nnodes);
  FRUGAL_CHECK(int64_t{o.nnodes} * o.nproc <= int64_t{kMaxProcs} * kMaxProcs,
               "launch: nnodes * nproc is too large");
  FRUGAL_CHECK(o.nnodes == 1 || o.master_port > 0,
               "launch: several nodes need master_port given (every node's launcher must name ",
               "the same one; a free port chosen here would be this node's alone)");
  FRUGAL_CHECK(o.nnodes == 1 || (o.master_addr != "127.0.0.1" && o.master_addr != "localhost"),
               "launch: several nodes need master_addr to name rank 0's node, not ", o.master_addr);
  FRUGAL_CHECK(o.master_port >= 0 && o.master_port <= 65535,
               "launch: master_port must be from 1 to 65535 (or 0: choose a free one), got ",
               o.master_port);
  FRUGAL_CHECK(!o.master_addr.empty() && o.master_addr.find('\0') == std::string::npos,
               "launch: master_addr must name a host, got '", o.master_addr, "'");
  FRUGAL_CHECK(
      std::isfinite(o.grace_seconds) && o.grace_seconds >= 0 && o.grace_seconds <= kMaxGraceSeconds,
      "launch: grace_seconds must be from 0 to ", kMaxGraceSeconds, ", got ", o.grace_seconds);
  for (const auto& [name, value] : o.extra_env) {
    FRUGAL_CHECK(!name.empty() && name.find('=') == std::string::npos &&
                     name.find('\0') == std::string::npos && value.find('\0') == std::string::npos,
                 "launch: extra_env has a bad variable '", name,
                 "' (an empty name, or '=' in the name, or NUL anywhere)");
    for (const char* reserved : kRankVariables) {
      FRUGAL_CHECK(name != reserved, "launch: extra_env may not set ", name,
                   ": the launcher sets it for each rank");
    }
  }
}

// Whether the launcher's environment or extra_env sets `name`.
bool sets_variable(const std::vector<std::string>& inherited, const LaunchOptions& o,
                   const std::string& name) {
  for (const std::string& entry : inherited) {
    if (entry.rfind(name + "=", 0) == 0) return true;
  }
  for (const auto& [n, value] : o.extra_env) {
    if (n == name) return true;
  }
  return false;
}

// The ranks of one launch and the loop that waits for them.
class Job {
 public:
  Job(const LaunchOptions& o, const SignalCatcher& signals)
      : o_(o), signals_(signals), first_rank_(o.node_rank * o.nproc) {}

  void say(const std::string& line) const {
    if (o_.log == nullptr) return;
    *o_.log << "frugal launch: " << line << '\n';
    o_.log->flush();
  }

  void start(const std::vector<std::string>& env) {
    if (o_.log != nullptr) o_.log->flush();  // before fork: nothing buffered twice
    ranks_.push_back({spawn_rank(o_.command, env, signals_), true, 0, false});
  }

  // A fork failed: the ranks already running must not be left behind.
  void abandon() {
    stop(SIGTERM);
    wait();
  }

  void wait() {
    int signals_seen = 0;
    while (reap()) {
      if (signals_.count() > signals_seen) {
        signals_seen = signals_.count();
        on_launcher_signal(signals_.last());
      }
      if (stopping_ && !killing_ && Clock::now() >= kill_at_) kill_survivors();
      if (killing_ && Clock::now() >= give_up_at_) {
        give_up();
        break;
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  LaunchResult result() const {
    LaunchResult r;
    for (const Rank& rank : ranks_) {
      r.rank_exit_codes.push_back(rank.lost || rank.running ? -1 : exit_code_of(rank.status));
    }
    if (first_failed_ >= 0) {
      const Rank& f = ranks_[first_failed_];
      r.exit_code = exit_code_of(f.status);
      r.failed_rank = first_rank_ + first_failed_;
      r.message = describe_exit(first_rank_ + first_failed_, f.pid, f.status);
    } else if (launcher_signal_ != 0) {
      r.exit_code = 128 + launcher_signal_;
      r.message = "interrupted by " + signal_name(launcher_signal_);
    } else {
      return r;
    }
    if (!stopped_.empty()) r.message += "; stopped " + ranks_word(stopped_);
    if (!killed_.empty()) r.message += "; killed " + ranks_word(killed_) + " with SIGKILL";
    if (!lost_.empty()) r.message += "; could not reap " + ranks_word(lost_);
    return r;
  }

 private:
  // Reaps the ranks that ended; true while some still run. Ranks that ended together are all
  // reaped before the first failure among them (the lowest rank) stops the rest, so that no
  // failed rank is listed as stopped.
  bool reap() {
    std::vector<int> ended;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& rank = ranks_[i];
      if (!rank.running) continue;
      int status = 0;
      const pid_t got = waitpid(rank.pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      rank.running = false;
      // ECHILD: someone else reaped it (SIGCHLD ignored in this process); its end is unknown.
      rank.status = got == rank.pid ? status : (1 << 8);
      ended.push_back(static_cast<int>(i));
    }
    for (int r : ended) {
      if (!stopping_ && failed(ranks_[r].status)) on_failure(r);
    }
    return !running_ranks().empty();
  }

  void on_failure(int rank) {
    first_failed_ = rank;
    say(describe_exit(first_rank_ + rank, ranks_[rank].pid, ranks_[rank].status) +
        (running_ranks().empty() ? "" : "; stopping the other ranks"));
    stop(SIGTERM);
  }

  void on_launcher_signal(int sig) {
    if (stopping_) {  // a second Ctrl-C: the user does not want to wait for the grace period
      if (!killing_) {
        say("got " + signal_name(sig) + " again: killing the ranks now");
        kill_survivors();
      }
      return;
    }
    launcher_signal_ = sig;
    say("got " + signal_name(sig) + "; forwarding it to " + ranks_word(running_ranks()));
    stop(sig);
  }

  // Sends sig to every running rank's process group and starts the grace period.
  void stop(int sig) {
    stopping_ = true;
    stopped_ = running_ranks();
    for (int r : stopped_) kill(-ranks_[r].pid, sig);
    kill_at_ = after(o_.grace_seconds);
  }

  void kill_survivors() {
    killing_ = true;
    killed_ = running_ranks();
    if (!killed_.empty()) {
      say(ranks_word(killed_) + " still running " + seconds(o_.grace_seconds) +
          " after the stop signal: SIGKILL");
    }
    for (int r : killed_) kill(-ranks_[r].pid, SIGKILL);
    give_up_at_ = after(kKillWaitSeconds);
  }

  void give_up() {
    lost_ = running_ranks();
    for (int r : lost_) ranks_[r].lost = true;
    say(ranks_word(lost_) + " not reaped " + seconds(kKillWaitSeconds) +
        " after SIGKILL (stuck in the kernel?); leaving " + (lost_.size() == 1 ? "it" : "them"));
  }

  // This node's ranks (indices) by their global ranks.
  std::string ranks_word(const std::vector<int>& local) const {
    std::vector<int> global;
    for (int r : local) global.push_back(first_rank_ + r);
    return dist::ranks_word(global);
  }

  std::vector<int> running_ranks() const {
    std::vector<int> out;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].running) out.push_back(static_cast<int>(i));
    }
    return out;
  }

  static std::string seconds(double s) {
    std::ostringstream os;
    os << s << " s";
    return os.str();
  }

  const LaunchOptions& o_;
  const SignalCatcher& signals_;
  std::vector<Rank> ranks_;
  bool stopping_ = false, killing_ = false;
  Clock::time_point kill_at_, give_up_at_;
  int first_rank_;  // the global rank of this node's first
  int first_failed_ = -1, launcher_signal_ = 0;
  std::vector<int> stopped_, killed_, lost_;
};

}  // namespace

LaunchResult launch(const LaunchOptions& options) {
  check_options(options);
  const int port = options.master_port > 0 ? options.master_port : choose_free_port();
  const std::vector<std::string> inherited = current_environment();
  const int omp_threads = default_omp_threads(options.nproc);
  SignalCatcher signals;
  Job job(options, signals);
  if (options.nproc > 1 && !sets_variable(inherited, options, "OMP_NUM_THREADS")) {
    job.say("OMP_NUM_THREADS=" + std::to_string(omp_threads) + " for each of " +
            std::to_string(options.nproc) +
            " ranks, the hardware threads shared out (set OMP_NUM_THREADS to choose)");
  }
  for (int rank = 0; rank < options.nproc; ++rank) {
    const std::vector<std::string> env =
        rank_environment(inherited, options, rank, port, omp_threads);
    try {
      job.start(env);
    } catch (...) {
      job.abandon();
      throw;
    }
  }
  job.wait();
  return job.result();
}

std::string current_executable() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

// Note [Choosing a port]
// Bind port 0 on every interface, read back the port the kernel chose, close. Between the close
// and rank 0's bind another process may take it (torchrun has the same window); a job that cannot
// afford that names --master-port.
int choose_free_port() {
  Socket s = listen_on("0.0.0.0", 0);  // closed on return
  return bound_port(s);
}

}  // namespace frugal::dist
