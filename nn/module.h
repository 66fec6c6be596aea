// Module: a layer or a model, with named parameters, buffers and children, PyTorch-style dotted
// names ("features.0.0.weight") and train/eval mode.
//
//   class Block : public nn::Module {
//    public:
//     Block() { conv_ = register_module("conv", std::make_shared<nn::Conv2d>(3, 8, 3)); }
//     Tensor forward(const Tensor& x) override { return conv_->forward(x); }
//    private:
//     std::shared_ptr<nn::Conv2d> conv_;
//   };
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"
#include "kernels/elementwise.h"

namespace frugal::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  // forward inside this module's autograd::ModuleScope, so that what it records is listed under
  // its path ("features.3"): call children this way rather than through forward.
  Tensor operator()(const Tensor& x) {
    autograd::ModuleScope scope(name_);
    return forward(x);
  }
  // The name its (first) parent registered it under; "" for a root.
  const std::string& name() const { return name_; }
  // Short type name for printing ("Conv2d").
  virtual std::string type_name() const = 0;

  // Note [Fused activations]: Sequential runs a layer followed by an activation layer as one op
  // when the first says it can take the activation (BatchNorm2d does: batch norm + activation
  // keeps one tensor for backward instead of two). Any layer may opt in.
  virtual bool takes_activation() const { return false; }
  virtual Tensor forward_with_activation(const Tensor& x, kernels::Activation act);
  // The activation this layer is, if it is only one (ReLU, ReLU6, SiLU, ...).
  virtual std::optional<kernels::Activation> as_activation() const { return std::nullopt; }
  // Note [Flat sequential runs]: a module whose forward is exactly "run my Sequential children
  // in order" says so here, and an enclosing Sequential runs those children itself, holding one
  // activation at a time. Nested, each level's caller kept its input alive until the inner run
  // returned: in MobileNetV2's widest block the expand output stayed live through the whole
  // depthwise conv + batch norm (280 MiB at batch 128, f16, 224x224).
  virtual const class Sequential* as_plain_sequential() const { return nullptr; }

  // Recursive, in registration order. A tensor registered twice (tied weights: one module under
  // two parents) is listed once, under its first name, as torch's named_parameters does
  // (remove_duplicate=True): an optimizer given it twice would step it twice. state_dict() and
  // remove_duplicate = false keep every name.
  NamedTensors named_parameters(bool remove_duplicate = true) const;
  NamedTensors named_buffers(bool remove_duplicate = true) const;
  // recurse = false: this module's own parameters only (torch's parameters(recurse=False)).
  std::vector<Tensor> parameters(bool recurse = true) const;
  // This module ("") and every descendant with its dotted path, parents before children.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // fn on every descendant, children first, then on this module (torch's Module.apply).
  void apply(const std::function<void(Module&)>& fn);

  // Parameters and buffers by dotted name, each module's own parameters then its buffers, then
  // its children's (PyTorch's state_dict order and names). The tensors are the module's own.
  NamedTensors state_dict() const;
  struct LoadResult {
    std::vector<std::string> missing;     // names the module has and `state` lacks
    std::vector<std::string> unexpected;  // names in `state` the module lacks
  };
  // Copies `state` into the module's tensors (any device and floating dtype, cast to the
  // module's). strict: a missing or unexpected name is an error naming them all, and nothing
  // is copied; non-strict: the names that matched are copied and the rest reported. A shape
  // mismatch is always an error naming the tensor and both shapes, before anything is copied.
  LoadResult load_state_dict(const NamedTensors& state, bool strict = true);
  // Casts floating parameters and buffers in place (integer buffers such as
  // num_batches_tracked keep their dtype); every handle to them sees the new dtype.
  void to(DType dtype);
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Moves parameters and buffers in place (every handle to them sees the new device).
  void to(Device device);
  std::string str(int indent = 0) const;  // the module tree, like print(model)

 protected:
  Tensor register_parameter(std::string name, Tensor t);
  Tensor register_buffer(std::string name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    if (m != nullptr && !m->named_) {  // a second parent (a view such as ResNet's stages_) keeps it
      m->name_ = name;
      m->named_ = true;
    }
    children_.emplace_back(std::move(name), m);
    return m;
  }
  // Extra text after the type name when printing, e.g. "3, 16, kernel_size=3".
  virtual std::string extra_repr() const { return ""; }
  // Puts `m` where the child registered as `name` was, under the same name.
  void replace_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;
  void collect_state(const std::string& prefix, NamedTensors& out) const;
  // Replaces each parameter's and buffer's storage by convert(t)'s (t itself: left alone).
  void convert_in_place(const std::function<Tensor(const Tensor&)>& convert);
  void collect_modules(const std::string& prefix,
                       std::vector<std::pair<std::string, Module*>>& out);

  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  std::string name_;
  bool named_ = false;
};

// Runs children in order; children are named "0", "1", ... like torch.nn.Sequential.
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  // Layers [begin, end) only (checkpoint_sequential's segments).
  Tensor forward_range(int64_t begin, int64_t end, const Tensor& x) const;
  std::string type_name() const override { return "Sequential"; }
  // Sequential itself and subclasses that keep its forward (Conv2dNormActivation) say yes; a
  // subclass with a forward of its own must answer nullptr (Note [Flat sequential runs]).
  const Sequential* as_plain_sequential() const override { return this; }
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return layers_[i]; }
  // Replaces layer i by fn(layer i) under the same name: wrapping it (in nn::Checkpoint, say)
  // keeps its parameters and their names.
  void wrap(size_t i, const std::function<std::shared_ptr<Module>(std::shared_ptr<Module>)>& fn);

 private:
  // Runs layers [begin, end) on h in place, descending into plain Sequential children.
  void run(size_t begin, size_t end, Tensor& h) const;

  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace frugal::nn
