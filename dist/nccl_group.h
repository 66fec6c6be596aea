// A process group over NCCL, one process per GPU: the GPU backend of data parallelism.
//
// Note [NCCL collectives]
// - Rendezvous: rank 0 creates NCCL's unique id and hands it to the others through the socket
//   group (dist/socket_group.h); NCCL then bootstraps itself, so several nodes need nothing new.
//   NCCL_COMM_ID=host:port, where set, is honoured by NCCL itself.
// - Streams: a collective waits for the device's compute stream (through an event), runs on a
//   communication stream of its own, and Work::wait() makes the compute stream wait for it: the
//   host never blocks, and backward computes while buckets travel (Note [Data parallelism]).
// - Failures: NCCL waits forever for a dead peer, so a watchdog thread checks every collective in
//   flight. One not finished within the timeout, or an error NCCL reports asynchronously, aborts
//   the communicator and ends the process with a message naming this rank and the collective
//   (as PyTorch's NCCL watchdog does); the launcher then stops the other ranks.
// - NVLink multicast (NVLS) stays off: the lent machines require NCCL_NVLS_ENABLE=0, which the
//   group sets when the environment has not.
#pragma once

#include <memory>

#include "dist/process_group.h"
#include "dist/socket_group.h"

namespace frugal::dist {

// True when frugal was built with NCCL.
bool nccl_available();

// A group of `rendezvous.size()` ranks on `device` (this rank's GPU); collective calls across
// ranks as in Note [Collectives]. An error when frugal was built without NCCL.
std::shared_ptr<ProcessGroup> make_nccl_group(SocketGroup& rendezvous, Device device,
                                              double timeout_seconds);

}  // namespace frugal::dist
