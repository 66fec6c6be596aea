// The `frugal` subcommands. Each parses its own flags and returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace frugal::tools {

int cmd_train(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_models(const std::vector<std::string>& args);
int cmd_compare(const std::vector<std::string>& args);
int cmd_estimate(const std::vector<std::string>& args);
int cmd_smi(const std::vector<std::string>& args);
int cmd_launch(const std::vector<std::string>& args);

}  // namespace frugal::tools
