// The command dispatch and the one place that catches what a command throws.
#include "tools/run_command.h"

#include <filesystem>
#include <new>
#include <system_error>

#include "base/error.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace frugal::tools {

int run_guarded(const std::string& command, const std::function<int()>& body, std::FILE* err) {
  const char* cmd = command.c_str();
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(err, "frugal %s\n", e.what());  // the message starts with the command
    return kExitUsage;
  } catch (const OutOfMemoryError& e) {
    std::fprintf(err, "frugal %s: out of memory\n%s\n", cmd, e.what());
    return kExitOutOfMemory;
  } catch (const Error& e) {
    std::fprintf(err, "frugal %s: error: %s\n", cmd, e.what());
    return kExitError;
  } catch (const std::bad_alloc& e) {
    std::fprintf(err, "frugal %s: out of host memory (%s)\n", cmd, e.what());
    return kExitOutOfMemory;
  } catch (const std::filesystem::filesystem_error& e) {  // before system_error, its base
    std::fprintf(err, "frugal %s: file system error: %s\n", cmd, e.what());
    return kExitSystem;
  } catch (const std::system_error& e) {
    std::fprintf(err, "frugal %s: system error: %s\n", cmd, e.what());
    return kExitSystem;
  } catch (const std::exception& e) {
    std::fprintf(err, "frugal %s: unexpected error (a bug; please report it): %s\n", cmd, e.what());
    return kExitInternal;
  } catch (...) {
    std::fprintf(err,
                 "frugal %s: unexpected error (a bug; please report it): an exception "
                 "that is not a std::exception\n",
                 cmd);
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
