// The model zoo by name, for the command line and the trainer.
//
//   auto net = models::create("mobilenet_v2", {.num_classes = 10, .in_channels = 1});
//   for (auto& n : models::names()) std::cout << n << ": " << models::description(n) << "\n";
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "nn/module.h"

namespace frugal::models {

// Builds the named model; throws frugal::Error listing the known names when `name` is unknown.
std::shared_ptr<nn::Module> create(const std::string& name, const ModelConfig& cfg = {});
// Known names in a fixed order.
std::vector<std::string> names();
// One line on the model (paper, size, what makes it distinctive); throws like create.
std::string description(const std::string& name);

}  // namespace frugal::models
