// The standard layers, with PyTorch's constructor arguments, parameter names and default
// initialisation. Activations are NHWC; conv weights [K, kh, kw, C/groups]; linear [out, in].
#pragma once

#include "nn/functional.h"
#include "nn/module.h"

namespace frugal::nn {

using functional::Activation;

struct Conv2dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
  bool recompute_output = false;  // Note [Recomputed convolutions] in nn/functional.h
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  Tensor weight;  // [K, kh, kw, C/groups]
  Tensor bias;    // [K] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  int64_t in_, out_, k_;
  Conv2dOptions opt_;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or undefined

 protected:
  std::string extra_repr() const override;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  bool takes_activation() const override { return true; }
  // act(batch_norm(x)) as one op (Note [Batch norm with its activation]).
  Tensor forward_with_activation(const Tensor& x, Activation act) override;
  Tensor weight, bias;               // [C] f32
  Tensor running_mean, running_var;  // [C] f32 buffers
  Tensor num_batches_tracked;        // i64 scalar buffer, as in PyTorch's state_dict
  // Set by dist::convert_sync_batchnorm: training statistics over every replica's batch
  // (functional::sync_batch_norm); unset, each replica normalises with its own batch's.
  functional::CrossReplicaSum cross_replica_sum;

 protected:
  std::string extra_repr() const override;

 private:
  int64_t c_;
  double eps_, momentum_;
};

// Activation layers: one functional op each; Sequential fuses them into a BatchNorm2d right
// before them (Note [Fused activations]).
#define FRUGAL_ACTIVATION_LAYER(Name, act)                                              \
  class Name : public Module {                                                          \
   public:                                                                              \
    Tensor forward(const Tensor& x) override { return functional::activation(act, x); } \
    std::string type_name() const override { return #Name; }                            \
    std::optional<Activation> as_activation() const override { return act; }            \
  };
FRUGAL_ACTIVATION_LAYER(ReLU, Activation::relu)
FRUGAL_ACTIVATION_LAYER(ReLU6, Activation::relu6)
FRUGAL_ACTIVATION_LAYER(Hardswish, Activation::hardswish)
FRUGAL_ACTIVATION_LAYER(SiLU, Activation::silu)
FRUGAL_ACTIVATION_LAYER(Sigmoid, Activation::sigmoid)
#undef FRUGAL_ACTIVATION_LAYER

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }
};

// "kernel_size=3, stride=2, padding=1" (and count_include_pad for average pooling), as torch
// prints them.
std::string pool_repr(const functional::Pool2dOptions& o, bool average);

class Dropout : public Module {
 public:
  // Refuses p outside [0, 1] here, as torch.nn.Dropout does, not at the first training forward.
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return functional::dropout(x, p_, is_training()); }
  std::string type_name() const override { return "Dropout"; }

 protected:
  std::string extra_repr() const override { return detail::str("p=", p_); }

 private:
  double p_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0)
      : opt_{kernel, stride, padding, true} {}
  Tensor forward(const Tensor& x) override { return functional::max_pool2d(x, opt_); }
  std::string type_name() const override { return "MaxPool2d"; }

 protected:
  std::string extra_repr() const override { return pool_repr(opt_, false); }

 private:
  functional::Pool2dOptions opt_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                     bool count_include_pad = true)
      : opt_{kernel, stride, padding, count_include_pad} {}
  Tensor forward(const Tensor& x) override { return functional::avg_pool2d(x, opt_); }
  std::string type_name() const override { return "AvgPool2d"; }

 protected:
  std::string extra_repr() const override { return pool_repr(opt_, true); }

 private:
  functional::Pool2dOptions opt_;
};

// AdaptiveAvgPool2d with output size 1 (the only size the models need): [N,H,W,C] -> [N,1,1,C].
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(int64_t output_size = 1);
  Tensor forward(const Tensor& x) override { return functional::global_avg_pool(x); }
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }

 protected:
  std::string extra_repr() const override { return "output_size=1"; }
};

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x.flatten(1); }
  std::string type_name() const override { return "Flatten"; }
};

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(functional::CrossEntropyOptions opt = {}) : opt_(opt) {}
  Tensor operator()(const Tensor& logits, const Tensor& labels) const {
    return functional::cross_entropy(logits, labels, opt_);
  }

 private:
  functional::CrossEntropyOptions opt_;
};

}  // namespace frugal::nn
