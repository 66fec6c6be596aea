// Helpers for the model tests: look up a parameter, buffer or submodule by its dotted name.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "nn/module.h"

namespace frugal::testing {

inline std::map<std::string, Shape> shapes_of(const nn::NamedTensors& named) {
  std::map<std::string, Shape> out;
  for (const auto& [name, t] : named) out.emplace(name, t.shape());
  return out;
}

// The submodule at a dotted path ("features.1.0"), or nullptr.
inline nn::Module* submodule(nn::Module& root, const std::string& path) {
  nn::Module* m = &root;
  size_t start = 0;
  while (m != nullptr && start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    nn::Module* next = nullptr;
    for (const auto& [name, child] : m->named_children()) {
      if (name == part) next = child.get();
    }
    m = next;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return m;
}

// torchvision's OIHW conv weight shape in frugal's OHWI layout.
inline Shape ohwi(int64_t o, int64_t i, int64_t kh, int64_t kw) { return Shape{o, kh, kw, i}; }

// Expects each listed name to exist in `named` with the given shape.
inline void expect_shapes(const nn::NamedTensors& named,
                          const std::vector<std::pair<std::string, Shape>>& expected) {
  auto shapes = shapes_of(named);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    ASSERT_NE(it, shapes.end()) << "missing " << name;
    EXPECT_EQ(it->second, shape) << name;
  }
}

}  // namespace frugal::testing
