// Equality saturation over optimize/'s rules (MEGANEURA_OPTIMIZE=saturate): the graph goes into an e-graph
// (egraph.hpp), the rewrites below add every equality they find, in rounds over all e-nodes, and extraction
// builds the cheapest graph its classes hold. The greedy sweep (simplify) applies a rule where it first
// matches; here rules compose: b + a is found equal to a + b, so the products that read them merge, and a
// permute of a permute is one permute whichever order autodiff wrote them in.
//
// Bounded: the rounds stop at a node budget or a time budget (optimize.hpp's SaturationBudget), and every
// e-graph they leave holds only proven equalities, so the extracted graph is correct wherever they stopped.
// The graphs are whole programs, tens of thousands of nodes in a training step: a round is one pass over the
// e-nodes and a rebuild, both linear (hash-consed), so there is no size above which a graph is skipped.
//
// Extraction's cost comes from the kernel families (cost_of): a node whose family runs it as a dispatch costs a
// dispatch and its bytes, a pointwise node fuses into its consumer and costs about an instruction, a reshape is
// a view and costs nothing. Classes are chosen bottom-up in order of cost (Knuth's generalization of Dijkstra),
// ties going to the e-node added first (the graph's own node before a rewrite's), so the choice is the same every
// run and never cyclic.
//
// On the five models (bench/results/2026-12-03-saturate-lavapipe.md) it finds what the greedy pass finds and a few
// views more: the same dispatches and barriers, for 0.2-25 ms of compile time.
#include <chrono>
#include <queue>
#include <unordered_map>

#include "optimize/egraph.hpp"
#include "optimize/optimize.hpp"
#include "optimize/rules.hpp"

namespace mn::optimize {
namespace {

// ---- the rewrites ----
// Each reads one e-node `e` and adds what it equals: an e-node to e's class, or e's class merged with another.
// Those below the identities are exact in IEEE arithmetic (float32 on the device, float64 in the reference), NaN's
// payload aside; the identities are the greedy sweep's (x + 0 is x but for the sign of a zero).

// The members of class `c` whose op is `op` (a copy: the rewrite may add e-nodes while it reads them).
std::vector<ENodeId> with_op(EGraph& eg, ClassId c, Op op) {
    std::vector<ENodeId> out;
    for (ENodeId m : eg.members(eg.find(c))) {
        if (eg.attr(eg.node(m).attr).op == op) out.push_back(m);
    }
    return out;
}

// e equals a node with attributes `attr` over `kids`.
void equals(EGraph& eg, ENodeId e, uint32_t attr, std::vector<ClassId> kids) {
    const ENodeId same = eg.add(attr, std::move(kids));
    eg.merge(eg.class_of(e), eg.class_of(same));
}

// e's attributes with another op (or other ints), for a rewrite that keeps e's shape, dtype and gradient flag.
uint32_t variant(EGraph& eg, ENodeId e, Op op, std::vector<int64_t> ints) {
    Node a = eg.attr(eg.node(e).attr);
    a.op = op;
    a.ints = std::move(ints);
    if (op == Op::Reshape) make_reshape(a);
    return eg.intern(a);
}

// The tables the greedy sweep reads (rules.hpp): x + 0, x * 1, ..., -(-x), data movement or casts that change
// nothing, and the permutes and reductions that are reshapes.
void identities(EGraph& eg, ENodeId e) {
    const ENode n = eg.node(e);
    const Node& a = eg.attr(n.attr);
    for (const Identity& r : kIdentities) {
        if (a.op != r.op || n.kids.size() != 2) continue;
        const ClassId x = n.kids[static_cast<size_t>(1 - r.constant)], c = n.kids[static_cast<size_t>(r.constant)];
        const auto constants = with_op(eg, c, Op::Constant);
        const bool one = std::any_of(constants.begin(), constants.end(), [&](ENodeId k) { return all_equal(eg.attr(eg.node(k).attr), r.value); });
        if (one && eg.shape(x) == a.shape && eg.dtype(x) == a.dtype) eg.merge(eg.class_of(e), x);
    }
    if (n.kids.size() != 1) return;
    const ClassId in = eg.find(n.kids[0]);
    if (is_involution(a.op)) {
        for (ENodeId m : with_op(eg, in, a.op)) eg.merge(eg.class_of(e), eg.node(m).kids[0]);
    }
    if (changes_nothing(a, eg.shape(in), eg.dtype(in))) eg.merge(eg.class_of(e), in);
    if (moves_no_element(a, eg.shape(in)) || reduces_nothing(a, eg.shape(in))) equals(eg, e, variant(eg, e, Op::Reshape, {}), {in});
}

// a + b = b + a, a * b = b * a: what lets the congruence find that the products of a + b and of b + a are one.
void commute(EGraph& eg, ENodeId e) {
    const ENode n = eg.node(e);
    const Op op = eg.attr(n.attr).op;
    if ((op == Op::Add || op == Op::Mul) && n.kids[0] != n.kids[1]) equals(eg, e, n.attr, {n.kids[1], n.kids[0]});
}

// reshape(reshape(x)) = reshape(x) and expand(expand(x)) = expand(x): views of views (a reshape of the result
// shape, a broadcast to it).
void view_of_view(EGraph& eg, ENodeId e) {
    const ENode n = eg.node(e);
    const Op op = eg.attr(n.attr).op;
    if (op != Op::Reshape && op != Op::Expand) return;
    for (ENodeId m : with_op(eg, n.kids[0], op)) equals(eg, e, n.attr, {eg.node(m).kids[0]});
}

// permute(permute(x, p), q) = permute(x, p[q]): one copy kernel, not two (and none when p[q] is the identity).
void permute_of_permute(EGraph& eg, ENodeId e) {
    const ENode n = eg.node(e);
    const Node& a = eg.attr(n.attr);
    if (a.op != Op::Permute) return;
    for (ENodeId m : with_op(eg, n.kids[0], Op::Permute)) {
        const std::vector<int64_t>& p = eg.attr(eg.node(m).attr).ints;
        std::vector<int64_t> composed;
        for (int64_t d : eg.attr(n.attr).ints) composed.push_back(p[static_cast<size_t>(d)]);
        equals(eg, e, variant(eg, e, Op::Permute, composed), {eg.node(m).kids[0]});
    }
}

// cast(cast(x f16, f32), f16) = x: f16 to f32 is exact, so the round trip is. (Not i32 through f32, which
// rounds above 2^24, nor f32 through f16.)
void cast_round_trip(EGraph& eg, ENodeId e) {
    const ENode n = eg.node(e);
    const Node& a = eg.attr(n.attr);
    if (a.op != Op::Cast || a.dtype != DType::F16) return;
    for (ENodeId m : with_op(eg, n.kids[0], Op::Cast)) {
        const ClassId x = eg.node(m).kids[0];
        if (eg.attr(eg.node(m).attr).dtype == DType::F32 && eg.dtype(x) == DType::F16) eg.merge(eg.class_of(e), x);
    }
}

// x + (-y) = x - y, x - (-y) = x + y, (-x) * (-y) = x * y: a negation flips the sign bit and nothing else, so
// each is exact, and each removes the negation (autodiff writes one for every subtraction's right operand).
void negations(EGraph& eg, ENodeId e) {
    const ENode n = eg.node(e);
    const Op op = eg.attr(n.attr).op;
    if (op != Op::Add && op != Op::Sub && op != Op::Mul) return;
    for (ENodeId ny : with_op(eg, n.kids[1], Op::Neg)) {
        const ClassId y = eg.node(ny).kids[0];
        if (op == Op::Mul) {
            for (ENodeId nx : with_op(eg, n.kids[0], Op::Neg)) equals(eg, e, n.attr, {eg.node(nx).kids[0], y});
        } else {
            equals(eg, e, variant(eg, e, op == Op::Add ? Op::Sub : Op::Add, {}), {n.kids[0], y});
        }
    }
}

// Not here: x * c1 * c2 = x * (c1 c2), which rounds differently unless c1 and c2 are powers of two and nothing
// overflows, and which no model's graph holds once the identities are gone; nor associativity, which rounds
// differently and would grow the e-graph exponentially.
struct Rewrite {
    const char* says;
    void (*apply)(EGraph&, ENodeId);
};
constexpr Rewrite kRewrites[] = {
    {"x + 0 = x, -(-x) = x, reshape to its own shape = x, ... (rules.hpp)", identities},
    {"a + b = b + a, a * b = b * a", commute},
    {"reshape(reshape(x)) = reshape(x), expand(expand(x)) = expand(x)", view_of_view},
    {"permute(permute(x, p), q) = permute(x, p[q])", permute_of_permute},
    {"cast(cast(x f16, f32), f16) = x", cast_round_trip},
    {"x + (-y) = x - y, x - (-y) = x + y, (-x) * (-y) = x * y", negations},
};

// ---- cost and extraction ----

// A dispatch and the barrier after it, in units of about one fused arithmetic instruction: ~1.8 us on the
// H200 (DEVICE.md), the time of about a thousand instructions a thread.
constexpr uint64_t kDispatch = 1000;

uint64_t cost_of(const Node& a) {
    const uint64_t bytes = static_cast<uint64_t>(numel(a.shape)) * dtype_size(a.dtype);
    switch (op_info(a.op).archetype) {
        case Archetype::Leaf:
            return 1;
        case Archetype::Pointwise:  // inlined into its consumer's kernel (schedule/fusion.hpp)
            return 2;
        case Archetype::DataMovement:
            // A view: free, so a chain of them ties with one and the graph's own chain stays (a new reshape
            // reading x beside the chain's first, which others read, would give x a second reader, and a
            // product that stores its reader's epilogue through a reshape has to be that reshape's one).
            if (a.op == Op::Reshape) return 0;
            return kDispatch + bytes / 64;
        case Archetype::Reduction:
        case Archetype::MatMul:
        case Archetype::Conv:
        case Archetype::Attention:
            return kDispatch + bytes / 64;
    }
    return kDispatch;
}

uint64_t saturating_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// The cheapest e-node of each class: a class is settled when the cheapest e-node whose inputs are all
// settled is taken from the queue, (cost, e-node id) ordering the queue.
std::vector<ENodeId> choose(EGraph& eg) {
    const size_t n = eg.node_count();
    std::vector<uint64_t> cost(n, 0);  // of each class, by class id (ids are below the e-node count)
    std::vector<ENodeId> best(n, UINT32_MAX);
    std::vector<uint32_t> waiting(n, 0);
    std::vector<std::vector<ENodeId>> readers(n);
    using Entry = std::pair<uint64_t, ENodeId>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
    for (ENodeId e = 0; e < n; ++e) {
        if (!eg.live(e)) continue;
        std::vector<ClassId> kids = eg.node(e).kids;
        std::sort(kids.begin(), kids.end());
        kids.erase(std::unique(kids.begin(), kids.end()), kids.end());
        waiting[e] = static_cast<uint32_t>(kids.size());
        for (ClassId k : kids) readers[k].push_back(e);
        if (kids.empty()) queue.emplace(cost_of(eg.attr(eg.node(e).attr)), e);
    }
    while (!queue.empty()) {
        const auto [c_cost, e] = queue.top();
        queue.pop();
        const ClassId c = eg.class_of(e);
        if (best[c] != UINT32_MAX) continue;
        best[c] = e;
        cost[c] = c_cost;
        for (ENodeId r : readers[c]) {
            if (--waiting[r] != 0) continue;
            uint64_t total = cost_of(eg.attr(eg.node(r).attr));
            for (ClassId k : eg.node(r).kids) total = saturating_add(total, cost[k]);
            queue.emplace(total, r);
        }
    }
    return best;
}

// The extracted graph. Its roots are the original's: every leaf, the outputs and the assignments, each its own
// pinned e-node; the rest is what the roots read, each class as its chosen e-node. A pointwise class is emitted
// once per graph node it stands for, not once: the greedy sweep leaves pointwise duplicates apart too, since
// fusion inlines each into its one reader, where one shared value would be a kernel of its own.
//
// The nodes come in the original's order, each where the node it stands for was (a rewrite's after its inputs):
// lowering and fusion read the order (a parameter's update writes in place when its old value's other readers
// come in earlier kernels; in the order of a depth-first walk from the roots, ResNet-50's step had 53 copy
// kernels more).
Graph extract(EGraph& eg, const Graph& g, const std::vector<ENodeId>& of_node, const std::vector<bool>& is_output) {
    const std::vector<ENodeId> best = choose(eg);
    struct Item {
        ENodeId e;
        int32_t origin;  // the graph node this value stands for, -1 when none
        int64_t position;
        std::vector<uint32_t> kids;
    };
    std::vector<Item> items;
    std::unordered_map<uint64_t, uint32_t> item_of;  // (e-node, the graph node it stands for if pointwise)
    const auto key = [&](ENodeId e, int32_t origin) {
        const bool per_use = op_info(eg.attr(eg.node(e).attr).op).archetype == Archetype::Pointwise;
        return uint64_t{e} << 32 | static_cast<uint32_t>(per_use ? origin : -1);
    };
    // The graph node that input k of (e standing for `origin`) stands for: the input of that node, or of the node
    // e was made for; for an e-node a rewrite made, the node its input's chosen e-node was made for (so a
    // rewritten reader shares its input with the graph's own readers, not a copy of its own).
    const auto kid_origin = [&](ENodeId e, int32_t origin, size_t k) -> int32_t {
        if (origin >= 0 && eg.canonical(of_node[static_cast<size_t>(origin)]) == e) return g.node(origin).inputs[k];
        if (const int32_t o = eg.node(e).origin; o >= 0) return g.node(o).inputs[k];
        return eg.node(best[eg.find(eg.node(e).kids[k])]).origin;
    };
    const auto kid_key = [&](ENodeId e, int32_t origin, size_t k) {
        return key(best[eg.find(eg.node(e).kids[k])], kid_origin(e, origin, k));
    };
    // What a root reads, depth first, each item after its inputs.
    struct Frame {
        ENodeId e;
        int32_t origin;
        size_t next = 0;
    };
    const auto collect = [&](ENodeId root, int32_t origin) -> uint32_t {
        std::vector<Frame> stack{{root, origin}};
        while (!stack.empty()) {
            const Frame f = stack.back();
            const ENode& n = eg.node(f.e);
            if (f.next < n.kids.size()) {
                ++stack.back().next;
                const ENodeId kid = best[eg.find(n.kids[f.next])];
                const int32_t o = kid_origin(f.e, f.origin, f.next);
                if (!item_of.count(key(kid, o))) stack.push_back({kid, o});
                continue;
            }
            stack.pop_back();
            if (item_of.count(key(f.e, f.origin))) continue;
            Item item{f.e, f.origin, f.origin >= 0 ? f.origin : n.origin, {}};
            for (size_t k = 0; k < n.kids.size(); ++k) {
                item.kids.push_back(item_of.at(kid_key(f.e, f.origin, k)));
                if (item.origin < 0 && n.origin < 0) item.position = std::max(item.position, items[item.kids.back()].position);
            }
            item_of.emplace(key(f.e, f.origin), static_cast<uint32_t>(items.size()));
            items.push_back(std::move(item));
        }
        return item_of.at(key(root, origin));
    };
    std::vector<uint32_t> root_item(g.nodes().size(), UINT32_MAX);
    for (size_t i = 0; i < g.nodes().size(); ++i) {
        const Node& n = g.nodes()[i];
        if (is_output[i] || is_leaf(n.op) || n.op == Op::Assign) root_item[i] = collect(of_node[i], static_cast<int32_t>(i));
    }
    // Emitted by position (then as collected) among the items whose inputs are emitted.
    std::vector<uint32_t> waiting(items.size());
    std::vector<std::vector<uint32_t>> readers(items.size());
    using Ready = std::pair<int64_t, uint32_t>;
    std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
    for (uint32_t i = 0; i < items.size(); ++i) {
        waiting[i] = static_cast<uint32_t>(items[i].kids.size());
        for (uint32_t k : items[i].kids) readers[k].push_back(i);
        if (items[i].kids.empty()) ready.emplace(items[i].position, i);
    }
    Graph out;
    std::vector<int32_t> id(items.size(), -1);
    while (!ready.empty()) {
        const uint32_t i = ready.top().second;
        ready.pop();
        Node node = eg.attr(eg.node(items[i].e).attr);
        for (uint32_t k : items[i].kids) node.inputs.push_back(id[k]);
        id[i] = out.emit(std::move(node)).id;
        for (uint32_t r : readers[i]) {
            if (--waiting[r] == 0) ready.emplace(items[r].position, r);
        }
    }
    for (const auto& [name, node] : g.outputs()) out.output(name, out.handle(id[root_item[static_cast<size_t>(node)]]));
    return out;
}

}  // namespace

Graph saturate(const Graph& g, const SaturationBudget& budget, Stats& stats) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto elapsed_ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
    std::vector<bool> is_output(g.nodes().size(), false);
    for (const auto& [name, id] : g.outputs()) is_output[static_cast<size_t>(id)] = true;

    EGraph eg;
    std::vector<ENodeId> of_node(g.nodes().size());
    for (size_t i = 0; i < g.nodes().size(); ++i) {
        const Node& n = g.nodes()[i];
        const bool pinned = is_output[i] || is_leaf(n.op) || n.op == Op::Assign || has_nan(n);
        std::vector<ClassId> kids;
        for (int32_t in : n.inputs) kids.push_back(eg.class_of(of_node[static_cast<size_t>(in)]));
        // A node equal to an earlier one (common subexpressions, equal constants) shares its e-node.
        of_node[i] = eg.add(eg.intern(n, pinned ? static_cast<int32_t>(i) : -1), std::move(kids), static_cast<int32_t>(i));
    }

    SaturationReport& r = stats.saturation;
    r.stop = "saturated";
    for (bool done = false; !done;) {
        ++r.rounds;
        const size_t nodes = eg.node_count(), merges = eg.merges();
        for (ENodeId e = 0; e < nodes && !done; ++e) {
            if (e % 256 == 0 && elapsed_ms() > budget.ms) {
                r.stop = "time budget";
                done = true;
            } else if (eg.live(e) && !eg.pinned(eg.node(e).attr)) {
                for (const Rewrite& rw : kRewrites) rw.apply(eg, e);
                if (eg.node_count() >= budget.nodes) {
                    r.stop = "node budget";
                    done = true;
                }
            }
        }
        eg.rebuild();
        done = done || (eg.node_count() == nodes && eg.merges() == merges);
    }
    r.enodes = eg.node_count();
    r.classes = eg.class_count();
    Graph out = extract(eg, g, of_node, is_output);
    r.ms = elapsed_ms();
    return out;
}

}  // namespace mn::optimize
