#include "dist/init.h"

#include <cstdlib>

#include "base/error.h"
#include "dist/launched_rank.h"
#include "dist/nccl_group.h"

namespace frugal::dist {

std::shared_ptr<ProcessGroup> init_process_group(const DistEnv& env, Device device,
                                                 const SocketGroupOptions& options) {
  // A program of the user's as a rank of frugal launch: Note [Ranks behind a wrapper].
  die_with_parent_if_launched();
  const int rank = static_cast<int>(env.rank), size = static_cast<int>(env.world_size);
  // Ranks on several nodes meet at rank 0's host: the default 127.0.0.1 would leave every rank
  // off rank 0's node waiting for the timeout (PyTorch's env:// refuses a missing MASTER_ADDR).
  const char* addr = std::getenv("MASTER_ADDR");
  FRUGAL_CHECK((addr != nullptr && *addr != '\0') || env.world_size <= env.local_world_size,
               "init_process_group (", env.str(), "): the job spans several nodes and ",
               "MASTER_ADDR is not set; set it to rank 0's host, which every node can reach");
  if (device.is_cpu()) return std::make_shared<SocketGroup>(rank, size, options);
  FRUGAL_CHECK(device.is_cuda(), "init_process_group: data parallelism runs on the CPU or on ",
               "GPUs, not on ", device);
  SocketGroup rendezvous(rank, size, options);  // hands NCCL its unique id, then closes
  return make_nccl_group(rendezvous, device, options.timeout_seconds);
}

}  // namespace frugal::dist
