#pragma once
// Every `meganeura` subcommand, one Command each, defined in its cmd_*.cpp file; main.cpp lists them.
// A new command: a cmd_<name>.cpp defining `const Command <name>_command = {...}` (its options
// declared once, with defaults and help), its declaration here, and one entry in main.cpp's table.
#include <string>

#include "cli/flags.hpp"
#include "meganeura/precision.hpp"

namespace mn::cli {

extern const Command devices_command;
extern const Command models_command;
extern const Command train_command;
extern const Command eval_command;
extern const Command forward_command;
extern const Command generate_command;
extern const Command bench_command;
extern const Command tokenize_command;
extern const Command finetune_command;
extern const Command shaders_command;

// The commit this binary was built from: its 40 hex digits, "-dirty" after them where the build's tracked files
// differed from it, or "unknown" (built outside a git checkout); generated at build time (cmake/build_commit.cmake).
const char* build_commit();

// The --precision option, and its value: "strict" or "fast"; anything else is an mn::Error.
Option precision_option();
Precision parse_precision(const Flags& flags);

}  // namespace mn::cli
