// Note [Process groups from the environment]: rank, world size and local rank from torchrun's,
// OpenMPI's and Slurm's variables, and clear errors for incomplete or inconsistent ones.
#include "dist/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "base/error.h"
#include "dist/init.h"

using namespace frugal;

namespace {

// A fake environment: the variables of `vars`, nothing else.
dist::DistEnv from(const std::map<std::string, std::string>& vars) {
  return dist::dist_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// The message of the error `vars` raise ("" when none).
std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    from(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DistEnv, NoLauncherIsOneProcess) {
  dist::DistEnv e = from({{"PATH", "/bin"}});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.distributed());
  EXPECT_TRUE(e.is_main());
  EXPECT_EQ(e.source, "none");
}

TEST(DistEnv, TorchrunOpenMpiAndSlurm) {
  dist::DistEnv t = from({{"RANK", "5"},
                          {"WORLD_SIZE", "8"},
                          {"LOCAL_RANK", "1"},
                          {"LOCAL_WORLD_SIZE", "4"},
                          {"SLURM_PROCID", "0"}});
  EXPECT_EQ(t.str(), "rank 5 of 8 (local 1 of 4, torchrun)") << "torchrun's variables win";
  EXPECT_TRUE(t.distributed());
  EXPECT_FALSE(t.is_main());
  dist::DistEnv hand = from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}});
  EXPECT_EQ(hand.local_world_size, 2) << "no LOCAL_WORLD_SIZE: one node";
  dist::DistEnv m = from({{"OMPI_COMM_WORLD_RANK", "3"},
                          {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(m.str(), "rank 3 of 4 (local 1 of 2, OpenMPI)");
  // Slurm: nodes 0 and 1 run 4 tasks, node 2 runs 3; this is node 2's third task.
  dist::DistEnv s = from({{"SLURM_PROCID", "10"},
                          {"SLURM_NTASKS", "11"},
                          {"SLURM_LOCALID", "2"},
                          {"SLURM_NODEID", "2"},
                          {"SLURM_TASKS_PER_NODE", "4(x2),3"}});
  EXPECT_EQ(s.str(), "rank 10 of 11 (local 2 of 3, Slurm)");
  dist::DistEnv s0 = from({{"SLURM_PROCID", "1"},
                           {"SLURM_NTASKS", "11"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_NODEID", "1"},
                           {"SLURM_TASKS_PER_NODE", "4(x2),3"}});
  EXPECT_EQ(s0.local_world_size, 4);
  dist::DistEnv s1 = from({{"SLURM_PROCID", "1"},
                           {"SLURM_NTASKS", "2"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_NTASKS_PER_NODE", "2"}});
  EXPECT_EQ(s1.local_world_size, 2);
}

TEST(DistEnv, IncompleteOrInconsistentVariablesAreNamed) {
  EXPECT_NE(error_of({{"RANK", "0"}, {"LOCAL_RANK", "0"}}).find("WORLD_SIZE is not"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x1"}}).find("RANK='x1' is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}).find("RANK='-1'"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}})
                .find("rank 2 is not below the world size 2"),
            std::string::npos);
  EXPECT_NE(
      error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}).find("local rank 2 of 2"),
      std::string::npos);
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "0"},
                      {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}})
                .find("OMPI_COMM_WORLD_LOCAL_SIZE is not"),
            std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}})
                .find("neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE"),
            std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"},
                      {"SLURM_NTASKS", "2"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_TASKS_PER_NODE", "2(y2)"}})
                .find("SLURM_TASKS_PER_NODE='2(y2)'"),
            std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"},
                      {"SLURM_NTASKS", "2"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NODEID", "3"},
                      {"SLURM_TASKS_PER_NODE", "1(x2)"}})
                .find("SLURM_NODEID=3 is past the 2 nodes"),
            std::string::npos);
}

// A world without a rank is refused rather than run as one process; PyTorch's env:// needs no
// LOCAL_RANK, and a world of one has only local rank 0; several processes still need it.
TEST(DistEnv, AWorldWithoutARankIsRefusedAndAWorldOfOneNeedsNoLocalRank) {
  EXPECT_NE(error_of({{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}})
                .find("WORLD_SIZE=2 is set but RANK is not"),
            std::string::npos);
  EXPECT_EQ(from({{"WORLD_SIZE", "1"}}).world_size, 1);
  const dist::DistEnv one = from({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(one.local_rank, 0);
  EXPECT_FALSE(one.distributed());
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("LOCAL_RANK is not"),
            std::string::npos);
}

// Ranks on several nodes meet at MASTER_ADDR: without it every rank off rank 0's node would wait
// at 127.0.0.1 for the timeout. Refused at once, as PyTorch's env:// refuses it.
TEST(DistEnv, SeveralNodesWithoutMasterAddrAreRefused) {
  const char* set = std::getenv("MASTER_ADDR");
  const std::string saved = set != nullptr ? set : "";
  unsetenv("MASTER_ADDR");
  const dist::DistEnv e =
      from({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}});
  std::string error;
  try {
    dist::init_process_group(e, Device::cpu());
  } catch (const Error& err) {
    error = err.what();
  }
  EXPECT_NE(error.find("spans several nodes and MASTER_ADDR is not set"), std::string::npos)
      << error;
  if (set != nullptr) setenv("MASTER_ADDR", saved.c_str(), 1);
}
