#include "dist/init.h"

#include "base/error.h"
#include "dist/nccl_group.h"

namespace frugal::dist {

std::shared_ptr<ProcessGroup> init_process_group(const DistEnv& env, Device device,
                                                 const SocketGroupOptions& options) {
  const int rank = static_cast<int>(env.rank), size = static_cast<int>(env.world_size);
  if (device.is_cpu()) return std::make_shared<SocketGroup>(rank, size, options);
  FRUGAL_CHECK(device.is_cuda(), "init_process_group: data parallelism runs on the CPU or on ",
               "GPUs, not on ", device);
  SocketGroup rendezvous(rank, size, options);  // hands NCCL its unique id, then closes
  return make_nccl_group(rendezvous, device, options.timeout_seconds);
}

}  // namespace frugal::dist
