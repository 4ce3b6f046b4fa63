#include "cli/model_arg.hpp"

namespace mn::cli {

ModelArg model_arg(const Flags& f) {
    const std::string& model = f.required("model");
    if (models::is_directory(model)) {
        for (const char* other : {"config", "weights"}) {
            if (!f.str(other).empty())
                throw Error(std::string("--") + other + " cannot be combined with the model folder " + model +
                            ", which has its own");
        }
        models::ModelFolder folder = models::open_model_folder(model);
        ModelArg m{.name = folder.model, .request = {.size = "full", .config_path = folder.config},
                   .weights = folder.weights};
        m.folder = std::move(folder);
        return m;
    }
    if (model.find('/') != std::string::npos) throw Error("--model " + model + ": no such model folder");
    const std::string& size = f.choice("size", {"tiny", "full"});
    (void)models::find_model(model);  // an unknown name fails before any file is read
    ModelArg m{.name = model, .request = {.size = size, .config_path = f.str("config")}};
    if (!f.str("weights").empty()) m.weights = {f.str("weights")};
    return m;
}

std::vector<Option> model_options(const std::string& model, const std::string& size, std::vector<Option> more) {
    std::vector<Option> options = {{"model", model, "NAME|DIR",
             "a model of the registry (meganeura models) or a Hugging Face model folder (-m DIR" +
                 std::string(model.empty() ? "; required)" : ")")},
            {"size", size, "SIZE", "tiny (the test configuration) or full (the published one); not with a folder"},
            {"config", "", "FILE", "a Hugging Face config.json, overriding --size's configuration; not with a folder"},
            {"weights", "", "FILE", "safetensors weights by parameter name (default: random initialization)"}};
    options.insert(options.end(), more.begin(), more.end());
    return options;
}

}  // namespace mn::cli
