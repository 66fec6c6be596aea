// Rank, world size and local rank from the launchers' variables (Note [Process groups from the
// environment] in dist/env.h).
#include "dist/env.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "base/error.h"

namespace frugal::dist {
namespace {

// The integer in variable `name`, or nullopt when it is unset; an error for anything but a
// plain non-negative decimal.
std::optional<int64_t> read(const EnvLookup& get, const char* name) {
  const char* text = get(name);
  if (text == nullptr) return std::nullopt;
  const std::string s(text);
  FRUGAL_CHECK(
      !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos,
      "dist_env: ", name, "='", s, "' is not a non-negative integer");
  return std::stoll(s);
}

int64_t need(const EnvLookup& get, const char* name, const char* because) {
  std::optional<int64_t> v = read(get, name);
  FRUGAL_CHECK(v.has_value(), "dist_env: ", because, " is set but ", name, " is not");
  return *v;
}

// This node's task count: SLURM_TASKS_PER_NODE lists the counts of the job's nodes in order,
// "4(x2),3" for two nodes of 4 and one of 3, read at SLURM_NODEID; else SLURM_NTASKS_PER_NODE.
std::optional<int64_t> slurm_tasks_on_this_node(const EnvLookup& get) {
  const char* text = get("SLURM_TASKS_PER_NODE");
  if (text == nullptr) return read(get, "SLURM_NTASKS_PER_NODE");
  const std::string s(text);
  const int64_t node = read(get, "SLURM_NODEID").value_or(0);
  auto bad = [&] {
    return Error(detail::str("dist_env: SLURM_TASKS_PER_NODE='", s,
                             "' is not a list of counts such as 4(x2),3"));
  };
  int64_t first_node = 0;  // of the current group
  size_t i = 0;
  while (i < s.size()) {
    const size_t count_end = std::min(s.find_first_not_of("0123456789", i), s.size());
    if (count_end == i || count_end - i > 9) throw bad();
    const int64_t count = std::stoll(s.substr(i, count_end - i));
    int64_t repeat = 1;
    i = count_end;
    if (i < s.size() && s[i] == '(') {
      const size_t close = s.find(')', i);
      if (close == std::string::npos || s.compare(i, 2, "(x") != 0 || close - i - 2 < 1 ||
          close - i - 2 > 9 ||
          s.substr(i + 2, close - i - 2).find_first_not_of("0123456789") != std::string::npos) {
        throw bad();
      }
      repeat = std::stoll(s.substr(i + 2, close - i - 2));
      i = close + 1;
    }
    if (node < first_node + repeat) return count;
    first_node += repeat;
    if (i < s.size()) {
      if (s[i] != ',') throw bad();
      ++i;
    }
  }
  FRUGAL_FAIL("dist_env: SLURM_NODEID=", node, " is past the ", first_node,
              " nodes of SLURM_TASKS_PER_NODE='", s, "'");
}

void check(const DistEnv& e) {
  FRUGAL_CHECK(e.world_size >= 1 && e.rank < e.world_size, "dist_env (", e.source, "): rank ",
               e.rank, " is not below the world size ", e.world_size);
  FRUGAL_CHECK(e.local_world_size >= 1 && e.local_world_size <= e.world_size &&
                   e.local_rank < e.local_world_size,
               "dist_env (", e.source, "): local rank ", e.local_rank, " of ", e.local_world_size,
               " does not fit a world of ", e.world_size);
}

}  // namespace

std::string DistEnv::str() const {
  return detail::str("rank ", rank, " of ", world_size, " (local ", local_rank, " of ",
                     local_world_size, ", ", source, ")");
}

DistEnv dist_env(const EnvLookup& get) {
  DistEnv e;
  if (read(get, "RANK")) {
    e.source = "torchrun";
    e.rank = need(get, "RANK", "RANK");
    e.world_size = need(get, "WORLD_SIZE", "RANK");
    // PyTorch's env:// needs no LOCAL_RANK; a world of one has only local rank 0. Several
    // processes need it: it picks each one's GPU.
    e.local_rank =
        e.world_size == 1 ? read(get, "LOCAL_RANK").value_or(0) : need(get, "LOCAL_RANK", "RANK");
    // torchrun sets it; a hand-made environment may not: then every process is on one node
    e.local_world_size = read(get, "LOCAL_WORLD_SIZE").value_or(e.world_size);
  } else if (read(get, "OMPI_COMM_WORLD_RANK")) {
    e.source = "OpenMPI";
    const char* because = "OMPI_COMM_WORLD_RANK";
    e.rank = need(get, "OMPI_COMM_WORLD_RANK", because);
    e.world_size = need(get, "OMPI_COMM_WORLD_SIZE", because);
    e.local_rank = need(get, "OMPI_COMM_WORLD_LOCAL_RANK", because);
    e.local_world_size = need(get, "OMPI_COMM_WORLD_LOCAL_SIZE", because);
  } else if (read(get, "SLURM_PROCID")) {
    e.source = "Slurm";
    const char* because = "SLURM_PROCID";
    e.rank = need(get, "SLURM_PROCID", because);
    e.world_size = need(get, "SLURM_NTASKS", because);
    e.local_rank = need(get, "SLURM_LOCALID", because);
    std::optional<int64_t> per_node = slurm_tasks_on_this_node(get);
    FRUGAL_CHECK(per_node.has_value(), "dist_env: SLURM_PROCID is set but neither ",
                 "SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is");
    e.local_world_size = *per_node;
  }
  // A launcher's world without the rank would train as one process, silently.
  if (e.source == "none") {
    const std::optional<int64_t> world = read(get, "WORLD_SIZE");
    FRUGAL_CHECK(!world || *world == 1, "dist_env: WORLD_SIZE=", world.value_or(0),
                 " is set but RANK is not; a launcher sets both (unset WORLD_SIZE for a ",
                 "single-process run)");
  }
  check(e);
  return e;
}

}  // namespace frugal::dist
