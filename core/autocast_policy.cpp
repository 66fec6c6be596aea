// The autocast policy table: one row per op, in AutocastOp order (STYLE 4/6). Following
// PyTorch's CUDA lists (shared/REFERENCE.md): conv/linear/matmul lower; losses and reductions
// in f32; mixed elementwise promotes; activations, pooling, dropout and reshape pass through.
#include <iterator>

#include "core/autocast.h"

namespace frugal {
namespace {

using P = AutocastPolicy;

struct PolicyRow {
  AutocastOp op;
  const char* name;
  AutocastPolicy policy;
};

constexpr PolicyRow kPolicy[] = {
    {AutocastOp::conv2d, "conv2d", P::lower},
    {AutocastOp::linear, "linear", P::lower},
    {AutocastOp::matmul, "matmul", P::lower},
    {AutocastOp::cross_entropy, "cross_entropy", P::f32},
    // batch_norm: weight, bias and running statistics are f32 and its statistics math is f32;
    // the activations keep their dtype (PyTorch does not wrap batch_norm on CUDA), so the f32
    // policy applies to the parameters only (see nn/functional_norm.cpp).
    {AutocastOp::batch_norm, "batch_norm", P::f32},
    {AutocastOp::sum, "sum", P::f32},
    // Not on PyTorch's f32 list (sum is): its output keeps the input's dtype, accumulated in f32.
    {AutocastOp::mean, "mean", P::pass},
    {AutocastOp::softmax, "softmax", P::f32},
    {AutocastOp::log_softmax, "log_softmax", P::f32},
    {AutocastOp::exp, "exp", P::f32},
    {AutocastOp::log, "log", P::f32},
    {AutocastOp::rsqrt, "rsqrt", P::f32},
    {AutocastOp::pow, "pow", P::f32},
    {AutocastOp::add, "add", P::promote},
    {AutocastOp::sub, "sub", P::promote},
    {AutocastOp::mul, "mul", P::promote},
    {AutocastOp::div, "div", P::promote},
    {AutocastOp::maximum, "maximum", P::promote},
    {AutocastOp::minimum, "minimum", P::promote},
    {AutocastOp::relu, "relu", P::pass},
    {AutocastOp::relu6, "relu6", P::pass},
    {AutocastOp::hardswish, "hardswish", P::pass},
    {AutocastOp::silu, "silu", P::pass},
    {AutocastOp::sigmoid, "sigmoid", P::pass},
    {AutocastOp::max_pool2d, "max_pool2d", P::pass},
    {AutocastOp::avg_pool2d, "avg_pool2d", P::pass},
    {AutocastOp::global_avg_pool, "global_avg_pool", P::pass},
    {AutocastOp::dropout, "dropout", P::pass},
    {AutocastOp::reshape, "reshape", P::pass},
};

static_assert(std::size(kPolicy) == kNumAutocastOps,
              "every AutocastOp needs exactly one row in kPolicy");

constexpr bool rows_in_order() {
  for (size_t i = 0; i < std::size(kPolicy); ++i) {
    if (static_cast<size_t>(kPolicy[i].op) != i) return false;
  }
  return true;
}
static_assert(rows_in_order(), "kPolicy rows must follow the AutocastOp order");

}  // namespace

AutocastPolicy autocast_policy(AutocastOp op) { return kPolicy[static_cast<size_t>(op)].policy; }
const char* autocast_op_name(AutocastOp op) { return kPolicy[static_cast<size_t>(op)].name; }

}  // namespace frugal
