// CPU gemm: oneDNN first where it takes the call (Note [oneDNN GEMMs]), else Eigen on row-major
// maps (its own blocking and OpenMP threads); the transposes are views, nothing is copied.
#include "kernels/matmul.h"

#include <Eigen/Core>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/onednn_gemm.h"

namespace frugal::kernels::cpu {
namespace {

template <typename T>
void gemm_impl(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, const T* b,
               double beta, T* c) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using CMap = Eigen::Map<const Mat>;
  Eigen::Map<Mat> C(c, m, n);
  if (k == 0) {  // an empty sum: c = beta * c
    if (beta == 0) {
      C.setZero();
    } else if (beta != 1) {
      C *= static_cast<T>(beta);
    }
    return;
  }
  CMap A(a, trans_a ? k : m, trans_a ? m : k);  // [m, k] or stored [k, m]
  CMap B(b, trans_b ? n : k, trans_b ? k : n);  // [k, n] or stored [n, k]
  // beta == 0 never reads c (it may hold NaN from an uninitialised buffer).
  auto run = [&](const auto& opa, const auto& opb) {
    if (beta == 0) {
      C.noalias() = opa * opb;
    } else {
      if (beta != 1) C *= static_cast<T>(beta);
      C.noalias() += opa * opb;
    }
  };
  if (!trans_a && !trans_b) run(A, B);
  if (!trans_a && trans_b) run(A, B.transpose());
  if (trans_a && !trans_b) run(A.transpose(), B);
  if (trans_a && trans_b) run(A.transpose(), B.transpose());
}

}  // namespace

void gemm(const Context& ctx, DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n,
          int64_t k, const void* a, const void* b, double beta, void* c) {
  FRUGAL_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: bad sizes m=", m, " n=", n, " k=", k);
  if (m == 0 || n == 0) return;
  // oneDNN first (Note [oneDNN GEMMs]); it reads c only for beta == 1
  if (dtype == DType::f32 && (beta == 0 || beta == 1) &&
      onednn_gemm(ctx, m, n, k, {a, dtype, trans_a ? m : k, trans_a},
                  {b, dtype, trans_b ? k : n, trans_b}, c, dtype, n, nullptr, beta == 1)) {
    return;
  }
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "gemm",
                          gemm_impl<T>(trans_a, trans_b, m, n, k, static_cast<const T*>(a),
                                       static_cast<const T*>(b), beta, static_cast<T*>(c)));
}

}  // namespace frugal::kernels::cpu
