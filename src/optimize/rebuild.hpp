#pragma once
// The one way optimize/'s rewrites make a new graph: a copy of the old one, node by node in order.
#include <vector>

#include "meganeura/graph.hpp"

namespace mn::optimize {

constexpr int32_t kEmit = -1, kDropped = -2;  // what a rebuild's decision may say besides a node id

// `decide(i, node, copy so far)` sees node i with its inputs already renumbered, and answers kEmit (copy
// it, as decide may have changed it), kDropped (nothing reads it) or the id of a node of the copy that
// stands for it (which it may emit itself). The gradient boundary and the outputs carry over.
template <class Decide>
Graph rebuild(const Graph& g, Decide&& decide) {
    Graph out;
    std::vector<int32_t> to(g.nodes().size(), -1);
    for (size_t i = 0; i < g.nodes().size(); ++i) {
        Node n = g.nodes()[i];
        for (int32_t& in : n.inputs) in = to[static_cast<size_t>(in)];
        const int32_t same = decide(i, n, out);
        if (same >= 0 || same == kDropped) {
            to[i] = same;
            continue;
        }
        to[i] = out.emit(std::move(n)).id;  // Node::gradient with it
    }
    for (const auto& [name, id] : g.outputs()) out.output(name, out.handle(to[static_cast<size_t>(id)]));
    return out;
}

}  // namespace mn::optimize
