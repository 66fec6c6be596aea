// Which process of a data-parallel job this is, read from the environment the launchers set, so
// that frugal runs under torchrun (and `frugal launch`), mpirun or srun without flags of its own.
//
// Note [Process groups from the environment]
// One process per GPU. The first launcher whose rank variable is set wins:
//   - torchrun (and frugal launch): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE;
//   - OpenMPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
//   - Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and this node's task count from
//     SLURM_TASKS_PER_NODE at SLURM_NODEID ("4(x2),3": nodes 0 and 1 run 4 tasks, node 2 runs 3),
//     or SLURM_NTASKS_PER_NODE;
//   - none of them: a single process, rank 0 of 1.
// A launcher's variables must be complete and consistent (0 <= rank < world size, 0 <= local
// rank < local world size <= world size); anything else is an error naming the variable and its
// text, never a silent single-process run.
//
//   train::DistEnv env = train::dist_env();
//   if (env.distributed()) { ... env.rank, env.world_size, env.local_rank (the GPU) ... }
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>

namespace frugal::dist {

struct DistEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;        // the process's index on its node: its GPU
  int64_t local_world_size = 1;  // processes on this node
  std::string source = "none";   // "torchrun", "OpenMPI", "Slurm" or "none"
  bool distributed() const { return world_size > 1; }
  bool is_main() const { return rank == 0; }  // the one that prints and saves
  std::string str() const;                    // "rank 1 of 4 (local 1 of 2, torchrun)"
};

// `get` returns a variable's text or null when unset (std::getenv by default).
using EnvLookup = std::function<const char*(const char*)>;
DistEnv dist_env(const EnvLookup& get = [](const char* name) { return std::getenv(name); });

}  // namespace frugal::dist
