// Builds without NCCL (no CUDA, or no libnccl found) answer here; dist/nccl/nccl_group.cpp
// replaces this file when NCCL is found (CMakeLists.txt, FRUGAL_WITH_NCCL).
#include "base/error.h"
#include "dist/nccl_group.h"

#ifndef FRUGAL_WITH_NCCL
namespace frugal::dist {

bool nccl_available() { return false; }

std::shared_ptr<ProcessGroup> make_nccl_group(SocketGroup&, Device device, double) {
  FRUGAL_FAIL("data-parallel training on ", device,
              " needs NCCL, and this frugal was built without it (configure with CUDA and NCCL ",
              "found: libnccl and nccl.h under the CUDA toolkit or /usr)");
}

}  // namespace frugal::dist
#endif
