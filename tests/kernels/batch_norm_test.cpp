// CPU batch norm over [rows, C]: training forward against hand-computed statistics, running
// statistics over two steps (momentum, unbiased variance), evaluation, and backward against
// finite differences in f64.
#include "kernels/batch_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/device.h"
#include "kernels/conv_test_util.h"

using namespace frugal;
using frugal::testing::cast_vec;
using frugal::testing::central_difference;
using frugal::testing::expect_close;
using frugal::testing::random_vec;
using frugal::testing::rounded;
using frugal::testing::tolerance;

namespace {

constexpr double kEps = 1e-5;

struct Stats {
  std::vector<double> mean, var_biased, var_unbiased;
};

Stats hand_stats(const std::vector<double>& x, int64_t rows, int64_t c) {
  Stats s;
  for (int64_t j = 0; j < c; ++j) {
    double sum = 0, sq = 0;
    for (int64_t r = 0; r < rows; ++r) sum += x[r * c + j];
    double mean = sum / rows;
    for (int64_t r = 0; r < rows; ++r) sq += (x[r * c + j] - mean) * (x[r * c + j] - mean);
    s.mean.push_back(mean);
    s.var_biased.push_back(sq / rows);
    s.var_unbiased.push_back(sq / (rows - 1));
  }
  return s;
}

template <typename T>
void check_train_and_running(int64_t rows, int64_t c) {
  auto ctx = kernels::Context::of(Device::cpu());
  DType dt = sizeof(T) == 4 ? DType::f32 : DType::f64;
  // a large mean next to a small spread: the case a one-pass E[x^2] - E[x]^2 gets wrong in f32
  auto x1 = rounded<T>(random_vec(rows * c, 21, 40.0, 41.0));
  auto x2 = rounded<T>(random_vec(rows * c, 22, -3.0, 2.0));
  auto gamma = rounded<T>(random_vec(c, 23, 0.5, 1.5));
  auto beta = rounded<T>(random_vec(c, 24));
  auto rm0 = rounded<T>(random_vec(c, 25)), rv0 = rounded<T>(random_vec(c, 26, 0.5, 2.0));
  auto gt = cast_vec<T>(gamma), bt = cast_vec<T>(beta);
  auto rm = cast_vec<T>(rm0), rv = cast_vec<T>(rv0);
  std::vector<double> want_rm = rm0, want_rv = rv0;
  for (const auto& x : {x1, x2}) {
    auto xt = cast_vec<T>(x);
    std::vector<T> y(x.size(), T(9)), mean(c), invstd(c);
    kernels::batch_norm_forward_train(ctx, dt, rows, c, xt.data(), gt.data(), bt.data(), kEps, 0.1,
                                      y.data(), mean.data(), invstd.data(), rm.data(), rv.data());
    Stats st = hand_stats(x, rows, c);
    std::vector<double> want_y(x.size()), want_invstd(c);
    for (int64_t j = 0; j < c; ++j) want_invstd[j] = 1.0 / std::sqrt(st.var_biased[j] + kEps);
    for (int64_t i = 0; i < rows * c; ++i) {
      int64_t j = i % c;
      want_y[i] = (x[i] - st.mean[j]) * want_invstd[j] * gamma[j] + beta[j];
    }
    for (int64_t j = 0; j < c; ++j) {
      want_rm[j] = 0.9 * want_rm[j] + 0.1 * st.mean[j];
      want_rv[j] = 0.9 * want_rv[j] + 0.1 * st.var_unbiased[j];
    }
    // f32: y is normalised by a std near 0.3 from data near 40, so allow a few ulps of 40
    double tol = sizeof(T) == 4 ? 2e-5 * 10 : tolerance<T>();
    expect_close(want_y, y, tol, "y");
    expect_close(st.mean, mean, tolerance<T>(), "save_mean");
    expect_close(want_invstd, invstd, tol, "save_invstd");
    expect_close(want_rm, rm, tolerance<T>(), "running_mean");
    expect_close(want_rv, rv, tolerance<T>(), "running_var");
  }

  // evaluation normalises with the running statistics
  auto xe = rounded<T>(random_vec(rows * c, 27, -2.0, 2.0));
  auto xet = cast_vec<T>(xe);
  std::vector<T> ye(xe.size());
  kernels::batch_norm_forward_eval(ctx, dt, rows, c, xet.data(), gt.data(), bt.data(), rm.data(),
                                   rv.data(), kEps, ye.data());
  std::vector<double> want_ye(xe.size());
  for (int64_t i = 0; i < rows * c; ++i) {
    int64_t j = i % c;
    want_ye[i] = (xe[i] - double(rm[j])) / std::sqrt(double(rv[j]) + kEps) * gamma[j] + beta[j];
  }
  expect_close(want_ye, ye, tolerance<T>() * 4, "eval y");
}

}  // namespace

TEST(BatchNormCpu, TrainRunningStatsAndEvalF64) { check_train_and_running<double>(37, 5); }
TEST(BatchNormCpu, TrainRunningStatsAndEvalF32) { check_train_and_running<float>(37, 5); }
// enough rows that the statistics are summed in several chunks on several threads
TEST(BatchNormCpu, TrainParallelRowsF32) { check_train_and_running<float>(20011, 9); }
TEST(BatchNormCpu, TrainParallelRowsF64) { check_train_and_running<double>(20011, 9); }

// L = sum(y * r) with y the training forward: dx, dgamma, dbeta vs central differences.
TEST(BatchNormCpu, BackwardMatchesFiniteDifferencesF64) {
  auto ctx = kernels::Context::of(Device::cpu());
  const int64_t rows = 13, c = 3;
  auto x = random_vec(rows * c, 31, -2.0, 3.0), r = random_vec(rows * c, 32);
  auto gamma = random_vec(c, 33, 0.5, 1.5), beta = random_vec(c, 34);
  auto loss = [&]() {
    std::vector<double> y(x.size()), m(c), is(c);
    kernels::batch_norm_forward_train(ctx, DType::f64, rows, c, x.data(), gamma.data(), beta.data(),
                                      kEps, 0.1, y.data(), m.data(), is.data(), nullptr, nullptr);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * r[i];
    return l;
  };
  auto fd = [&](std::vector<double>& v) { return central_difference(loss, v, 1e-6); };
  std::vector<double> y(x.size()), mean(c), invstd(c);
  kernels::batch_norm_forward_train(ctx, DType::f64, rows, c, x.data(), gamma.data(), beta.data(),
                                    kEps, 0.1, y.data(), mean.data(), invstd.data(), nullptr,
                                    nullptr);
  std::vector<double> dx(x.size()), dg(c), db(c);
  kernels::batch_norm_backward(ctx, DType::f64, rows, c, x.data(), r.data(), gamma.data(),
                               mean.data(), invstd.data(), dx.data(), dg.data(), db.data());
  expect_close(fd(x), dx, 1e-7, "dx");
  expect_close(fd(gamma), dg, 1e-7, "dgamma");
  expect_close(fd(beta), db, 1e-7, "dbeta");

  // each output is optional and the others do not change without it
  std::vector<double> dx2(x.size()), dg2(c);
  kernels::batch_norm_backward(ctx, DType::f64, rows, c, x.data(), r.data(), gamma.data(),
                               mean.data(), invstd.data(), dx2.data(), nullptr, nullptr);
  kernels::batch_norm_backward(ctx, DType::f64, rows, c, x.data(), r.data(), gamma.data(),
                               mean.data(), invstd.data(), nullptr, dg2.data(), nullptr);
  EXPECT_EQ(dx, dx2);
  EXPECT_EQ(dg, dg2);
}

// The f32 backward over many rows (parallel partial sums) against the f64 one.
TEST(BatchNormCpu, BackwardF32MatchesF64OnManyRows) {
  auto ctx = kernels::Context::of(Device::cpu());
  const int64_t rows = 16001, c = 12;
  auto x = rounded<float>(random_vec(rows * c, 41, 5.0, 7.0));
  auto dy = rounded<float>(random_vec(rows * c, 42));
  auto gamma = rounded<float>(random_vec(c, 43, 0.5, 1.5));
  std::vector<double> mean(c), invstd(c), y(x.size()), dx(x.size()), dg(c), db(c);
  kernels::batch_norm_forward_train(ctx, DType::f64, rows, c, x.data(), gamma.data(), nullptr, kEps,
                                    0.1, y.data(), mean.data(), invstd.data(), nullptr, nullptr);
  kernels::batch_norm_backward(ctx, DType::f64, rows, c, x.data(), dy.data(), gamma.data(),
                               mean.data(), invstd.data(), dx.data(), dg.data(), db.data());
  auto xf = cast_vec<float>(x), dyf = cast_vec<float>(dy), gf = cast_vec<float>(gamma);
  std::vector<float> meanf(c), invstdf(c), yf(x.size()), dxf(x.size()), dgf(c), dbf(c);
  kernels::batch_norm_forward_train(ctx, DType::f32, rows, c, xf.data(), gf.data(), nullptr, kEps,
                                    0.1, yf.data(), meanf.data(), invstdf.data(), nullptr, nullptr);
  kernels::batch_norm_backward(ctx, DType::f32, rows, c, xf.data(), dyf.data(), gf.data(),
                               meanf.data(), invstdf.data(), dxf.data(), dgf.data(), dbf.data());
  expect_close(dx, dxf, 1e-4, "dx f32");
  expect_close(dg, dgf, 1e-4, "dgamma f32");
  expect_close(db, dbf, 1e-4, "dbeta f32");
}

TEST(BatchNormCpu, TrainingNeedsMoreThanOneRow) {
  auto ctx = kernels::Context::of(Device::cpu());
  std::vector<float> x(3, 1.f), g(3, 1.f), y(3), m(3), s(3);
  EXPECT_THROW(
      kernels::batch_norm_forward_train(ctx, DType::f32, 1, 3, x.data(), g.data(), g.data(), kEps,
                                        0.1, y.data(), m.data(), s.data(), nullptr, nullptr),
      Error);
}
