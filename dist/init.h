// The process group a data-parallel program runs in, from the launcher's environment
// (dist/env.h): sockets between CPU processes, NCCL between GPUs (rendezvous through rank 0's
// socket either way, at MASTER_ADDR:MASTER_PORT).
//
//   dist::DistEnv env = dist::dist_env();
//   Device device = env.distributed() && want_cuda ? Device::cuda(env.local_rank) : ...;
//   std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group(env, device);
#pragma once

#include <memory>

#include "dist/env.h"
#include "dist/process_group.h"
#include "dist/socket_group.h"

namespace frugal::dist {

// The group of env's world on `device` (the CPU, or this rank's GPU); returns once every rank
// has joined. A single process (world size 1) gets a group of one, whose collectives return at
// once.
std::shared_ptr<ProcessGroup> init_process_group(
    const DistEnv& env, Device device,
    const SocketGroupOptions& options = SocketGroupOptions::from_env());

}  // namespace frugal::dist
