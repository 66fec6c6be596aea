#include "models/checkpoint_in_place.h"

#include <set>
#include <string>
#include <vector>

#include "nn/checkpoint.h"

namespace frugal::models {
namespace {

// What the "blocks" checkpoint policy wraps when it builds a model: the blocks, and the stem and
// head convolutions that stand beside them (MobileNetV1/V2 and EfficientNet; ResNet's stem is
// not one module and stays as the policy leaves it).
bool is_block(const nn::Module& m) {
  static const std::set<std::string> kBlocks = {"InvertedResidual", "DepthwiseSeparable", "MBConv",
                                                "BasicBlock", "Conv2dNormActivation"};
  return kBlocks.count(m.type_name()) != 0;
}

// The (sequential, index) of every block under `m`, in forward order. A block is not entered (its
// own Conv2dNormActivation parts are not blocks), nor is a Checkpoint (already wrapped), nor a
// module reachable twice (ResNet's stage view).
void collect_blocks(nn::Module& m, std::set<const nn::Module*>& seen,
                    std::vector<std::pair<nn::Sequential*, size_t>>& out) {
  if (!seen.insert(&m).second || m.type_name() == "Checkpoint") return;
  if (auto* seq = dynamic_cast<nn::Sequential*>(&m)) {
    for (size_t i = 0; i < seq->size(); ++i) {
      nn::Module& child = *(*seq)[i];
      if (is_block(child)) {
        out.emplace_back(seq, i);
      } else {
        collect_blocks(child, seen, out);
      }
    }
    return;
  }
  for (const auto& [name, child] : m.named_children()) collect_blocks(*child, seen, out);
}

}  // namespace

int64_t checkpoint_blocks_in_place(nn::Module& model) {
  // Collected first: wrapping changes the module tree being walked.
  std::vector<std::pair<nn::Sequential*, size_t>> blocks;
  std::set<const nn::Module*> seen;
  collect_blocks(model, seen, blocks);
  for (const auto& [seq, i] : blocks) {
    seq->wrap(i, [](std::shared_ptr<nn::Module> block) {
      return std::make_shared<nn::Checkpoint>(std::move(block));
    });
  }
  return static_cast<int64_t>(blocks.size());
}

}  // namespace frugal::models
