// The `frugal` command line: train, eval, models, compare, estimate, smi.
#include <cstdio>
#include <string>
#include <vector>

#include "base/error.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: frugal <command> [flags]\n"
    "commands:\n"
    "  train    train a model (frugal train --help)\n"
    "  eval     evaluate saved weights (frugal eval --help)\n"
    "  models   list the model registry with parameter counts\n"
    "  compare  train in f32, f16 and bf16 and compare memory and speed (frugal compare --help)\n"
    "  estimate what a training forward keeps for backward, per module (frugal estimate --help)\n"
    "  smi      GPUs, their processes and frugal's own memory statistics (frugal smi --help)\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  try {
    if (cmd == "train") return frugal::tools::cmd_train(rest);
    if (cmd == "eval") return frugal::tools::cmd_eval(rest);
    if (cmd == "models") return frugal::tools::cmd_models(rest);
    if (cmd == "compare") return frugal::tools::cmd_compare(rest);
    if (cmd == "estimate") return frugal::tools::cmd_estimate(rest);
    if (cmd == "smi") return frugal::tools::cmd_smi(rest);
    std::fprintf(stderr, "frugal: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const frugal::tools::UsageError& e) {
    std::fprintf(stderr, "frugal %s\n", e.what());
    return 2;
  } catch (const frugal::OutOfMemoryError& e) {
    std::fprintf(stderr, "frugal %s: out of memory\n%s\n", cmd.c_str(), e.what());
    return 3;
  } catch (const frugal::Error& e) {
    std::fprintf(stderr, "frugal %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
