// Differentiable NN ops on NHWC activations: convolution, linear, batch norm, activations,
// pooling, dropout and cross-entropy. Forward and backward of each op sit together in one
// file, nn/functional_*.cpp (Note [CPU dtypes]: 16-bit CPU tensors compute in f32 inside the
// kernels).
//
//   Tensor y = nn::functional::conv2d(x, w, b, {.stride = 2, .padding = 1});  // x [N,H,W,C]
//   Tensor loss = nn::functional::cross_entropy(logits, labels, {.label_smoothing = 0.1});
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/factory.h"
#include "core/tensor.h"
#include "kernels/elementwise.h"

namespace frugal::nn::functional {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  // Note [Recomputed convolutions]: when the input is itself recomputed in backward (a batch norm +
  // activation output, Note [Saved tensors]), the output gets a recipe too and is recomputed from
  // the input's recipe rather than kept. Pays for cheap convolutions: a depthwise conv's output is
  // as large as its input, and recomputing it is one memory-bound pass.
  bool recompute_output = false;
};
// x [N, H, W, C], weight [K, kh, kw, C/groups], bias [K] or undefined -> [N, OH, OW, K]
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv2dOptions opt = {});

// x [..., in], weight [out, in], bias [out] or undefined -> [..., out]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

using kernels::Activation;

struct BatchNormOptions {
  bool training = true;
  double momentum = 0.1;
  double eps = 1e-5;
  // An activation applied to the normalised output in the same pass (Note [Batch norm with its
  // activation]): training keeps only x and per-channel statistics for backward, and the output
  // is recomputed from them wherever a later op saves it.
  Activation activation = Activation::identity;
};
// The activation of one of batch_norm's recipes (Note [Saved tensors]), by the recipe's name;
// nothing for any other recipe. conv2d reads the recipe's input instead of recomputing it (Note
// [Batch norm inside the depthwise convolution] in kernels/conv.h).
std::optional<Activation> batch_norm_recipe_activation(const std::string& recipe_name);

// Thrown by batch_norm when a training batch has one value a channel (one row at a 1x1 feature
// map): out-of-memory recovery, which makes batches smaller, moves on to its next way when it
// meets one, where any other error ends the step as it is.
class BatchTooSmallError : public Error {
 public:
  explicit BatchTooSmallError(const std::string& what) : Error(what) {}
};

// x [N, H, W, C] (or [N, C]); weight, bias, running_mean, running_var [C] in acc_dtype(x); or
// weight and bias undefined (torch's affine=False), or all of them x's 16-bit dtype (a model cast
// whole with Module::to). In training the running statistics are updated in place (when defined),
// and num_batches_tracked, an i64 scalar on x's device (BatchNorm2d's), when defined is counted up
// by one with them (not in a checkpointed recompute) in the statistics' own kernel.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, BatchNormOptions opt = {},
                  const Tensor& num_batches_tracked = Tensor());

// Sums a tensor over the replicas of a data-parallel job, differentiably (its backward sums the
// gradient the same way): what makes batch statistics global (dist/sync_batch_norm.h).
using CrossReplicaSum = std::function<Tensor(const Tensor&)>;
// Training-mode batch_norm whose statistics are those of every replica's batch together
// (PyTorch's SyncBatchNorm): per-channel sums, sums of squares and counts go through
// `sum_across`, in f32; backward sums the per-channel sums of dy and dy * xhat the same way.
// Saves x and the statistics, as batch_norm does. Updates the running statistics (not while
// recomputing a checkpointed segment) with the global mean and unbiased variance.
Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var,
                       const CrossReplicaSum& sum_across, double momentum = 0.1, double eps = 1e-5);

// The activation `act` as one op (relu, relu6, ... below are its named forms).
Tensor activation(Activation act, const Tensor& x);
Tensor relu(const Tensor& x);
Tensor relu6(const Tensor& x);
Tensor hardswish(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);

struct Pool2dOptions {
  int64_t kernel = 2;
  int64_t stride = 0;  // 0: same as kernel, as PyTorch's default
  int64_t padding = 0;
  bool count_include_pad = true;
};
Tensor max_pool2d(const Tensor& x, Pool2dOptions opt);
Tensor avg_pool2d(const Tensor& x, Pool2dOptions opt);
// [N, H, W, C] -> [N, 1, 1, C] (AdaptiveAvgPool2d(1))
Tensor global_avg_pool(const Tensor& x);

// Zeroes each element with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator());

enum class Reduction { mean, sum, none };
struct CrossEntropyOptions {
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::mean;
};
// logits [N, C] (computed in f32 whatever their dtype), labels i64 [N] -> scalar (or [N])
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, CrossEntropyOptions opt = {});

}  // namespace frugal::nn::functional
