// NCCL process groups (dist/nccl_group.h) on GPUs: on one GPU, a group of one (the same code
// path: rendezvous, communicator, streams, DataParallel); on two GPUs, two ranks started by
// dist::launch as copies of this test program, each running NcclRank.* and writing what it saw,
// compared here: all-reduce parity, identical weights after training, skipped steps agreed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/deterministic.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/ops.h"
#include "dist/data_parallel.h"
#include "dist/init.h"
#include "dist/launcher.h"
#include "dist/nccl_group.h"
#include "gpu_test_util.h"
#include "kernels/cuda/runtime.h"
#include "models/registry.h"
#include "nn/functional.h"
#include "optim/optimizer.h"

using namespace frugal;
namespace fs = std::filesystem;

namespace {

#define SKIP_WITHOUT_NCCL()                                                       \
  do {                                                                            \
    SKIP_WITHOUT_GPU();                                                           \
    if (!dist::nccl_available()) GTEST_SKIP() << "frugal was built without NCCL"; \
  } while (0)

// A group of one on cuda:0: NCCL's whole path but the traffic.
std::shared_ptr<dist::ProcessGroup> group_of_one() {
  dist::SocketGroup rendezvous(0, 1, {.master_addr = "127.0.0.1", .master_port = 0});
  return dist::make_nccl_group(rendezvous, Device::cuda(0), 60);
}

std::shared_ptr<nn::Module> small_mobilenet(uint64_t seed, double dropout = 0.2) {
  models::ModelConfig mc;
  mc.width = 0.25;
  mc.dropout = dropout;
  mc.num_classes = 10;
  mc.in_channels = 3;
  manual_seed(seed);
  auto m = models::create("mobilenet_v2", mc);
  m->to(Device::cuda(0));
  return m;
}

// FNV-1a over tensors' bytes, copied to the host.
uint64_t bytes_hash(const std::vector<Tensor>& tensors) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& t : tensors) {
    Tensor host = t.detach().to(Device::cpu());
    const auto* p = static_cast<const unsigned char*>(host.data_ptr());
    for (size_t i = 0; i < host.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}
uint64_t state_hash(const nn::Module& m) {
  std::vector<Tensor> all;
  for (auto& [name, t] : m.state_dict()) all.push_back(t);
  return bytes_hash(all);
}

TEST(NcclOneGpu, CollectivesOfOneRankLeaveTheTensorAsItWas) {
  SKIP_WITHOUT_NCCL();
  auto group = group_of_one();
  EXPECT_EQ(group->backend(), "nccl");
  Generator gen(1);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    Tensor host = cast(randn({1000}, gen), dtype);
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max}) {
      Tensor t = host.to(Device::cuda(0));
      auto work = group->all_reduce_async(t, op);
      work->wait();
      Tensor back = t.to(Device::cpu());  // on the compute stream, after wait()
      EXPECT_EQ(back.to_vector(), host.to_vector()) << dtype_name(dtype);
    }
  }
  Tensor b = full({7}, 3.0, {.device = Device::cuda(0)});
  group->broadcast(b, 0);
  group->barrier();
  EXPECT_EQ(b.to(Device::cpu()).to_vector(), std::vector<double>(7, 3.0));
}

TEST(NcclOneGpu, DataParallelOfOneRankGivesThePlainGradients) {
  SKIP_WITHOUT_NCCL();
  // Bit for bit: cuDNN's deterministic algorithms, and no dropout (its masks come from the
  // advancing generator, so two forwards would draw two).
  DeterministicGuard deterministic(true);
  auto group = group_of_one();
  auto plain = small_mobilenet(3, 0.0), wrapped_inner = small_mobilenet(3, 0.0);
  dist::DataParallel wrapped(wrapped_inner, group, {.bucket_cap_bytes = 64 << 10});
  Generator gen(4);
  Tensor x = randn({4, 32, 32, 3}, gen).to(Device::cuda(0));
  Tensor y = from_vector({1, 2, 3, 4}, {4}, {.dtype = DType::i64}).to(Device::cuda(0));
  nn::functional::cross_entropy((*plain)(x), y).backward();
  nn::functional::cross_entropy(wrapped(x), y).backward();
  auto a = plain->parameters(), b = wrapped.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].grad().to(Device::cpu()).to_vector(), b[i].grad().to(Device::cpu()).to_vector())
        << "parameter " << i;
  }
  EXPECT_GE(wrapped.last_overlap().during_backward, 1);
}

// One rank of NcclTwoGpus: runs only under its launch (FRUGAL_NCCL_TEST_OUT set).
TEST(NcclRank, CollectivesAndTrainingOfOneRank) {
  const char* out_dir = std::getenv("FRUGAL_NCCL_TEST_OUT");
  if (out_dir == nullptr) GTEST_SKIP() << "a rank of NcclTwoGpus.* (started by it)";
  const dist::DistEnv env = dist::dist_env();
  const Device device = Device::cuda(static_cast<int>(env.local_rank));
  auto group = dist::init_process_group(env, device);
  const int rank = group->rank();
  std::ostringstream report;

  // All-reduce parity against the sum computed here from both ranks' (known) inputs.
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::vector<Tensor> inputs;
    for (int r = 0; r < 2; ++r) {
      Generator gen(100 + r);
      inputs.push_back(cast(randn({4096}, gen), dtype));
    }
    Tensor expected = cast(add(cast(inputs[0], DType::f32), cast(inputs[1], DType::f32)), dtype);
    Tensor t = inputs[static_cast<size_t>(rank)].to(device);
    group->all_reduce(t, dist::ReduceOp::sum);
    std::vector<double> got = t.to(Device::cpu()).to_vector(), want = expected.to_vector();
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    EXPECT_LT(worst, dtype == DType::f32 ? 1e-6 : 2e-2) << dtype_name(dtype);
    report << "all_reduce " << dtype_name(dtype) << " " << std::hex << bytes_hash({t}) << std::dec
           << "\n";  // the ranks' results, bit for bit
  }

  // Training: the same seed-free start (rank 0's weights broadcast), each rank its own images;
  // at step 2 rank 1's gradients overflow, and both ranks must skip that step.
  auto net = small_mobilenet(10 + rank);
  dist::DataParallel model(net, group);
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::GradScaler scaler({.init_scale = 1024});
  dist::agree_on_overflow(scaler, group);
  Generator gen(200 + rank);
  for (int step = 0; step < 5; ++step) {
    Tensor x = randn({8, 32, 32, 3}, gen).to(device);
    Tensor y = from_vector({0, 1, 2, 3, 4, 5, 6, 7}, {8}, {.dtype = DType::i64}).to(device);
    opt.zero_grad();
    {
      AutocastGuard amp(device, DType::f16);
      Tensor loss = nn::functional::cross_entropy(model(x), y);
      scaler.scale(loss).backward();
    }
    if (step == 2 && rank == 1) {
      // After DataParallel's average: only this rank's flag sees it.
      fill_(model.parameters()[0].grad(), std::numeric_limits<double>::infinity());
    }
    scaler.step(opt);
    scaler.update();
  }
  EXPECT_TRUE(model.replicas_agree());
  report << "weights " << std::hex << state_hash(model) << std::dec << "\n";
  report << "scale " << scaler.get_scale() << "\n";
  std::ofstream(fs::path(out_dir) / ("rank" + std::to_string(rank) + ".txt")) << report.str();
}

TEST(NcclTwoGpus, RanksAgreeOnSumsWeightsAndSkippedSteps) {
  SKIP_WITHOUT_NCCL();
  if (kernels::cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  const fs::path dir = fs::temp_directory_path() / ("frugal-nccl-" + std::to_string(getpid()));
  fs::create_directories(dir);
  dist::LaunchOptions o;
  o.nproc = 2;
  o.command = {dist::current_executable(), "--gtest_filter=NcclRank.*"};
  o.extra_env = {{"FRUGAL_NCCL_TEST_OUT", dir.string()}};
  o.grace_seconds = 5;
  dist::LaunchResult r = dist::launch(o);
  ASSERT_EQ(r.exit_code, 0) << r.message;
  auto read = [&](int rank) {
    std::ifstream in(dir / ("rank" + std::to_string(rank) + ".txt"));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const std::string a = read(0), b = read(1);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b) << "the ranks' weights or scales differ";
  // 1024 halved once by the agreed skip (no growth within 5 steps).
  EXPECT_NE(a.find("scale 512"), std::string::npos) << a;
  fs::remove_all(dir);
}

}  // namespace
