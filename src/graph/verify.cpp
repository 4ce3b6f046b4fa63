// verify_graph: what ops.def says of each op, checked node by node. The builders check it as they append; a
// pass appends through Graph::emit, which checks only that a node's inputs exist (so come before it), so the
// compiler verifies the graph it is about to lower.
#include "meganeura/graph.hpp"

namespace mn {

void verify_graph(const Graph& g) {
    const auto& nodes = g.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
        const Node& n = nodes[i];
        const OpInfo& info = op_info(n.op);
        auto fail = [&](const std::string& what) {
            throw Error("graph: node %" + std::to_string(i) + " (" + info.name + ") " + what);
        };
        const auto count = static_cast<int>(n.inputs.size());
        if (info.arity >= 0 && count != info.arity) {
            fail("has " + std::to_string(count) + " inputs; ops.def gives it " + std::to_string(info.arity));
        }
        if (info.arity < 0 && count == 0) fail("has no inputs; ops.def gives it one or more");
    }
    for (const auto& [name, id] : g.outputs()) {
        if (id < 0 || static_cast<size_t>(id) >= nodes.size()) {
            throw Error("graph: output '" + name + "' names node %" + std::to_string(id) + ", which is not in the graph");
        }
    }
}

}  // namespace mn
