#include "models/checkpoint_in_place.h"

#include <set>
#include <string>
#include <vector>

#include "nn/checkpoint.h"

namespace frugal::models {

int64_t checkpoint_blocks_in_place(nn::Module& model) {
  static const std::set<std::string> kBlocks = {"InvertedResidual", "DepthwiseSeparable", "MBConv",
                                                "BasicBlock"};
  // Collected first: wrapping changes the module tree being walked.
  std::vector<std::pair<nn::Sequential*, size_t>> blocks;
  std::set<const nn::Module*> seen;  // a sequential reachable twice (ResNet's stage view) once
  for (nn::Module* m : model.modules()) {
    auto* seq = dynamic_cast<nn::Sequential*>(m);
    if (seq == nullptr || !seen.insert(seq).second) continue;
    for (size_t i = 0; i < seq->size(); ++i) {
      if (kBlocks.count((*seq)[i]->type_name()) != 0) blocks.emplace_back(seq, i);
    }
  }
  for (const auto& [seq, i] : blocks) {
    seq->wrap(i, [](std::shared_ptr<nn::Module> block) {
      return std::make_shared<nn::Checkpoint>(std::move(block));
    });
  }
  return static_cast<int64_t>(blocks.size());
}

}  // namespace frugal::models
