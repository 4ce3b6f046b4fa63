#include "schedule/fusion.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "schedule/fusion_planner.hpp"

namespace mn::sched {

namespace detail {

FusionPlanner::FusionPlanner(const Graph& g, const std::vector<bool>& live, const std::vector<int32_t>& roots,
                             uint32_t max_inputs, const std::function<bool(int32_t)>& takes_update,
                             const std::function<ProductSplit(int32_t)>& split_of)
    : g_(g), live_(live), max_inputs_(max_inputs), takes_update_(takes_update), split_of_(split_of),
      consumers_(g.nodes().size()),
      is_root_(g.nodes().size(), false) {
    for (int32_t r : roots) is_root_[static_cast<size_t>(r)] = true;
    varies_.assign(g.nodes().size(), false);
    depth_.assign(g.nodes().size(), 0);
    for (size_t i = 0; i < g.nodes().size(); ++i) {
        const Node& n = g.nodes()[i];
        varies_[i] = n.op == Op::Input || n.op == Op::State ||
                     std::any_of(n.inputs.begin(), n.inputs.end(), [&](int32_t in) { return varies_[static_cast<size_t>(in)]; });
        const Archetype kind = op_info(n.op).archetype;
        for (int32_t in : n.inputs) depth_[i] = std::max(depth_[i], depth_[static_cast<size_t>(in)]);
        depth_[i] += kind != Archetype::Leaf && kind != Archetype::Pointwise && n.op != Op::Reshape ? 1 : 0;
    }
    for (size_t i = 0; i < live.size(); ++i) {
        if (!live[i]) continue;
        for (int32_t in : g.nodes()[i].inputs) {
            auto& c = consumers_[static_cast<size_t>(in)];
            if (c.empty() || c.back() != static_cast<int32_t>(i)) c.push_back(static_cast<int32_t>(i));
        }
    }
    // Every per-node field of the plan starts as none: no node (-1), no, or an empty list.
    const auto start_as = [n = g.nodes().size()](const auto& none, auto&... fields) { (fields.assign(n, none), ...); };
    start_as(-1, plan_.in_place_of, plan_.stored_in, plan_.epilogue_of, plan_.epilogue_product, plan_.heads_merged_into,
             plan_.heads_split_by, plan_.batched_update, plan_.rope_of_gradient, plan_.heads_split_stored,
             plan_.rope_into_cache, plan_.rope_in_gemv, plan_.cache_in_gemv, plan_.in_gemv, plan_.norm_in_sum,
             plan_.sum_norm, plan_.sum_delta, plan_.norm_grad_in_sum, plan_.sum_norm_grad, plan_.epilogue_pair,
             plan_.reduced_in, plan_.up_xhat_of, plan_.up_xhat_by, plan_.norm_prologue, plan_.prologue_of_norm);
    start_as(false, plan_.inlined, plan_.assign_elided, plan_.epilogue_keeps, plan_.read_strided, plan_.norm_in_products,
             plan_.summed_as_read);
    start_as(std::vector<int32_t>{}, plan_.co_roots, plan_.column_slices);
    start_as(uint8_t{0}, plan_.leaf_batch);
    stored_outputs_.assign(g.nodes().size(), 0);
}

FusionPlan FusionPlanner::run() {
    // From the last node back: a node's consumers are decided before the node itself.
    for (size_t i = g_.nodes().size(); i-- > 0;) {
        if (live_[i] && is_pointwise(g_.nodes()[i]) && !plan_.inlined[i]) grow(static_cast<int32_t>(i));
    }
    for (size_t i = g_.nodes().size(); i-- > 0;) {
        if (live_[i] && is_pointwise(g_.nodes()[i]) && !plan_.inlined[i]) try_store_in_reader(static_cast<int32_t>(i));
    }
    for (size_t i = g_.nodes().size(); i-- > 0;) {
        if (live_[i] && is_pointwise(g_.nodes()[i]) && !plan_.inlined[i]) try_co_root(static_cast<int32_t>(i));
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
        if (live_[i] && is_pointwise(g_.nodes()[i]) && !plan_.inlined[i]) try_epilogue(static_cast<int32_t>(i));
    }
    index_epilogue_products();  // epilogue_of is final from here on
    std::vector<int32_t> stored_by = matmuls_storing_alone();
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
        if (live_[i] && (g_.nodes()[i].op == Op::MatMul || stored_by[i] >= 0)) try_store_column_slices(static_cast<int32_t>(i));
        if (!plan_.column_slices[i].empty()) stored_by[i] = -1;  // its slices, not the root, split the heads
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
        if (live_[i] && g_.nodes()[i].op == Op::RmsNorm) try_norm_in_products(static_cast<int32_t>(i));
        if (live_[i] && (g_.nodes()[i].op == Op::RmsNorm || g_.nodes()[i].op == Op::LayerNorm)) {
            try_norm_in_sum(static_cast<int32_t>(i));
        }
        if (live_[i] && (g_.nodes()[i].op == Op::RmsNormGrad || g_.nodes()[i].op == Op::LayerNormGrad)) {
            try_norm_grad_in_sum(static_cast<int32_t>(i));
        }
        if (live_[i] && g_.nodes()[i].op == Op::Assign) try_in_place(static_cast<int32_t>(i));
        if (live_[i] && g_.nodes()[i].op == Op::Permute) try_split_heads_in_rope(static_cast<int32_t>(i));
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {  // after the norms' gradients in sums, which run sooner
        if (live_[i] && (g_.nodes()[i].op == Op::RmsNorm || g_.nodes()[i].op == Op::LayerNorm)) {
            try_up_xhat_in_norm_grad(static_cast<int32_t>(i));
        }
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {  // after the splits: a permute is one or the other
        if (const Op op = g_.nodes()[i].op; live_[i] && (op == Op::Attention || op == Op::Rope || op == Op::AttentionGradQ ||
                                                           op == Op::AttentionGradK || op == Op::AttentionGradV)) {
            try_merge_heads(static_cast<int32_t>(i));
        }
        for (int32_t slice : plan_.column_slices[i]) try_store_heads_split(slice);
        if (live_[i] && g_.nodes()[i].op == Op::MatMul && plan_.column_slices[i].empty()) {
            try_store_heads_split(static_cast<int32_t>(i));
        }
        // a matmul's epilogue (a bias; a scale) stored split into heads as the matmul's own value would be
        if (live_[i] && stored_by[i] >= 0) try_store_heads_split(static_cast<int32_t>(i));
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
        if (live_[i] && g_.nodes()[i].op == Op::Assign) try_batch(static_cast<int32_t>(i));
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {  // after the batches, which read it
        if (live_[i] && (g_.nodes()[i].op == Op::Sum || g_.nodes()[i].op == Op::Conv2dGradWeight)) {
            try_sum_as_read(static_cast<int32_t>(i));
        }
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {  // it asks where every other kernel runs
        if (live_[i] && g_.nodes()[i].op == Op::Assign) try_write_rows_in_place(static_cast<int32_t>(i));
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {  // after the batches: an update is no prologue
        if (const Op op = g_.nodes()[i].op; live_[i] && (op == Op::Sum || op == Op::Mean || op == Op::Max)) {
            try_prologue(static_cast<int32_t>(i));
        }
    }
    std::vector<bool> assigned(g_.nodes().size(), false);  // the targets of assignments
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
        if (live_[i] && g_.nodes()[i].op == Op::Assign) assigned[static_cast<size_t>(g_.nodes()[i].inputs[0])] = true;
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {  // after the reductions': one root, one prologue
        if (live_[i] && (g_.nodes()[i].op == Op::RmsNorm || g_.nodes()[i].op == Op::LayerNorm)) {
            try_norm_prologue(static_cast<int32_t>(i));
        }
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {  // after the prologues: a reduction's is no batch
        if (live_[i] && is_pointwise(g_.nodes()[i]) && !plan_.inlined[i]) try_leaf_batch(static_cast<int32_t>(i), assigned);
    }
    std::map<uint8_t, size_t> batch_sizes;  // a batch of one is the kernel it was
    for (uint8_t batch : plan_.leaf_batch) batch_sizes[batch] += batch ? 1 : 0;
    for (uint8_t& batch : plan_.leaf_batch) batch = batch_sizes[batch] == 1 ? 0 : batch;
    for (size_t i = 0; i < g_.nodes().size(); ++i) {  // after the writes in place, which it moves
        if (live_[i] && g_.nodes()[i].op == Op::MatMul && !plan_.column_slices[i].empty()) try_rows_in_gemv(static_cast<int32_t>(i));
        if (live_[i] && g_.nodes()[i].op == Op::MatMul) try_rows_rotated_in_sum(static_cast<int32_t>(i));
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {  // last: it asks whether the permute is stored any other way
        if (const Op op = g_.nodes()[i].op; live_[i] && (op == Op::Permute || op == Op::Expand)) {
            try_read_strided(static_cast<int32_t>(i));
        }
        if (live_[i] && g_.nodes()[i].op == Op::Concat) try_concat_reads_expands(static_cast<int32_t>(i));
        if (const Op op = g_.nodes()[i].op; live_[i] && (op == Op::AttentionGradQ || op == Op::AttentionGradK)) {
            try_rope_of_gradient(static_cast<int32_t>(i));
        }
        if (const Op op = g_.nodes()[i].op; live_[i] && (op == Op::AttentionGradQ || op == Op::AttentionGradK || op == Op::AttentionGradV)) {
            try_delta_in_sum(static_cast<int32_t>(i));
        }
    }
    return std::move(plan_);
}

// See fusion.hpp: a permute or expand that only pointwise nodes read, none of them in a batch of updates, read
// through its strides. Not a permute that a RoPE, an attention or a product stores or reads in its layout.
void FusionPlanner::try_read_strided(int32_t id) {
    const int32_t in = g_.node(id).inputs[0];
    const auto& readers = consumers_[static_cast<size_t>(id)];
    if (is_root_[static_cast<size_t>(id)] || readers.empty() || plan_.heads_split_by[static_cast<size_t>(id)] >= 0 ||
        plan_.heads_merged_into[static_cast<size_t>(in)] == id || plan_.heads_split_stored[static_cast<size_t>(in)] == id) {
        return;
    }
    for (int32_t r : readers) {
        if (!is_pointwise(g_.node(r)) || plan_.batched_update[static_cast<size_t>(kernel_of(r))] >= 0) return;
    }
    plan_.read_strided[static_cast<size_t>(id)] = true;
}

// See fusion.hpp: an expand that a concatenation alone reads, itself or through a reshape that it alone reads, read by
// the concatenation's kernel through its strides (codegen::ConcatPiece). Not where the concatenation is a copy a piece.
void FusionPlanner::try_concat_reads_expands(int32_t concat) {
    const Node& c = g_.node(concat);
    if (!concat_in_one_kernel(c.inputs.size(), max_inputs_)) return;
    const auto read_by_concat_alone = [&](int32_t n) {
        const auto& readers = consumers_[static_cast<size_t>(n)];
        return !is_root_[static_cast<size_t>(n)] && std::all_of(readers.begin(), readers.end(), [&](int32_t r) { return r == concat; });
    };
    for (int32_t piece : c.inputs) {
        const bool reshaped = g_.node(piece).op == Op::Reshape;
        const int32_t expand = reshaped ? g_.node(piece).inputs[0] : piece;
        if (g_.node(expand).op != Op::Expand || !read_by_concat_alone(piece)) continue;
        if (reshaped) {
            const auto& readers = consumers_[static_cast<size_t>(expand)];
            if (is_root_[static_cast<size_t>(expand)] || readers.size() != 1 || readers[0] != piece) continue;
            plan_.read_strided[static_cast<size_t>(piece)] = true;
        }
        plan_.read_strided[static_cast<size_t>(expand)] = true;
    }
}

// Whether fused root `root` is still to be lowered as a pointwise kernel of its own: no product stores it as its
// epilogue nor another kernel as one more output, and it is no batched update, write in place, split of the heads,
// column slices' root, nor a reduction's or norm's prologue.
bool FusionPlanner::own_kernel(int32_t root) const {
    const auto at = static_cast<size_t>(root);
    return plan_.epilogue_product[at] < 0 && plan_.stored_in[at] < 0 && plan_.batched_update[at] < 0 &&
           plan_.in_place_of[at] < 0 && plan_.heads_split_stored[at] < 0 && plan_.column_slices[at].empty() &&
           plan_.reduced_in[at] < 0 && plan_.prologue_of_norm[at] < 0;
}

// See fusion.hpp: the fused root a reduction reads, evaluated by the reduction. Its kernel would store the root alone
// (own_kernel, and nothing stored in it: no co-roots or extra outputs), within the bindings a pointwise kernel may
// have: the reduction's own are at most three more than the one it replaces (pieces, counters, result).
void FusionPlanner::try_prologue(int32_t reduction) {
    const int32_t root = g_.node(reduction).inputs[0];
    const auto at = static_cast<size_t>(root);
    if (!is_pointwise(g_.node(root)) || plan_.inlined[at] || only_reader(root) != reduction || !own_kernel(root) ||
        stored_outputs_[at] > 0 || leaves_of(root).size() + 3 > max_inputs_) {
        return;
    }
    plan_.reduced_in[at] = reduction;
}

// See fusion.hpp: a norm's input computed and stored by the norm's kernel. The root's kernel would store it alone (as a
// reduction's prologue's, try_prologue), it is f32 as the norm, and every other reader comes after the norm, which
// stores it.
void FusionPlanner::try_norm_prologue(int32_t norm) {
    const Node& n = g_.node(norm);
    const int32_t root = n.inputs[0];
    const auto at = static_cast<size_t>(root);
    if (!is_pointwise(g_.node(root)) || plan_.inlined[at] || n.dtype != DType::F32 || g_.node(root).dtype != DType::F32 ||
        plan_.norm_in_products[static_cast<size_t>(norm)] || plan_.norm_in_sum[static_cast<size_t>(norm)] >= 0 ||
        !own_kernel(root) || stored_outputs_[at] > 0 || leaves_of(root).size() + 4 > max_inputs_) {
        return;
    }
    const auto& readers = consumers_[at];  // their kernels run after the norm's
    if (!std::all_of(readers.begin(), readers.end(), [&](int32_t r) { return r >= norm && kernel_of(r) >= norm; })) return;
    plan_.norm_prologue[static_cast<size_t>(norm)] = root;
    plan_.prologue_of_norm[at] = norm;
}

// See fusion.hpp: a root of graph leaves and of earlier batches' roots, in its own pointwise kernel (own_kernel),
// batched with its kind at one past the deepest batch it reads. Its co-roots are its extra outputs, so their leaves
// count too.
void FusionPlanner::try_leaf_batch(int32_t root, const std::vector<bool>& assigned) {
    const auto at = static_cast<size_t>(root);
    if (!own_kernel(root)) return;
    int depth = 0;
    bool hoistable = true;
    std::set<int32_t> leaves = leaves_of(root);
    for (int32_t co : plan_.co_roots[at]) leaves.merge(leaves_of(co));  // computed in its kernel too
    for (int32_t leaf : leaves) {
        if (kernel_of(leaf) == root) continue;  // the root's value, which a co-root reads
        int32_t source = leaf;  // a view reads as what it views
        while (g_.node(source).op == Op::Reshape) source = g_.node(source).inputs[0];
        const Node& n = g_.node(source);
        if (const uint8_t batch = plan_.leaf_batch[static_cast<size_t>(kernel_of(source))]) {
            depth = std::max(depth, leaf_batch_depth(batch) + 1);
            hoistable = hoistable && leaf_batch_hoistable(batch);
        } else if (op_info(n.op).archetype == Archetype::Leaf) {
            hoistable = hoistable && n.op != Op::Input && !assigned[static_cast<size_t>(source)];
        } else {
            return;
        }
    }
    if (depth <= kMaxLeafBatchDepth) plan_.leaf_batch[at] = leaf_batch_of(depth, hoistable);
}

// See fusion.hpp: a sum, or a weight's gradient with no epilogue, whose every reader is evaluated by a batched
// update's kernel.
void FusionPlanner::try_sum_as_read(int32_t sum) {
    std::vector<int32_t> readers = consumers_[static_cast<size_t>(sum)];
    if (is_root_[static_cast<size_t>(sum)] || readers.empty() || plan_.epilogue_of[static_cast<size_t>(sum)] >= 0) return;
    for (size_t k = 0; k < readers.size(); ++k) {  // through its views (a 1-D convolution's weight is 2-D)
        const int32_t r = readers[k];
        if (g_.node(r).op == Op::Reshape && !is_root_[static_cast<size_t>(r)]) {
            readers.insert(readers.end(), consumers_[static_cast<size_t>(r)].begin(), consumers_[static_cast<size_t>(r)].end());
        } else if (!is_pointwise(g_.node(r)) || plan_.batched_update[static_cast<size_t>(kernel_of(r))] < 0) {
            return;
        }
    }
    plan_.summed_as_read[static_cast<size_t>(sum)] = true;
}

// The one reader of a node that is no root, or -1.
int32_t FusionPlanner::only_reader(int32_t id) const {
    const auto& readers = consumers_[static_cast<size_t>(id)];
    return is_root_[static_cast<size_t>(id)] || readers.size() != 1 ? -1 : readers[0];
}

// FusionPlan::epilogue_product, epilogue_of's inverse: a pair's second product is not its root's (its first stores
// the epilogue).
void FusionPlanner::index_epilogue_products() {
    std::set<int32_t> seconds;
    for (int32_t second : plan_.epilogue_pair) seconds.insert(second);
    for (size_t p = 0; p < plan_.epilogue_of.size(); ++p) {
        if (const int32_t root = plan_.epilogue_of[p]; root >= 0 && !seconds.count(static_cast<int32_t>(p))) {
            plan_.epilogue_product[static_cast<size_t>(root)] = static_cast<int32_t>(p);
        }
    }
}

// A node of a smaller shape that its consumer broadcasts (a per-channel scale, a row's rsqrt, a scalar) is
// inlined too, and so computed again for every element that reads it: a few ALU ops per element are free in
// a bandwidth-bound kernel (the H200 does ~60 f32 ops in the time it reads one), while its own kernel costs
// a dispatch and a barrier (~4 µs on the H200; 106 of them in ResNet-50's eval batch norms).
bool FusionPlanner::inlinable(int32_t node, int32_t consumer) const {
    const Node& n = g_.node(node);
    return is_pointwise(n) && !is_root_[static_cast<size_t>(node)] &&
           consumers_[static_cast<size_t>(node)].size() == 1 && numel(n.shape) <= numel(g_.node(consumer).shape);
}

// Inlines operands of `root`'s tree greedily while the kernel's distinct leaves fit.
void FusionPlanner::grow(int32_t root) {
    std::set<int32_t> leaves;
    std::vector<int32_t> stack{root};
    while (!stack.empty()) {
        const int32_t n = stack.back();
        stack.pop_back();
        for (int32_t in : g_.node(n).inputs) {
            if (inlinable(in, n)) {
                // Inlining replaces one leaf with the operand's own inputs.
                std::set<int32_t> grown = leaves;
                for (int32_t x : g_.node(in).inputs) grown.insert(x);
                if (grown.size() + pending_leaves(stack, n) <= max_inputs_) {
                    plan_.inlined[static_cast<size_t>(in)] = true;
                    stack.push_back(in);
                    continue;
                }
            }
            leaves.insert(in);
        }
    }
}

// An upper bound on the leaves the still-unvisited part of the tree adds.
size_t FusionPlanner::pending_leaves(const std::vector<int32_t>& stack, int32_t current) const {
    size_t n = 0;
    for (int32_t s : stack) n += g_.node(s).inputs.size();
    return n + g_.node(current).inputs.size();
}

// The node whose kernel evaluates `n`.
int32_t FusionPlanner::kernel_of(int32_t n) const {
    for (;;) {
        if (plan_.inlined[static_cast<size_t>(n)]) {
            n = consumers_[static_cast<size_t>(n)].front();
        } else if (plan_.stored_in[static_cast<size_t>(n)] >= 0) {
            n = plan_.stored_in[static_cast<size_t>(n)];
        } else if (plan_.epilogue_of[static_cast<size_t>(n)] >= 0) {
            n = plan_.epilogue_of[static_cast<size_t>(n)];
        } else {
            return n;
        }
    }
}

// The distinct leaves of the kernel rooted at `root`.
std::set<int32_t> FusionPlanner::leaves_of(int32_t root) const {
    std::set<int32_t> leaves;
    walk(root, [](int32_t) {}, [&](int32_t n) { leaves.insert(n); });
    return leaves;
}

// Whether `root` is the value of a named assignment (an optimizer's update: compiler/training.cpp).
bool FusionPlanner::is_named_update(int32_t root) const {
    const auto& readers = consumers_[static_cast<size_t>(root)];
    return std::any_of(readers.begin(), readers.end(), [&](int32_t c) {
        const Node& cn = g_.node(c);
        return cn.op == Op::Assign && cn.inputs[1] == root && !cn.name.empty();
    });
}

void FusionPlanner::try_store_in_reader(int32_t root) {
    const Node& r = g_.node(root);
    // Readers of the value, and of an assignment of it (which reads as the value).
    std::vector<int32_t> readers;
    for (int32_t c : consumers_[static_cast<size_t>(root)]) {
        if (g_.node(c).op != Op::Assign) {
            readers.push_back(c);
        } else if (g_.node(c).inputs[1] == root) {
            readers.insert(readers.end(), consumers_[static_cast<size_t>(c)].begin(), consumers_[static_cast<size_t>(c)].end());
        }
    }
    // The first kernel that reads it element for element computes it; every other reader runs after that kernel.
    int32_t reader_kernel = -1;
    for (int32_t c : readers) {
        if (const Node& cn = g_.node(c); is_pointwise(cn) && cn.shape == r.shape) {
            const int32_t k = kernel_of(c);
            if (reader_kernel < 0 || k < reader_kernel) reader_kernel = k;
        }
    }
    if (reader_kernel < 0 || g_.node(reader_kernel).shape != r.shape) return;
    bool read_elsewhere = false;
    for (int32_t c : readers) {
        if (kernel_of(c) < reader_kernel) return;
        read_elsewhere = read_elsewhere || kernel_of(c) != reader_kernel;
    }
    // Read by later kernels too, it goes only into a kernel that runs as often (neither or both hoisted).
    if (read_elsewhere && varies_[static_cast<size_t>(root)] != varies_[static_cast<size_t>(reader_kernel)]) return;
    plan_.stored_in[static_cast<size_t>(root)] = reader_kernel;
    uint32_t& outputs = stored_outputs_[static_cast<size_t>(reader_kernel)];
    if (leaves_of(reader_kernel).size() + outputs + 1 > max_inputs_) {
        plan_.stored_in[static_cast<size_t>(root)] = -1;
    } else {
        ++outputs;
    }
}

// Whether node n depends on leaves alone through views and broadcasts (a loss's seed: a constant reshaped and
// expanded), which the lowering can give a value at any point (Lowering::value_now).
bool FusionPlanner::early(int32_t n) const {
    const Node& x = g_.node(n);
    if (op_info(x.op).archetype == Archetype::Leaf) return true;
    return (x.op == Op::Reshape || x.op == Op::Expand) && early(x.inputs[0]);
}

// See fusion.hpp: a fused root that no kernel reads element for element, computed and stored by the kernel of a
// root of its shape that one of its leaves is, or that reads one of its leaves (the earliest such kernel where
// everything it reads is computed and every reader runs after it).
void FusionPlanner::try_co_root(int32_t r) {
    const Node& rn = g_.node(r);
    if (plan_.stored_in[static_cast<size_t>(r)] >= 0 || !plan_.co_roots[static_cast<size_t>(r)].empty() || is_named_update(r)) {
        return;
    }
    const std::set<int32_t> leaves = leaves_of(r);
    std::set<int32_t> hosts;
    for (int32_t leaf : leaves) {  // a value computed here, not a parameter or constant that many kernels read
        if (op_info(g_.node(leaf).op).archetype == Archetype::Leaf) continue;
        std::vector<int32_t> around = consumers_[static_cast<size_t>(leaf)];
        around.push_back(leaf);
        for (int32_t c : around) {
            if (c != r && live_[static_cast<size_t>(c)] && is_pointwise(g_.node(c)) && g_.node(c).shape == rn.shape) {
                hosts.insert(kernel_of(c));
            }
        }
    }
    for (int32_t host : hosts) {  // the earliest first
        const auto before = [&](int32_t n) { return !is_named_update(n) && (kernel_of(n) <= host || early(n)); };
        const auto after = [&](int32_t n) { return kernel_of(n) > host; };
        const auto& readers = consumers_[static_cast<size_t>(r)];
        // Not an update's kernel: a batch of them runs last (try_batch); and one that runs as often (hoisting).
        if (host == r || g_.node(host).shape != rn.shape || plan_.stored_in[static_cast<size_t>(host)] >= 0 || is_named_update(host) ||
            varies_[static_cast<size_t>(host)] != varies_[static_cast<size_t>(r)] ||
            !std::all_of(leaves.begin(), leaves.end(), before) || readers.empty() ||
            !std::all_of(readers.begin(), readers.end(), [&](int32_t c) { return g_.node(c).op != Op::Assign && after(c); })) {
            continue;
        }
        std::set<int32_t> all = leaves_of(host);
        all.insert(leaves.begin(), leaves.end());
        if (all.size() + stored_outputs_[static_cast<size_t>(host)] + stored_outputs_[static_cast<size_t>(r)] + 1 > max_inputs_) continue;
        plan_.stored_in[static_cast<size_t>(r)] = host;
        plan_.co_roots[static_cast<size_t>(host)].push_back(r);
        // and what r's kernel would have stored (a value its tree reads twice): the host's outputs now
        for (size_t n = 0; n < plan_.stored_in.size(); ++n) {
            if (plan_.stored_in[n] == r) plan_.stored_in[n] = host, ++stored_outputs_[static_cast<size_t>(host)];
        }
        stored_outputs_[static_cast<size_t>(host)] += 1;
        return;
    }
}

// The deepest product (depth_; of the deepest, the latest) among the leaves of `root`'s tree that only this tree
// reads, at the root's shape and dtype (so element for element, stored as the root's dtype), becomes the kernel that
// evaluates the tree, storing the values the tree stores besides its root too (an optimizer's moments). The deepest,
// so that the others run as early as their inputs allow: a ResNet block's projection shortcut, a product of the
// block's input, runs beside the block's first convolution and the block's last convolution adds it (where the
// shortcut, the later node, added the last convolution, it waited for it: a level more in each of ResNet-50's four
// such blocks). The product is lowered at the root's place, after every other leaf. Its bindings (its inputs and
// its result, or a split product's partial sums and result), the tree's other leaves and its extra outputs stay
// within max_inputs_ + 1 storage buffers.
//
// A norm that later kernels read too (training: a SiLU's backward reads the GroupNorm before it; an output)
// stores its own value there as one more output, so the tree still costs no kernel of its own. Only norms
// for now: a product read twice keeps a kernel for its reader (not measured either way).
//
// Not a product that a decision (greater, equal, sign) reads: there the stored product is what
// MEGANEURA_CHECK needs to tell float32's rounding carrying an argument across the threshold, which is
// no kernel's fault, from a wrong kernel (compiler/check.cpp). A decision on another leaf is no such
// case: a ReLU's gradient mask reads the ReLU's stored output, and the product of the upstream gradient
// (a convolution's or matmul's input gradient) stores the masked gradient through it.
void FusionPlanner::try_epilogue(int32_t root) {
    const Node& r = g_.node(root);
    if (plan_.stored_in[static_cast<size_t>(root)] >= 0) return;
    std::set<int32_t> leaves, decided;
    walk(root, [&](int32_t n) {
        const Op op = g_.node(n).op;
        if (op == Op::Greater || op == Op::Equal || op == Op::Sign) {
            walk(n, [](int32_t) {}, [&](int32_t d) { decided.insert(d); });
        }
    }, [&](int32_t n) { leaves.insert(n); });
    int32_t product = -1;
    bool keeps = false;
    const auto deeper = [&](int32_t p) {
        const auto key = [&](int32_t n) { return std::pair(depth_[static_cast<size_t>(n)], n); };
        return product < 0 || key(p) > key(product);
    };
    for (int32_t leaf : leaves) {
        const Node& ln = g_.node(leaf);
        if (ln.shape != r.shape || ln.dtype != r.dtype || decided.count(leaf)) continue;
        // A reshape of the product (a linear layer's [B*T, N] as [B, T, N]) has its elements in the same order.
        const int32_t p = ln.op == Op::Reshape && read_only_by(ln.inputs[0], leaf) ? ln.inputs[0] : leaf;
        const Op op = g_.node(p).op;
        if (!read_only_by(leaf, root)) {
            // Read later too (a backward reads a norm, a SwiGLU's gate): stored as well as the tree.
            if ((is_norm(op) || op == Op::MatMul) && read_here_or_later(leaf, root) && deeper(p)) product = p, keeps = true;
            continue;
        }
        if ((op == Op::MatMul || op == Op::Conv2d || op == Op::Conv2dGradInput || is_norm(op) || is_norm_grad(op)) &&
            g_.node(p).dtype == r.dtype && deeper(p)) {
            product = p, keeps = false;
        }
    }
    if (product >= 0 && leaves.size() + stored_outputs_[static_cast<size_t>(root)] + (keeps ? 1 : 0) +
                                g_.node(product).inputs.size() <= max_inputs_ &&
        (!is_named_update(root) || takes_update_(product))) {
        plan_.epilogue_of[static_cast<size_t>(product)] = root;
        plan_.epilogue_keeps[static_cast<size_t>(product)] = keeps;
        try_pair(product, root, leaves);
    }
}

// See fusion.hpp: a second product of the same A, read only by the tree, that the product's GEMV computes too (one
// more binding: its W), or, where both split K, whose partials the product's split sum sums too.
void FusionPlanner::try_pair(int32_t product, int32_t root, const std::set<int32_t>& leaves) {
    const Node& p = g_.node(product);
    const auto one_row = [&](const Node& m) {
        return m.op == Op::MatMul && m.shape.size() == 2 && m.shape[0] == 1 && m.ints[0] == 0 && m.dtype == DType::F32;
    };
    const bool rows = !one_row(p) && p.op == Op::MatMul;  // a pair for the split sum, if it splits K
    const bool keeps = plan_.epilogue_keeps[static_cast<size_t>(product)];
    if (!(one_row(p) || rows) ||
        leaves.size() + stored_outputs_[static_cast<size_t>(root)] + keeps + p.inputs.size() + 1 > max_inputs_) {
        return;
    }
    for (int32_t leaf : leaves) {
        const Node& ln = g_.node(leaf);  // the product, or a reshape of it that only the tree reads
        const int32_t second = ln.op == Op::Reshape && read_only_by(ln.inputs[0], leaf) ? ln.inputs[0] : leaf;
        // Read later too (a training step's up product, which the backward reads): stored as well as the tree.
        const bool second_keeps = !read_only_by(leaf, root);
        if (second_keeps && (!read_here_or_later(leaf, root) ||
                             leaves.size() + stored_outputs_[static_cast<size_t>(root)] + keeps + p.inputs.size() + 2 > max_inputs_)) {
            continue;
        }
        const Node& q = g_.node(second);
        // A pair of several rows: the same split, since the products are alike (A's and B's shapes; a GEMV's the same
        // A). Of two A's, a sum of products (MatmulSpec::a2): one more binding.
        if (second == product || !(rows ? q.op == Op::MatMul && q.dtype == p.dtype : one_row(q))) continue;
        const bool two_a = q.inputs[0] != p.inputs[0];
        if ((two_a && !rows) || q.ints != p.ints || q.shape != p.shape || g_.node(q.inputs[1]).shape != g_.node(p.inputs[1]).shape ||
            g_.node(q.inputs[0]).shape != g_.node(p.inputs[0]).shape || g_.node(q.inputs[0]).dtype != g_.node(p.inputs[0]).dtype ||
            leaves.size() + stored_outputs_[static_cast<size_t>(root)] + keeps + second_keeps + two_a + p.inputs.size() + 1 > max_inputs_) {
            continue;
        }
        // Asked last: the split's choice builds the product's kernels.
        if (rows && !split_of_(product).splits_k) return;
        plan_.epilogue_of[static_cast<size_t>(second)] = root;
        plan_.epilogue_keeps[static_cast<size_t>(second)] = second_keeps;
        plan_.epilogue_pair[static_cast<size_t>(product)] = second;
        return;
    }
}

// Whether every reader of node n runs in `root`'s kernel or in a later one, so that it may compute n.
bool FusionPlanner::read_here_or_later(int32_t n, int32_t root) const {
    const auto& c = consumers_[static_cast<size_t>(n)];
    return std::all_of(c.begin(), c.end(), [&](int32_t r) { return kernel_of(r) >= root; });
}

// Whether `reader`'s kernel (or `reader` itself, a view) is all that reads node n, which no one else sees.
bool FusionPlanner::read_only_by(int32_t n, int32_t reader) const {
    const auto& c = consumers_[static_cast<size_t>(n)];
    return !is_root_[static_cast<size_t>(n)] && !c.empty() &&
           std::all_of(c.begin(), c.end(), [&](int32_t r) { return r == reader || kernel_of(r) == reader; });
}

void FusionPlanner::try_in_place(int32_t assign) {
    const Node& a = g_.node(assign);
    const int32_t target = a.inputs[0], value = a.inputs[1];
    const Node& v = g_.node(value);
    if (!is_pointwise(v) || plan_.inlined[static_cast<size_t>(value)] || v.shape != g_.node(target).shape ||
        v.dtype != g_.node(target).dtype || plan_.in_place_of[static_cast<size_t>(value)] >= 0) {
        return;
    }
    // The target's readers, through its views (a view is read where its own readers run).
    std::vector<int32_t> readers, views{target};
    while (!views.empty()) {
        const int32_t at = views.back();
        views.pop_back();
        for (int32_t r : consumers_[static_cast<size_t>(at)]) (g_.node(r).op == Op::Reshape ? views : readers).push_back(r);
    }
    for (int32_t reader : readers) {
        if (reader == assign) continue;
        const int32_t k = kernel_of(reader), writer = kernel_of(value);
        if (k == writer) {
            // Read inside this kernel: only element-for-element (a leaf of the target's shape), never by the
            // product the kernel stores through (its operands are read across workgroups).
            if (g_.node(reader).shape != v.shape || plan_.epilogue_of[static_cast<size_t>(reader)] >= 0) return;
        } else if (k > writer) {
            return;  // a later kernel still needs the old contents
        }
    }
    plan_.in_place_of[static_cast<size_t>(value)] = target;
    plan_.assign_elided[static_cast<size_t>(assign)] = true;
}

// The node after whose place in graph order the kernel that reads node n is emitted: its kernel's, or for a
// split of the heads that a RoPE reads in place, the RoPE's; an assignment's copy and a batched update run
// after every other kernel (lower.cpp).
int32_t FusionPlanner::emitted_at(int32_t n) const {
    const int32_t k = kernel_of(n);
    if (const int32_t rope = plan_.heads_split_by[static_cast<size_t>(k)]; rope >= 0) return kernel_of(rope);
    const bool last = (g_.node(k).op == Op::Assign && !plan_.assign_elided[static_cast<size_t>(k)]) ||
                      plan_.batched_update[static_cast<size_t>(k)] >= 0;
    return last ? static_cast<int32_t>(g_.nodes().size()) : k;
}

// Whether every reader of the old contents of the target of `assign` (an assignment of a SliceScatter of it),
// through its views, is emitted before node `writer`'s place: the assignment and the SliceScatter aside.
bool FusionPlanner::old_contents_read_before(int32_t assign, int32_t writer) const {
    const int32_t target = g_.node(assign).inputs[0], value = g_.node(assign).inputs[1];
    std::vector<int32_t> views{target};
    while (!views.empty()) {
        const int32_t at = views.back();
        views.pop_back();
        for (int32_t r : consumers_[static_cast<size_t>(at)]) {
            if (r == assign || r == value) continue;
            if (g_.node(r).op == Op::Reshape) {
                views.push_back(r);
            } else if (emitted_at(r) >= writer) {
                return false;  // it would read the new rows
            }
        }
    }
    return true;
}

// See fusion.hpp: a named update of a parameter whose kernel is its value's own pointwise one (no product
// stores it), reading element for element or scalars, nothing outside it reading what it computes.
void FusionPlanner::try_batch(int32_t assign) {
    const Node& a = g_.node(assign);
    const int32_t root = a.inputs[1];
    const Node& r = g_.node(root);
    if (a.name.empty() || g_.node(a.inputs[0]).op != Op::Parameter || !is_pointwise(r) ||
        plan_.inlined[static_cast<size_t>(root)] || plan_.stored_in[static_cast<size_t>(root)] >= 0 ||
        plan_.epilogue_product[static_cast<size_t>(root)] >= 0) {
        return;
    }
    const auto inside = [&](int32_t reader) { return kernel_of(reader) == root; };
    // A value the kernel computes is read by it alone, or by an assignment that only it reads.
    const auto read_inside = [&](int32_t n) {
        return std::all_of(consumers_[static_cast<size_t>(n)].begin(), consumers_[static_cast<size_t>(n)].end(), [&](int32_t c) {
            if (g_.node(c).op != Op::Assign) return inside(c);
            const auto& readers = consumers_[static_cast<size_t>(c)];
            return std::all_of(readers.begin(), readers.end(), inside);
        });
    };
    bool batchable = true;
    walk(root, [&](int32_t n) { batchable = batchable && read_inside(n); }, [&](int32_t n) {
        const Node& leaf = g_.node(n);
        batchable = batchable && (leaf.shape == r.shape || numel(leaf.shape) == 1);
    });
    if (batchable) plan_.batched_update[static_cast<size_t>(root)] = assign;
}

}  // namespace detail

FusionPlan plan_fusion(const Graph& g, const std::vector<bool>& live, const std::vector<int32_t>& roots,
                       uint32_t max_inputs, const std::function<bool(int32_t product)>& takes_update,
                       const std::function<ProductSplit(int32_t product)>& split_of) {
    return detail::FusionPlanner(g, live, roots, max_inputs, takes_update, split_of).run();
}

}  // namespace mn::sched
