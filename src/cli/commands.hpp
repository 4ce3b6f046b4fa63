#pragma once
// One function per `meganeura` subcommand. Each gets the arguments after the subcommand's name,
// returns the process exit code, and reports bad input by throwing mn::Error (main prints one line).
#include <string>
#include <vector>

#include "meganeura/session.hpp"

namespace mn::cli {

using Args = std::vector<std::string>;

int cmd_devices(const Args& args);
int cmd_train(const Args& args);
int cmd_eval(const Args& args);
int cmd_forward(const Args& args);
int cmd_generate(const Args& args);
int cmd_bench(const Args& args);

// "strict" or "fast"; anything else is an mn::Error (cmd_forward.cpp).
Precision parse_precision(const std::string& s);

}  // namespace mn::cli
