// `frugal launch`: N local processes of one command as the ranks of a data-parallel job, the
// torchrun way (Note [Launching ranks] in dist/launcher.h).
#include <cstdio>

#include "dist/launcher.h"
#include "tools/commands.h"
#include "tools/options.h"

namespace frugal::tools {

namespace {

constexpr const char* kHelp =
    "usage: frugal launch --nproc N [--master-port P] [--master-addr A] [--grace S] -- COMMAND...\n"
    "  Starts N processes of COMMAND on this machine, ranks 0..N-1 (one per GPU), each with\n"
    "  torchrun's variables RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and\n"
    "  MASTER_PORT, and NCCL_NVLS_ENABLE=0 and OMP_NUM_THREADS (the hardware threads shared out)\n"
    "  unless they are set. Ctrl-C and SIGTERM are forwarded to every rank. When a rank fails,\n"
    "  the others get SIGTERM, then SIGKILL after the grace period, and frugal launch exits with\n"
    "  the failed rank's code (128 + the signal for a signal). A COMMAND whose first word is\n"
    "  `frugal` runs this frugal.\n"
    "  --nproc N             processes to start (required; also --nproc-per-node)\n"
    "  --master-port P       rank 0's port (default: a free one)\n"
    "  --master-addr A       rank 0's address (default 127.0.0.1)\n"
    "  --grace S             seconds from SIGTERM to SIGKILL when stopping the ranks (default 10)\n"
    "  --nnodes M            several machines: one frugal launch on each, with the same M,\n"
    "                        --nproc, --master-addr (rank 0's machine) and --master-port\n"
    "  --node-rank K         this machine's place, 0..M-1: its ranks are K*N .. K*N+N-1\n"
    "example: frugal launch --nproc 2 -- frugal train --model resnet18\n"
    "         frugal launch --nnodes 2 --node-rank 1 --nproc 8 --master-addr node0 \\\n"
    "           --master-port 29500 -- frugal train --precision f16\n";

}  // namespace

int cmd_launch(const std::vector<std::string>& argv) {
  LaunchCommand c = parse_launch_options(argv);
  if (c.help) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  // This executable rather than a PATH search: the frugal that launches is the one that runs.
  std::string& program = c.options.command[0];
  if (program == "frugal") program = dist::current_executable();
  return dist::launch(c.options).exit_code;
}

}  // namespace frugal::tools
