// `frugal launch` flags into LaunchCommand: everything before `--` is the launcher's, everything
// after it the ranks' command, untouched (its flags are the ranks' to parse).
#include <algorithm>

#include "tools/options.h"

namespace frugal::tools {

LaunchCommand parse_launch_options(const std::vector<std::string>& argv) {
  const auto dashes = std::find(argv.begin(), argv.end(), "--");
  const std::vector<std::string> flags(argv.begin(), dashes);
  LaunchCommand c;
  // Without `--` the command would read as the launcher's flags: help, or say where it goes.
  if (dashes == argv.end() || dashes + 1 == argv.end()) {
    c.help = std::find(flags.begin(), flags.end(), "--help") != flags.end();
    if (c.help) return c;
    throw UsageError(
        "launch: no command: put it after --, as in frugal launch --nproc 2 -- frugal train ...");
  }
  Args args(
      "launch", flags,
      {"nproc", "nproc-per-node", "master-port", "master-addr", "grace", "nnodes", "node-rank"},
      {"help"});
  c.help = args.flag("help");
  if (c.help) return c;
  dist::LaunchOptions& o = c.options;
  if (args.has("nproc") && args.has("nproc-per-node")) {
    throw UsageError("launch: --nproc and --nproc-per-node are the same flag: give one");
  }
  const std::string nproc = args.has("nproc-per-node") ? "nproc-per-node" : "nproc";
  if (!args.has(nproc)) {
    throw UsageError("launch: --nproc N is required: the processes to start, one per GPU");
  }
  o.nproc = static_cast<int>(args.integer(nproc, 1, 1, dist::kMaxProcs));
  o.master_port = static_cast<int>(args.integer("master-port", 0, 0, 65535));
  o.master_addr = args.str("master-addr", o.master_addr);
  if (o.master_addr.empty()) throw UsageError("launch: --master-addr needs a host");
  o.grace_seconds = args.number("grace", o.grace_seconds, 0, dist::kMaxGraceSeconds);
  o.nnodes = static_cast<int>(args.integer("nnodes", 1, 1, dist::kMaxProcs));
  o.node_rank = static_cast<int>(args.integer("node-rank", 0, 0, o.nnodes - 1));
  if (o.nnodes > 1 && (!args.has("master-port") || !args.has("master-addr"))) {
    throw UsageError("launch: --nnodes " + std::to_string(o.nnodes) +
                     " needs --master-addr (rank 0's node) and --master-port, the same on "
                     "every node");
  }
  o.command.assign(dashes + 1, argv.end());
  return c;
}

}  // namespace frugal::tools
