// `frugal models`: the registry with parameter counts (1000 classes, 3 channels, width 1.0).
#include <cstdio>

#include "models/registry.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace frugal::tools {

int cmd_models(const std::vector<std::string>& argv) {
  Args args("models", argv, {}, {"help"});
  if (args.flag("help")) {
    std::puts(
        "usage: frugal models\n  Lists the registered models with their parameter counts\n"
        "  for 1000 classes, 3 input channels and width 1.0.");
    return 0;
  }
  std::printf("%-18s %12s  %s\n", "model", "parameters", "description");
  for (const std::string& name : models::names()) {
    auto m = models::create(name, {});
    std::printf("%-18s %12lld  %s\n", name.c_str(), static_cast<long long>(m->num_parameters()),
                models::description(name).c_str());
  }
  return 0;
}

}  // namespace frugal::tools
