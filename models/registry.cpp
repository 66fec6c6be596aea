// The registry: one table of name, description and constructor.
#include "models/registry.h"

#include <functional>

#include "base/error.h"
#include "models/efficientnet.h"
#include "models/mobilenet_v1.h"
#include "models/mobilenet_v2.h"
#include "models/resnet.h"

namespace frugal::models {
namespace {

struct Entry {
  const char* name;
  const char* description;
  std::function<std::shared_ptr<nn::Module>(const ModelConfig&)> make;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> kTable = {
      {"mobilenet_v1",
       "MobileNetV1 (Howard et al. 2017): 13 depthwise-separable blocks, ReLU; 4.23M parameters",
       [](const ModelConfig& c) { return std::make_shared<MobileNetV1>(c); }},
      {"mobilenet_v2",
       "MobileNetV2 (Sandler et al. 2018), torchvision layout: inverted residuals, ReLU6; 3.50M "
       "parameters",
       [](const ModelConfig& c) { return std::make_shared<MobileNetV2>(c); }},
      {"efficientnet_b0",
       "EfficientNet-B0 (Tan & Le 2019), torchvision layout: MBConv with squeeze-excitation, SiLU, "
       "stochastic depth; 5.29M parameters",
       [](const ModelConfig& c) { return std::make_shared<EfficientNetB0>(c); }},
      {"resnet18",
       "ResNet-18 (He et al. 2016), torchvision layout: BasicBlocks [2, 2, 2, 2]; 11.7M parameters",
       [](const ModelConfig& c) { return std::make_shared<ResNet18>(c); }},
  };
  return kTable;
}

const Entry& find(const char* op, const std::string& name) {
  for (const Entry& e : table()) {
    if (name == e.name) return e;
  }
  std::string known;
  for (const Entry& e : table()) known += (known.empty() ? "" : ", ") + std::string(e.name);
  FRUGAL_FAIL(op, ": unknown model '", name, "'; known models: ", known);
}

}  // namespace

std::shared_ptr<nn::Module> create(const std::string& name, const ModelConfig& cfg) {
  return find("models::create", name).make(cfg);
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const Entry& e : table()) out.emplace_back(e.name);
  return out;
}

std::string description(const std::string& name) {
  return find("models::description", name).description;
}

}  // namespace frugal::models
