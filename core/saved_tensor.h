// Saved tensors: what an autograd node keeps for its backward, as explicit objects the engine can
// list, size, version-check and replace by a recipe.
//
// Note [Saved tensors]
// A node declares what it saves as a list of SavedTensor (PyTorch's ctx.save_for_backward). Each
// one either holds the tensor's bytes (detached, with the storage version it had when saved), or,
// when the tensor carries a Recipe, only the recipe: the inputs it is recomputed from and how.
// An op whose output is cheap to recompute from tensors backward keeps anyway (batch norm +
// activation from the conv output and per-channel statistics; a residual add of two such
// outputs) attaches a recipe to that output; every later op that saves the output then stores
// nothing of its own, and backward recomputes it just before use. Two nodes saving one tensor
// share its storage, so it is stored once. unpack() refuses a tensor written in place after it
// was saved (the version differs), naming the op, as PyTorch does.
//
//   Tensor y = ...;                                     // forward result
//   autograd::set_recipe(y, "relu6(x)", {x}, [](const std::vector<Tensor>& in) {
//     return relu6_raw(in[0]);                          // no history: runs inside backward
//   });
//   return autograd::record("op", {x}, y, {x, w}, [](const auto& g, const auto& saved) { ... });
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/tensor.h"

namespace frugal::autograd {

class SavedTensor;

using RecipeFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// How to recompute one tensor from saved inputs (which may be recipes themselves).
struct Recipe {
  std::string name;  // e.g. "batch_norm(relu6)", for errors and listings
  std::vector<SavedTensor> inputs;
  RecipeFn compute;  // pure: no history, no state change
  Shape shape;       // of the result
  DType dtype = DType::f32;
};

class SavedTensor {
 public:
  SavedTensor() = default;
  // Implicit so that a node's list reads {x, weight}. Undefined tensors stay undefined.
  SavedTensor(const Tensor& t);  // NOLINT(google-explicit-constructor)

  bool defined() const { return data_.defined() || recipe_ != nullptr; }
  bool is_recipe() const { return recipe_ != nullptr; }
  const std::shared_ptr<const Recipe>& recipe() const { return recipe_; }
  // The tensor as it was saved, recomputed when this is a recipe; `op` names the node for the
  // in-place error. Undefined for an undefined SavedTensor.
  Tensor unpack(const std::string& op) const;
  // Bytes of the tensor it yields (whether stored or recomputed).
  size_t nbytes() const;
  // Adds the storages this keeps alive (its own, or its recipe's inputs', recursively).
  void collect_storages(std::unordered_set<const Storage*>& out) const;

 private:
  Tensor data_;  // detached; undefined for a recipe
  uint64_t version_ = 0;
  std::shared_ptr<const Recipe> recipe_;
};

// Attaches a recipe to `t` so that saving `t` later keeps `inputs` instead of t's bytes. Only
// when grad mode is on (otherwise nothing will save it). The autograd::record call that follows
// for t hands the recipe to its node; without one (nothing needed gradients) it is dropped.
void set_recipe(const Tensor& t, std::string name, std::vector<SavedTensor> inputs, RecipeFn fn);

// t's recipe while it is valid: its producing node is alive and t was not written in place
// since. Null otherwise.
std::shared_ptr<const Recipe> recipe_of(const Tensor& t);
inline bool has_recipe(const Tensor& t) { return recipe_of(t) != nullptr; }

}  // namespace frugal::autograd
