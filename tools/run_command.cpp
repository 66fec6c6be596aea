// The command dispatch and the one place that catches what a command throws.
#include "tools/run_command.h"

#include <filesystem>
#include <new>
#include <system_error>

#include "base/error.h"
#include "dist/env.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace frugal::tools {

namespace {

// "[rank 1/4] " when this process is one rank of a data-parallel job, "" otherwise: the ranks'
// messages land in one terminal or log, and a message must say which rank it came from.
std::string rank_prefix() {
  try {
    const dist::DistEnv env = dist::dist_env();
    if (env.distributed()) return detail::str("[rank ", env.rank, "/", env.world_size, "] ");
  } catch (const Error&) {  // a malformed environment: the command's own error says so
  }
  return "";
}

}  // namespace

int run_guarded(const std::string& command, const std::function<int()>& body, std::FILE* err) {
  const char* cmd = command.c_str();
  const std::string who = rank_prefix();
  const char* rank = who.c_str();
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(err, "%sfrugal %s\n", rank, e.what());  // the message starts with the command
    return kExitUsage;
  } catch (const OutOfMemoryError& e) {
    std::fprintf(err, "%sfrugal %s: out of memory\n%s\n", rank, cmd, e.what());
    return kExitOutOfMemory;
  } catch (const Error& e) {
    std::fprintf(err, "%sfrugal %s: error: %s\n", rank, cmd, e.what());
    return kExitError;
  } catch (const std::bad_alloc& e) {
    std::fprintf(err, "%sfrugal %s: out of host memory (%s)\n", rank, cmd, e.what());
    return kExitOutOfMemory;
  } catch (const std::filesystem::filesystem_error& e) {  // before system_error, its base
    std::fprintf(err, "%sfrugal %s: file system error: %s\n", rank, cmd, e.what());
    return kExitSystem;
  } catch (const std::system_error& e) {
    std::fprintf(err, "%sfrugal %s: system error: %s\n", rank, cmd, e.what());
    return kExitSystem;
  } catch (const std::exception& e) {
    std::fprintf(err, "%sfrugal %s: unexpected error (a bug; please report it): %s\n", rank, cmd,
                 e.what());
    return kExitInternal;
  } catch (...) {
    std::fprintf(err,
                 "%sfrugal %s: unexpected error (a bug; please report it): an exception "
                 "that is not a std::exception\n",
                 rank, cmd);
    return kExitInternal;
  }
}

int run_command(const std::string& command, const std::vector<std::string>& args) {
  return run_guarded(command, [&]() -> int {
    if (command == "train") return cmd_train(args);
    if (command == "eval") return cmd_eval(args);
    if (command == "models") return cmd_models(args);
    if (command == "compare") return cmd_compare(args);
    if (command == "estimate") return cmd_estimate(args);
    if (command == "smi") return cmd_smi(args);
    if (command == "launch") return cmd_launch(args);
    throw UsageError(command + ": unknown command (see frugal --help)");
  });
}

}  // namespace frugal::tools
