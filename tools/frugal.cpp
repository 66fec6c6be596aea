// The `frugal` command line: train, eval, models, compare, estimate, smi, launch.
#include <cstdio>
#include <string>
#include <vector>

#include "dist/launched_rank.h"
#include "tools/run_command.h"

namespace {

constexpr const char* kUsage =
    "usage: frugal <command> [flags]\n"
    "commands:\n"
    "  train    train a model (frugal train --help)\n"
    "  eval     evaluate saved weights (frugal eval --help)\n"
    "  models   list the model registry with parameter counts\n"
    "  compare  train in f32, f16 and bf16 and compare memory and speed (frugal compare --help)\n"
    "  estimate what a training forward keeps for backward, per module (frugal estimate --help)\n"
    "  smi      GPUs, their processes and frugal's own memory statistics (frugal smi --help)\n"
    "  launch   start N ranks of a data-parallel job on this machine (frugal launch --help)\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  frugal::dist::die_with_parent_if_launched();  // Note [Ranks behind a wrapper]
  std::vector<std::string> rest(argv + 2, argv + argc);
  return frugal::tools::run_command(argv[1], rest);
}
