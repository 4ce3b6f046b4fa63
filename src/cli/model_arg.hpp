#pragma once
// The model a command runs: `--model NAME` (a registry entry, sized by --size and --config, weights
// from --weights) or `--model DIR` / `-m DIR` (a Hugging Face model folder, which brings its own
// config, weights and tokenizer, so --config and --weights are refused beside it).
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.hpp"
#include "models/model_folder.hpp"
#include "models/registry.hpp"

namespace mn::cli {

struct ModelArg {
    std::string name;                  // the registry entry
    models::ModelRequest request;      // size and config.json
    std::vector<std::string> weights;  // empty: the random initialization
    std::optional<models::ModelFolder> folder;
};

// Reads --model (or -m), --size, --config and --weights, which the command declares with model_options.
ModelArg model_arg(const Flags& f);
// --model, --size, --config and --weights (with `model` and `size` as defaults), then `more`.
std::vector<Option> model_options(const std::string& model, const std::string& size, std::vector<Option> more = {});

}  // namespace mn::cli
