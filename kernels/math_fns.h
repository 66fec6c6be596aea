// The scalar formulas of kernels/math.h, shared by the CPU (C = float or double) and CUDA
// (C = float) kernels so that both compute the same thing.
#pragma once

#include <cmath>

#include "base/half.h"  // FRUGAL_HD
#include "kernels/math.h"

namespace frugal::kernels::math_fns {

template <typename C>
FRUGAL_HD C unary(UnaryOp op, C x, C p0, C p1) {
  switch (op) {
    case UnaryOp::abs:
      return std::abs(x);
    case UnaryOp::exp:
      return std::exp(x);
    case UnaryOp::log:
      return std::log(x);
    case UnaryOp::sqrt:
      return std::sqrt(x);
    case UnaryOp::rsqrt:
      return C(1) / std::sqrt(x);
    case UnaryOp::sigmoid:
      return C(1) / (C(1) + std::exp(-x));
    case UnaryOp::tanh:
      return std::tanh(x);
    case UnaryOp::pow:
      return std::pow(x, p0);
    case UnaryOp::clamp: {  // min(max(x, lo), hi) as PyTorch: hi wins when lo > hi
      if (std::isnan(x)) return x;
      C t = x < p0 ? p0 : x;
      return t > p1 ? p1 : t;
    }
  }
  return x;
}

// f'(s) with s the input x or the output y (unary_grad_from_output).
template <typename C>
FRUGAL_HD C unary_grad(UnaryOp op, C s, C p0, C p1) {
  switch (op) {
    case UnaryOp::abs:
      return s > C(0) ? C(1) : (s < C(0) ? C(-1) : C(0));
    case UnaryOp::exp:
      return s;
    case UnaryOp::log:
      return C(1) / s;
    case UnaryOp::sqrt:
      return C(0.5) / s;
    case UnaryOp::rsqrt:
      return C(-0.5) * s * s * s;
    case UnaryOp::sigmoid:
      return s * (C(1) - s);
    case UnaryOp::tanh:
      return C(1) - s * s;
    case UnaryOp::pow:
      return p0 == C(0) ? C(0) : p0 * std::pow(s, p0 - C(1));
    case UnaryOp::clamp:
      return (s >= p0 && s <= p1) ? C(1) : C(0);
  }
  return C(0);
}

// maximum/minimum/pow value, or a comparison as 0/1.
template <typename C>
FRUGAL_HD C binary(MathOp op, C a, C b) {
  switch (op) {
    case MathOp::maximum:
      return (std::isnan(a) || a > b) ? a : (std::isnan(b) ? b : (a < b ? b : a));
    case MathOp::minimum:
      return (std::isnan(a) || a < b) ? a : (std::isnan(b) ? b : (a > b ? b : a));
    case MathOp::pow:
      return std::pow(a, b);
    case MathOp::eq:
      return a == b ? C(1) : C(0);
    case MathOp::ne:
      return a != b ? C(1) : C(0);
    case MathOp::lt:
      return a < b ? C(1) : C(0);
    case MathOp::le:
      return a <= b ? C(1) : C(0);
    case MathOp::gt:
      return a > b ? C(1) : C(0);
    case MathOp::ge:
      return a >= b ? C(1) : C(0);
  }
  return C(0);
}

// A comparison of two integers, exact: no float on the way, so i64 values past 2^24 compare.
template <typename I>
FRUGAL_HD bool compare_ints(MathOp op, I a, I b) {
  switch (op) {
    case MathOp::eq:
      return a == b;
    case MathOp::ne:
      return a != b;
    case MathOp::lt:
      return a < b;
    case MathOp::le:
      return a <= b;
    case MathOp::gt:
      return a > b;
    case MathOp::ge:
      return a >= b;
    default:
      return false;
  }
}

// d(a op b)/da and /db for maximum, minimum, pow.
template <typename C>
FRUGAL_HD void binary_grad(MathOp op, C a, C b, C& da, C& db) {
  if (op == MathOp::pow) {
    da = b == C(0) ? C(0) : b * std::pow(a, b - C(1));
    db = (a == C(0) && b >= C(0)) ? C(0) : std::pow(a, b) * std::log(a);
    return;
  }
  bool a_wins = op == MathOp::maximum ? a > b : a < b;
  bool b_wins = op == MathOp::maximum ? b > a : b < a;
  da = a_wins ? C(1) : (b_wins ? C(0) : C(0.5));
  db = C(1) - da;
  if (std::isnan(a) || std::isnan(b)) {  // the NaN side takes the gradient
    da = std::isnan(a) ? C(1) : C(0);
    db = std::isnan(a) ? C(0) : C(1);
  }
}

}  // namespace frugal::kernels::math_fns
