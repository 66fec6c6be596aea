// Running one `frugal` command with every exception turned into a one-line message naming the
// command and an exit code that says what kind of failure it was: no exception reaches
// std::terminate.
//
//   int main(int argc, char** argv) { ...; return run_command(argv[1], rest); }
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace frugal::tools {

enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,        // frugal::Error: bad input file, failed check
  kExitUsage = 2,        // UsageError: a bad flag or command line
  kExitOutOfMemory = 3,  // OutOfMemoryError (a device) or std::bad_alloc (the host)
  kExitSystem = 4,       // the operating system refused: std::filesystem_error, std::system_error
  kExitInternal = 5,     // any other exception: a bug in frugal, reported rather than aborting
};

// Runs body and returns its exit code, or prints what went wrong to `err` and returns the code
// of the exception's kind.
int run_guarded(const std::string& command, const std::function<int()>& body,
                std::FILE* err = stderr);

// `frugal <command> args...`: the command's exit code; an unknown command is a usage error.
int run_command(const std::string& command, const std::vector<std::string>& args);

}  // namespace frugal::tools
