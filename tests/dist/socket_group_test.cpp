#include "dist/socket_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/half.h"
#include "core/factory.h"
#include "dist/rank_threads.h"
#include "dist/socket_io.h"

namespace frugal {
namespace {

using test::no_errors;
using test::run_ranks;

// Rank r's values: distinct per rank and element, with fractions that f16 and bf16 round.
std::vector<double> values_of(int rank, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(0.3 * (rank + 1) + 0.01 * i - (i % 3 == 0 ? 2.7 : 0));
  return v;
}

TEST(SocketGroup, AllReduceIsTheRankOrderF32ReductionRoundedOnceAndIdenticalEverywhere) {
  constexpr int kRanks = 4, kN = 1000;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + dist::reduce_op_name(op));
      // What each rank contributes, as stored in dtype, and the reduction computed here in f32
      // (f64 for f64) in rank order, rounded once.
      std::vector<Tensor> inputs;
      for (int r = 0; r < kRanks; ++r) {
        inputs.push_back(from_vector(values_of(r, kN), {kN}, {.dtype = dtype}));
      }
      Tensor expected = from_vector(std::vector<double>(kN, 0.0), {kN}, {.dtype = dtype});
      for (int i = 0; i < kN; ++i) {
        double acc = inputs[0].to_vector()[static_cast<size_t>(i)];
        float acc32 = static_cast<float>(acc);
        for (int r = 1; r < kRanks; ++r) {
          double v = inputs[static_cast<size_t>(r)].to_vector()[static_cast<size_t>(i)];
          if (op == dist::ReduceOp::max) {
            acc = std::max(acc, v);
            acc32 = std::max(acc32, static_cast<float>(v));
          } else {
            acc += v;
            acc32 += static_cast<float>(v);
          }
        }
        if (op == dist::ReduceOp::avg) {
          acc /= kRanks;
          acc32 /= kRanks;
        }
        double want = dtype == DType::f64 ? acc : static_cast<double>(acc32);
        Tensor one = from_vector({want}, {1}, {.dtype = dtype});
        std::memcpy(
            static_cast<char*>(expected.data_ptr()) + static_cast<size_t>(i) * dtype_size(dtype),
            one.data_ptr(), dtype_size(dtype));
      }
      std::vector<Tensor> results(kRanks);
      auto errors = run_ranks(kRanks, [&](dist::SocketGroup& g) {
        Tensor t = inputs[static_cast<size_t>(g.rank())].clone();
        g.all_reduce(t, op);
        results[static_cast<size_t>(g.rank())] = t;
      });
      ASSERT_TRUE(no_errors(errors));
      for (int r = 0; r < kRanks; ++r) {
        ASSERT_EQ(std::memcmp(results[static_cast<size_t>(r)].data_ptr(), expected.data_ptr(),
                              expected.nbytes()),
                  0)
            << "rank " << r << " differs from the rank-order reduction";
      }
    }
  }
}

TEST(SocketGroup, BroadcastFromAnyRootAndI64Sums) {
  constexpr int kRanks = 3;
  std::vector<std::vector<double>> got(kRanks), sums(kRanks);
  auto errors = run_ranks(kRanks, [&](dist::SocketGroup& g) {
    Tensor t = from_vector(values_of(g.rank(), 5), {5});
    g.broadcast(t, 2);
    got[static_cast<size_t>(g.rank())] = t.to_vector();
    Tensor counts = from_vector({double(g.rank()), 1.0}, {2}, {.dtype = DType::i64});
    g.all_reduce(counts, dist::ReduceOp::sum);
    sums[static_cast<size_t>(g.rank())] = counts.to_vector();
    g.barrier();
  });
  ASSERT_TRUE(no_errors(errors));
  std::vector<double> from2 = from_vector(values_of(2, 5), {5}).to_vector();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)], from2) << "rank " << r;
    EXPECT_EQ(sums[static_cast<size_t>(r)], (std::vector<double>{3.0, 3.0})) << "rank " << r;
  }
}

TEST(SocketGroup, AllReduceValuesSumsHostNumbers) {
  std::vector<std::vector<double>> got(2);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    got[static_cast<size_t>(g.rank())] =
        dist::all_reduce_values(g, {1.5 * (g.rank() + 1), 10.0}, dist::ReduceOp::sum);
  });
  ASSERT_TRUE(no_errors(errors));
  EXPECT_EQ(got[0], (std::vector<double>{4.5, 20.0}));
  EXPECT_EQ(got[1], got[0]);
}

TEST(SocketGroup, MismatchedCallsFailOnEveryRankNamingBothCalls) {
  auto errors = run_ranks(3, [&](dist::SocketGroup& g) {
    Tensor t = zeros({g.rank() == 2 ? 7 : 8});
    g.all_reduce(t, dist::ReduceOp::sum);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank 2 called all_reduce of 7 f32 elements"),
              std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank 0 called all_reduce of 8 f32 elements"),
              std::string::npos)
        << errors[static_cast<size_t>(r)];
  }
}

TEST(SocketGroup, ARankThatExitsIsNamedNotWaitedFor) {
  auto errors = run_ranks(3, [&](dist::SocketGroup& g) {
    if (g.rank() == 1) return;  // its group (and sockets) go away with this scope
    Tensor t = zeros({4});
    g.all_reduce(t, dist::ReduceOp::sum);
  });
  EXPECT_TRUE(errors[1].empty());
  EXPECT_NE(errors[0].find("rank 1 closed its connection"), std::string::npos) << errors[0];
  // Rank 2 waits on rank 0, which gave up: it learns through rank 0's closed connection.
  EXPECT_NE(errors[2].find("rank 0"), std::string::npos) << errors[2];
}

TEST(SocketGroup, ARankThatStopsAnsweringTimesOut) {
  std::atomic<bool> released{false};
  auto t0 = std::chrono::steady_clock::now();
  auto errors = run_ranks(
      2,
      [&](dist::SocketGroup& g) {
        if (g.rank() == 1) {  // alive, connected, but never joins the collective
          while (!released) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;
        }
        Tensor t = zeros({4});
        try {
          g.all_reduce(t, dist::ReduceOp::sum);
        } catch (...) {
          released = true;
          throw;
        }
      },
      /*timeout_seconds=*/0.5);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(errors[0].find("rank 1 did not answer before the timeout"), std::string::npos)
      << errors[0];
  EXPECT_LT(seconds, 10.0);
}

// A send to a rank that is alive but not reading (stuck, stopped) fails at the timeout once the
// socket's buffer is full, as a receive does: it used to block in send() until rank 0 read.
TEST(SocketGroup, ASendToARankThatStopsReadingTimesOut) {
  double rank1_seconds = 0;
  auto errors = run_ranks(
      2,
      [&](dist::SocketGroup& g) {
        Tensor t = zeros({16 << 20});  // 64 MiB: far past what the socket buffers hold
        if (g.rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(4));
        const auto t0 = std::chrono::steady_clock::now();
        try {
          g.all_reduce(t, dist::ReduceOp::sum);
        } catch (...) {
          if (g.rank() == 1) {
            rank1_seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          }
          throw;
        }
      },
      /*timeout_seconds=*/0.5);
  EXPECT_NE(errors[1].find("rank 0 took no data before the timeout"), std::string::npos)
      << errors[1];
  EXPECT_LT(rank1_seconds, 3.5);  // not held until rank 0 woke after 4 s
}

TEST(SocketGroup, RendezvousRejectsAWrongWorldSizeAndTwoClaimsOfOneRank) {
  const int port = dist::choose_free_port();
  dist::SocketGroupOptions o{.master_addr = "127.0.0.1", .master_port = port, .timeout_seconds = 5};
  std::string e0, e1;
  std::thread t0([&] {
    try {
      dist::SocketGroup g(0, 2, o);
    } catch (const std::exception& e) {
      e0 = e.what();
    }
  });
  std::thread t1([&] {
    try {
      dist::SocketGroup g(1, 3, o);
    } catch (const std::exception& e) {
      e1 = e.what();
    }
  });
  t0.join();
  t1.join();
  EXPECT_NE(e0.find("rank 1 says the world size is 3, rank 0 says 2"), std::string::npos) << e0;
  EXPECT_NE(e1.find("refused rank 1"), std::string::npos) << e1;

  EXPECT_THROW(dist::SocketGroup(3, 2, o), Error);

  // Two processes claim rank 1: the second is refused, and rank 0 stops.
  o.master_port = dist::choose_free_port();
  std::vector<std::string> errors(3);
  std::vector<std::thread> ranks;
  for (int i = 0; i < 3; ++i) {
    ranks.emplace_back([&, i] {
      try {
        dist::SocketGroup g(i == 0 ? 0 : 1, 3, o);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_NE(errors[0].find("two processes claimed rank 1"), std::string::npos) << errors[0];
  EXPECT_TRUE(errors[1].empty() != errors[2].empty()) << errors[1] << " / " << errors[2];
}

TEST(SocketGroup, TensorsMustBeOnTheCpu) {
  auto errors = run_ranks(1, [&](dist::SocketGroup& g) {
    Tensor t = Tensor::empty({4}, {.device = Device::meta()});
    g.all_reduce(t, dist::ReduceOp::sum);
  });
  EXPECT_NE(errors[0].find("all_reduce: the tensor is on meta"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace frugal

namespace frugal {

// Rank 0 listens on every interface, as torchrun's store does: a rank that reaches it by another
// of the host's addresses joins. (Bound to MASTER_ADDR's resolved address alone, rank 0 refused
// ranks of other nodes where /etc/hosts maps the host's name to 127.0.1.1.) On Linux all of
// 127.0.0.0/8 reaches the loopback interface.
TEST(SocketGroup, RankZeroListensOnEveryInterface) {
  const int port = dist::choose_free_port();
  std::vector<std::string> errors(2);
  std::vector<double> sums(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::SocketGroup group(r, 2,
                                {.master_addr = r == 0 ? "127.0.0.1" : "127.0.0.2",
                                 .master_port = port,
                                 .timeout_seconds = 20,
                                 .rendezvous_timeout_seconds = 20});
        Tensor t = full({1}, 1.0 + r);
        group.all_reduce(t, dist::ReduceOp::sum);
        sums[static_cast<size_t>(r)] = t.item();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(test::no_errors(errors));
  EXPECT_EQ(sums, (std::vector<double>{3.0, 3.0}));
}

}  // namespace frugal

namespace frugal {

// Another program on MASTER_PORT (here one that answers like a web server) is named as such: its
// bytes used to be read as a reply whose message length sized a string of terabytes, which
// ended the rank in "out of host memory".
TEST(SocketGroup, SomethingElseOnTheMasterPortIsNamedNotReadAsALength) {
  const int port = dist::choose_free_port();
  dist::Socket listener = dist::listen_on("127.0.0.1", port);
  std::thread server([&] {
    dist::Socket s = dist::accept_before(listener, dist::deadline_in(20), "the test's rank");
    const std::string answer = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    dist::send_all(s, answer.data(), answer.size(), dist::deadline_in(20), "the test's rank");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  });
  std::string error;
  try {
    dist::SocketGroup g(1, 2,
                        {.master_addr = "127.0.0.1",
                         .master_port = port,
                         .timeout_seconds = 10,
                         .rendezvous_timeout_seconds = 10});
  } catch (const Error& e) {
    error = e.what();
  }
  server.join();
  EXPECT_NE(error.find("is not a frugal rank 0"), std::string::npos) << error;
}

// Under torchrun's agent store MASTER_PORT is the store's, busy for the whole run: every rank
// takes the port after it for frugal's rendezvous.
TEST(SocketGroup, TorchrunsAgentStoreKeepsItsPortAndTheRendezvousTakesTheNext) {
  setenv("MASTER_PORT", "29577", 1);
  EXPECT_EQ(dist::SocketGroupOptions::from_env().master_port, 29577);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  EXPECT_EQ(dist::SocketGroupOptions::from_env().master_port, 29578);
  setenv("MASTER_PORT", "65535", 1);
  EXPECT_THROW(dist::SocketGroupOptions::from_env(), Error);
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  unsetenv("MASTER_PORT");
}

}  // namespace frugal

namespace frugal {

// A host name that does not resolve (yet: a cluster's names may appear after the job starts) is
// asked again until the rendezvous deadline, and said once on stderr; it used to fail at once.
// The error names the last attempt's reason.
TEST(SocketIo, ANameThatDoesNotResolveIsRetriedUntilTheDeadline) {
  const auto start = std::chrono::steady_clock::now();
  ::testing::internal::CaptureStderr();
  std::string error;
  try {
    dist::connect_before("no-such-host.invalid", 29500, dist::deadline_in(0.4));
  } catch (const Error& e) {
    error = e.what();
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(error.find("nobody listened on no-such-host.invalid:29500 before the timeout"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("the last attempt: cannot resolve address 'no-such-host.invalid'"),
            std::string::npos)
      << error;
  EXPECT_GE(waited, 0.4);
  EXPECT_EQ(said.find("cannot resolve address 'no-such-host.invalid'"),
            said.rfind("cannot resolve address 'no-such-host.invalid'"))
      << "said more than once: " << said;
  EXPECT_NE(said.find("trying again until the rendezvous timeout"), std::string::npos) << said;
}

// A rank that starts before rank 0 listens connects once it does (refused, then retried).
TEST(SocketIo, AConnectWaitsForAListenerThatComesLater) {
  const int port = dist::choose_free_port();
  std::thread late([port] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    dist::Socket listener = dist::listen_on("127.0.0.1", port);
    dist::Socket peer = dist::accept_before(listener, dist::deadline_in(10), "the test's peer");
    const char byte = 'x';
    dist::send_all(peer, &byte, 1, dist::deadline_in(10), "the test's peer");
  });
  dist::Socket s = dist::connect_before("127.0.0.1", port, dist::deadline_in(10));
  char got = 0;
  dist::recv_all(s, &got, 1, dist::deadline_in(10), "the listener");
  late.join();
  EXPECT_EQ(got, 'x');
}

}  // namespace frugal
