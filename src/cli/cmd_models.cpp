// `meganeura models`: every model of the registry with its inputs and outputs (name, shape, dtype)
// and its parameter count, read from the graph the builder makes, so the list cannot drift from
// what `forward` and `bench` accept.
#include <cstdio>

#include "cli/commands.hpp"
#include "models/registry.hpp"

namespace mn::cli {

namespace {

std::string tensor_line(const char* kind, const std::string& name, const Node& n) {
    return std::string("    ") + kind + " " + name + " " + shape_str(n.shape) + " " + dtype_name(n.dtype) + "\n";
}

int run_models(const Flags& f) {
    if (!f.positional().empty()) throw Error("models takes no positional arguments");
    const std::string& size = f.choice("size", {"full", "tiny"});
    std::string text;
    for (const models::ModelEntry& e : models::model_table()) {
        const models::BuiltModel m = e.build({.size = size});
        const Graph& g = *m.graph;
        int64_t parameters = 0, values = 0;
        text += e.name + ": " + e.description + "\n";
        for (const Node& n : g.nodes()) {
            if (n.op == Op::Input) text += tensor_line("input ", n.name, n);
            if (n.op == Op::Parameter) ++parameters, values += numel(n.shape);
        }
        for (const auto& [name, id] : g.outputs()) text += tensor_line("output", name, g.node(id));
        text += "    " + std::to_string(parameters) + " parameters, " + std::to_string(values) + " values\n";
    }
    std::fputs(text.c_str(), stdout);
    return 0;
}

}  // namespace

const Command models_command = {
    .name = "models",
    .summary = "list every model with its inputs, outputs (shapes, dtypes) and parameter count",
    .description = "Lists every model that forward and bench build by name, with each input and output (name,\n"
                   "shape, dtype) at the benchmark's input shapes, and its parameter count. forward takes\n"
                   "other batch sizes and lengths from its --inputs file.",
    .options = {{"size", "full", "SIZE", "full (the published configuration) or tiny (the test one)"}},
    .run = run_models,
};

}  // namespace mn::cli
