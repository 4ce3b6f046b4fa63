// Lowering's pointwise and reduction kernels (lowering.hpp): one op, or a fused tree of them (fusion.hpp)
// stored by its own kernel or, as its epilogue, by the product or norm it reads; the updates of one name
// batched into as few dispatches as fit; strided copies; reductions over any set of axes.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "schedule/lowering.hpp"

namespace mn::sched::detail {

// A single pointwise op over values (the building block composite lowerings use).
void Lowering::pointwise(Op op, const std::vector<int32_t>& ins, int32_t out) {
    codegen::PointwiseSpec spec{.out_dtype = value(out).dtype, .out_shape = value(out).shape};
    for (size_t k = 0; k < ins.size(); ++k) {
        add_leaf(spec, ins[k]);
        spec.program.push_back({.op = Op::Input, .a = static_cast<int32_t>(k), .dtype = value(ins[k]).dtype});
    }
    spec.program.push_back({.op = op, .a = 0, .b = ins.size() > 1 ? 1 : -1, .dtype = value(out).dtype});
    std::vector<int32_t> bind = ins;
    bind.push_back(out);
    emit(codegen::pointwise_kernel(spec, t_.pointwise), std::move(bind));
}

// The fused tree rooted at pointwise node `root` (see fusion.hpp) stored as `out_dtype`: FusedTree.
Lowering::FusedTree Lowering::fused_tree(int32_t root, DType out_dtype) {
    // Over the root's own shape: `out` may be stored in another layout (its split into heads: heads_split_stored).
    codegen::PointwiseSpec spec{.out_dtype = out_dtype, .out_shape = g_.node(root).shape};
    const int32_t product = fusion_.epilogue_product[static_cast<size_t>(root)];  // -1: none
    std::vector<int32_t> bind;
    // node -> the step that computed (or, for a leaf, loaded) it: an inlined value read twice, as
    // in exp(x) * exp(x), is computed once.
    std::map<int32_t, int32_t> step_of;
    std::vector<int32_t> stored;  // nodes this kernel computes and stores besides the root
    auto build = [&](auto& self, int32_t node) -> int32_t {
        if (const Node& a = g_.node(node); a.op == Op::Assign && fusion_.stored_in[static_cast<size_t>(a.inputs[1])] == root) {
            return self(self, a.inputs[1]);  // an assignment reads as its value, computed here
        }
        if (const auto it = step_of.find(node); it != step_of.end()) return it->second;
        const bool stored_here = fusion_.stored_in[static_cast<size_t>(node)] == root;
        if (stored_here) stored.push_back(node);
        const int32_t second = product >= 0 ? fusion_.epilogue_pair[static_cast<size_t>(product)] : -1;
        if (product >= 0 && (node == product || is_view_of(node, product) ||
             (second >= 0 && (node == second || is_view_of(node, second))))) {
            // a product's value, never stored
            bind.push_back(node == product || is_view_of(node, product) ? -1 : -2);
            spec.in_dtypes.push_back(g_.node(node).dtype);
            spec.in_strides.emplace_back();
            spec.program.push_back({.op = Op::Input, .a = static_cast<int32_t>(bind.size() - 1), .dtype = g_.node(node).dtype});
        } else if (node != root && !fusion_.inlined[static_cast<size_t>(node)] && !stored_here) {
            const bool strided = fusion_.read_strided[static_cast<size_t>(node)];  // its input, through its strides
            const int32_t v = value_now(strided ? g_.node(node).inputs[0] : node);
            bind.push_back(v);
            if (strided) add_strided_leaf(spec, v, g_.node(node));
            else add_leaf(spec, v);
            if (const auto pieces = pieces_of_.find(s_.root(v)); pieces != pieces_of_.end()) {  // the sum of its pieces
                bind.back() = pieces->second.first;
                spec.in_dtypes.back() = DType::F32;
                spec.in_pieces[static_cast<int32_t>(bind.size() - 1)] = pieces->second.second;
            }
            spec.program.push_back({.op = Op::Input, .a = static_cast<int32_t>(bind.size() - 1), .dtype = value(v).dtype});
        } else {
            const Node& n = g_.node(node);
            const int32_t a = self(self, n.inputs[0]);
            const int32_t b = n.inputs.size() > 1 ? self(self, n.inputs[1]) : -1;
            spec.program.push_back({.op = n.op, .a = a, .b = b, .dtype = n.dtype});
        }
        return step_of[node] = static_cast<int32_t>(spec.program.size() - 1);
    };
    build(build, root);
    for (int32_t co : fusion_.co_roots[static_cast<size_t>(root)]) build(build, co);  // after the root, its value
    spec.result = step_of.at(root);
    std::vector<int32_t> extra;  // bound after the leaves (and, in a pointwise kernel, out0)
    for (int32_t node : stored) {
        const auto at = static_cast<size_t>(node);  // a co-root may come after the kernel in the graph
        if (s_.node_value[at] < 0) s_.node_value[at] = new_value(g_.node(node).shape, g_.node(node).dtype, Storage::Transient, node);
        spec.extra_outputs.emplace_back(step_of.at(node), value(value_of(node)).dtype);
        extra.push_back(value_of(node));
    }
    // The products whose own values are stored too (FusionPlan::epilogue_keeps): the first, and a pair's second.
    for (const int32_t kept : {product, product >= 0 ? fusion_.epilogue_pair[static_cast<size_t>(product)] : -1}) {
        if (kept < 0 || !fusion_.epilogue_keeps[static_cast<size_t>(kept)]) continue;
        const auto read = std::find_if(step_of.begin(), step_of.end(), [&](const auto& at) {  // or a view of it
            return at.first == kept || is_view_of(at.first, kept);
        });
        spec.extra_outputs.emplace_back(read->second, g_.node(kept).dtype);
        extra.push_back(value_of(kept));
    }
    FusedTree tree{.product = product};
    if (product >= 0) {
        const auto position = [&](int32_t marker) {
            const auto at = std::find(bind.begin(), bind.end(), marker);
            return at == bind.end() ? -1 : static_cast<int32_t>(at - bind.begin());
        };
        tree.epilogue = {.tree = std::move(spec), .product = position(-1), .product2 = position(-2)};
        std::erase_if(bind, [](int32_t v) { return v < 0; });
    } else {
        tree.epilogue.tree = std::move(spec);
    }
    tree.bind = std::move(bind);
    tree.extra = std::move(extra);
    return tree;
}

// The fused tree rooted at `root` as a kernel's prologue (a reduction's, a norm's: codegen::input_glsl), every input a
// leaf.
Lowering::FusedTree Lowering::prologue_tree(int32_t root) {
    FusedTree tree = fused_tree(root, g_.node(root).dtype);
    tree.epilogue.product = -1;
    return tree;
}

// The fused tree rooted at pointwise node `root` (see fusion.hpp), as one kernel writing `out`.
// With a product planned as its epilogue's kernel (fusion_.epilogue_of), the product stores the tree instead: a
// matmul into the root's column slices where it has them (`parts`, FusionPlan::column_slices; else just out).
void Lowering::fused_pointwise(int32_t root, int32_t out, const std::vector<int32_t>& parts) {
    FusedTree t = fused_tree(root, value(out).dtype);
    std::vector<int32_t> bind = std::move(t.bind);
    if (const int32_t product = t.product; product >= 0) {
        bind.insert(bind.end(), t.extra.begin(), t.extra.end());
        if (is_norm(g_.node(product).op)) return lower_norm(g_.node(product), out, &t.epilogue, bind);
        if (is_norm_grad(g_.node(product).op)) return lower_norm_grad(g_.node(product), out, &t.epilogue, bind);
        return lower_product(product, parts.empty() ? std::vector<int32_t>{out} : parts, &t.epilogue, bind);
    }
    if (!parts.empty()) throw Error("schedule: column parts of a pointwise kernel");
    codegen::PointwiseSpec& spec = t.epilogue.tree;
    const std::vector<int32_t>& extra = t.extra;
    bind.push_back(out);
    bind.insert(bind.end(), extra.begin(), extra.end());
    if (const int32_t assign = fusion_.batched_update[static_cast<size_t>(root)]; assign >= 0) {
        return add_to_batch(g_.node(assign).name, std::move(spec), std::move(bind));
    }
    emit(codegen::pointwise_kernel(spec, t_.pointwise), std::move(bind));
}

// A batched update (FusionPlan::batched_update) waits for the others of its name; `bind` is what its
// pointwise kernel would bind. Each binding's key is the storage it names (Schedule::storage), so a
// scalar every member reads is one binding and an update in place reads and writes its target through one.
void Lowering::add_to_batch(const std::string& name, codegen::PointwiseSpec spec, std::vector<int32_t> bind) {
    const auto it = std::find_if(batches_.begin(), batches_.end(), [&](const auto& e) { return e.first == name; });
    (it != batches_.end() ? it->second : batches_.emplace_back(name, std::vector<Batched>{}).second)
        .push_back(batched(std::move(spec), std::move(bind)));
}

Lowering::Batched Lowering::batched(codegen::PointwiseSpec spec, std::vector<int32_t> bind) const {
    Batched b{.member = {.spec = std::move(spec)}, .values = std::move(bind)};
    const size_t inputs = b.member.spec.in_dtypes.size();
    for (size_t k = 0; k < b.values.size(); ++k) {
        (k < inputs ? b.member.in_keys : b.member.out_keys).push_back(s_.storage(b.values[k]));
    }
    return b;
}

// Every root of leaf batch `batch` (FusionPlan::leaf_batch) in one batch of kernels, now: the first of them is lowered.
void Lowering::lower_leaf_batch(uint8_t batch) {
    std::vector<Batched> members;
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
        if (fusion_.leaf_batch[i] != batch || value_of(static_cast<int32_t>(i)) >= 0) continue;
        const Node& n = g_.node(static_cast<int32_t>(i));
        lowered_[i] = true;
        const int32_t out = new_value(n.shape, n.dtype, Storage::Transient, static_cast<int32_t>(i));
        s_.node_value[i] = out;
        FusedTree t = fused_tree(static_cast<int32_t>(i), n.dtype);
        std::vector<int32_t> bind = std::move(t.bind);
        bind.push_back(out);
        bind.insert(bind.end(), t.extra.begin(), t.extra.end());
        members.push_back(batched(std::move(t.epilogue.tree), std::move(bind)));
    }
    emit_batches("pointwise", members);
}

// The batch's members in order, as few dispatches as fit the device's bindings and Tuning::max_batch_members (by their
// weights). A member that writes what an earlier one in the dispatch reads, or reads what it writes, starts the next:
// their workgroups run in no order.
void Lowering::emit_batches(const std::string& name, const std::vector<Batched>& members) {
    codegen::PointwiseBatch batch;
    std::vector<const Batched*> in_batch;
    std::set<int32_t> reads, writes;
    uint32_t weight = 0;  // the batch's members' codegen::batch_member_weight
    size_t bindings = 0;  // its distinct keys
    const auto flush = [&] {
        std::vector<int32_t> keys;
        codegen::KernelSource k = codegen::pointwise_batch_kernel(batch, t_.pointwise, keys);
        const size_t n = batch.members.size();
        k.label = name + " x " + std::to_string(n) + (n == 1 ? " tensor" : " tensors");
        std::map<int32_t, int32_t> value_of_key;  // an output's value (the node it stands for) over the leaf's
        for (const Batched* b : in_batch) {
            const auto& m = b->member;
            for (size_t j = 0; j < b->values.size(); ++j) {
                const int32_t key = j < m.in_keys.size() ? m.in_keys[j] : m.out_keys[j - m.in_keys.size()];
                if (j >= m.in_keys.size()) value_of_key[key] = b->values[j];
                else value_of_key.try_emplace(key, b->values[j]);
            }
        }
        std::vector<int32_t> bind;
        for (int32_t key : keys) bind.push_back(value_of_key.at(key));
        emit(std::move(k), std::move(bind));
        batch.members.clear(), in_batch.clear(), reads.clear(), writes.clear();
        weight = 0, bindings = 0;
    };
    for (const Batched& b : members) {
        const auto& m = b.member;
        const bool conflict =
            std::any_of(m.out_keys.begin(), m.out_keys.end(), [&](int32_t k) { return reads.count(k) || writes.count(k); }) ||
            std::any_of(m.in_keys.begin(), m.in_keys.end(), [&](int32_t k) { return writes.count(k) > 0; });
        const uint32_t w = codegen::batch_member_weight(m);
        // codegen::pointwise_batch_kernel binds each distinct key once: those read or written so far, and the member's new
        // ones.
        const auto new_keys = [&] {
            std::set<int32_t> keys(m.in_keys.begin(), m.in_keys.end());
            keys.insert(m.out_keys.begin(), m.out_keys.end());
            return static_cast<size_t>(std::count_if(keys.begin(), keys.end(), [&](int32_t k) { return !reads.count(k) && !writes.count(k); }));
        };
        size_t fresh = new_keys();
        if (!batch.members.empty() &&
            (conflict || weight + w > t_.max_batch_members || bindings + fresh > t_.max_batch_bindings)) {
            flush();
            fresh = new_keys();
        }
        batch.members.push_back(m);
        weight += w;
        bindings += fresh;
        in_batch.push_back(&b);
        reads.insert(m.in_keys.begin(), m.in_keys.end());
        writes.insert(m.out_keys.begin(), m.out_keys.end());
    }
    if (!batch.members.empty()) flush();
}

bool Lowering::is_view_of(int32_t node, int32_t product) const {
    return g_.node(node).op == Op::Reshape && g_.node(node).inputs[0] == product;
}

void Lowering::add_leaf(codegen::PointwiseSpec& spec, int32_t v) {
    spec.in_dtypes.push_back(value(v).dtype);
    spec.in_strides.push_back(broadcast_strides(value(v).shape, spec.out_shape));
}

// Value v, the input of a permute or expand (FusionPlan::read_strided), read as its value: the permute's dims walk v's
// strides in its order, the expand's v's broadcast ones, aligned to the right of the tree's shape, 0 where the tree
// broadcasts them.
void Lowering::add_strided_leaf(codegen::PointwiseSpec& spec, int32_t v, const Node& n) {
    std::vector<int64_t> by_dim = broadcast_strides(value(v).shape, n.shape);  // the expand's
    if (n.op == Op::Permute) {
        const std::vector<int64_t> in_strides = contiguous_strides(value(v).shape);
        for (size_t d = 0; d < n.shape.size(); ++d) by_dim[d] = in_strides[static_cast<size_t>(n.ints[d])];
    }
    std::vector<int64_t> st(spec.out_shape.size(), 0);
    const size_t lead = st.size() - n.shape.size();
    for (size_t d = 0; d < n.shape.size(); ++d) {
        if (n.shape[d] != 1) st[lead + d] = by_dim[d];
    }
    spec.in_dtypes.push_back(value(v).dtype);
    spec.in_strides.push_back(std::move(st));
}

// Node n's value, lowering it (and its inputs) first where a co-root's kernel reads it before its place in the graph:
// leaves, and their views and broadcasts (FusionPlan::co_roots).
int32_t Lowering::value_now(int32_t n) {
    if (value_of(n) < 0 && fusion_.stored_in[static_cast<size_t>(n)] < 0) {
        for (int32_t in : g_.node(n).inputs) value_now(in);
        lower(n);
    }
    return value_of(n);
}

void Lowering::copy(int32_t in, int32_t out, codegen::CopySpec spec) {
    spec.dtype = s_.values[static_cast<size_t>(in)].dtype;
    emit(codegen::strided_copy_kernel(spec, t_.pointwise), {in, out});
}

// Of value `in`, or with a `prologue` (a fused root's tree, FusionPlan::reduced_in, or a loss's), of that tree
// evaluated as it is read.
void Lowering::reduce(codegen::ReduceMode mode, int32_t in, int32_t out, int64_t outer, int64_t r, int64_t inner,
                      int64_t lead, const FusedTree* prologue) {
    const DType in_dtype = prologue ? prologue->epilogue.tree.out_dtype : s_.values[static_cast<size_t>(in)].dtype;
    const DType out_dtype = s_.values[static_cast<size_t>(out)].dtype;
    const int32_t node = value(out).node;
    const bool summed_as_read = mode == codegen::ReduceMode::Sum && node >= 0 && fusion_.summed_as_read[static_cast<size_t>(node)];
    if (summed_as_read && !prologue && hold_column_sum(in, out, outer, r, inner, lead)) return;
    const codegen::Epilogue* tree = prologue ? &prologue->epilogue : nullptr;
    codegen::Reduction k = codegen::reduce_kernels(mode, in_dtype, out_dtype, outer, r, inner, t_.reduction, lead,
                                                   t_.reduction_last_piece_sums, tree);
    emit_through_partials(std::move(k.partial), std::move(k.sum), k.partial_elements,
                          prologue ? prologue->bind : std::vector{in}, {out}, k.tile_counters, summed_as_read);
}

// Column sums that only batched updates read (FusionPlan::summed_as_read; a bias's gradient, a norm's weight's) run
// together, where a dispatch each ran beside the backward's products: a sum of one shape as another that the column
// walk cuts into pieces is held (its pieces its value from now on, pieces_of_) and emitted as one dispatch with the
// others of its shape (codegen::column_sums_batch) when they are kHeldSums, kHeldSumsWindow steps after the first, or
// before the updates. Running later changes nothing they read: their readers run last, and no kernel writes into
// the bytes of what they read (FusionPlan::in_place_of, whose readers run in graph order).
constexpr size_t kHeldSums = 8, kHeldSumsWindow = 16;

bool Lowering::hold_column_sum(int32_t in, int32_t out, int64_t outer, int64_t r, int64_t inner, int64_t lead) {
    const int32_t stored = value(s_.root(in)).node;
    if (stored < 0 || written_in_place_[static_cast<size_t>(stored)] || t_.max_batch_bindings < 4) return false;
    const int64_t pieces = codegen::column_sum_pieces(outer, r, inner, t_.reduction, lead);
    if (pieces < 2) return false;
    const DType dtype = value(in).dtype;
    HeldSums& held = held_sums_[{dtype, lead, outer, r, inner}];
    if (held.ins.empty()) held.first_step = s_.steps.size();
    const int64_t elements = numel(value(out).shape);
    const int32_t partial = new_value({pieces * elements}, DType::F32);
    pieces_of_[out] = {partial, {codegen::checked_u32(pieces, "pieces"), elements}};
    held.ins.push_back(in);
    held.pieces.push_back(partial);
    emit_held_sums(false);  // this group, where it is full
    return true;
}

// The held sums (hold_column_sum) whose time has come, or `all`: their dispatches, appended to the steps as they are
// (emit calls this).
void Lowering::emit_held_sums(bool all) {
    for (auto it = held_sums_.begin(); it != held_sums_.end();) {
        const auto& [dtype, lead, outer, r, inner] = it->first;
        const HeldSums& held = it->second;
        const size_t limit = std::min<size_t>(kHeldSums, t_.max_batch_bindings / 2);
        if (!all && held.ins.size() < limit && s_.steps.size() - held.first_step < kHeldSumsWindow) {
            ++it;
            continue;
        }
        const auto members = static_cast<uint32_t>(held.ins.size());
        codegen::Reduction sums = *codegen::column_sums_batch(dtype, outer, r, inner, t_.reduction, lead, members);
        std::vector<int32_t> bind = held.ins;
        bind.insert(bind.end(), held.pieces.begin(), held.pieces.end());
        s_.steps.push_back({std::move(sums.partial), std::move(bind)});
        it = held_sums_.erase(it);
    }
}

// sum / mean / max over node.ints. Ignoring size-1 dims, reduced axes that form one block map to
// [outer, R, inner] directly, and a leading block plus one more to [lead, outer, R, inner] (a
// per-channel sum of NCHW over {0, 2, 3}); otherwise they are first permuted to the end. Its input may be a fused root
// it evaluates (FusionPlan::reduced_in), stored first only where it is permuted.
void Lowering::lower_reduce(int32_t id, int32_t out) {
    const Node& n = g_.node(id);
    const int32_t x = n.inputs[0];
    const int32_t prologue = fusion_.reduced_in[static_cast<size_t>(x)] == id ? x : -1;
    int32_t in = value_of(x);
    const Shape shape = g_.node(x).shape;
    const auto mode = n.op == Op::Sum ? codegen::ReduceMode::Sum
                    : n.op == Op::Mean ? codegen::ReduceMode::Mean : codegen::ReduceMode::Max;
    std::optional<FusedTree> tree;
    if (prologue >= 0) tree = prologue_tree(prologue);
    const auto reduce_in_place = [&](int64_t outer, int64_t r, int64_t inner, int64_t lead = 1) {
        reduce(mode, in, out, outer, r, inner, lead, tree ? &*tree : nullptr);
    };
    auto reduced = [&](size_t d) { return std::binary_search(n.ints.begin(), n.ints.end(), static_cast<int64_t>(d)); };
    // The dims of size > 1 as runs of reduced and kept ones, with each run's size.
    std::vector<std::pair<bool, int64_t>> runs;
    for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] == 1) continue;
        if (runs.empty() || runs.back().first != reduced(d)) runs.emplace_back(reduced(d), 1);
        runs.back().second *= shape[d];
    }
    auto size_of = [&](size_t run) { return run < runs.size() ? runs[run].second : 1; };
    const size_t reduced_runs = static_cast<size_t>(std::count_if(runs.begin(), runs.end(), [](auto& r) { return r.first; }));
    if (reduced_runs == 0) return reduce_in_place(numel(shape), 1, 1);  // nothing of size > 1 is reduced: element-wise
    if (reduced_runs == 1) {
        const size_t at = runs[0].first ? 0 : 1;
        return reduce_in_place(at ? size_of(0) : 1, size_of(at), size_of(at + 1));
    }
    if (reduced_runs == 2 && runs[0].first) return reduce_in_place(size_of(1), size_of(2), size_of(3), size_of(0));  // reduced, kept, reduced[, kept]
    if (prologue >= 0) {  // stored after all, for the copy
        in = new_value(shape, g_.node(x).dtype, Storage::Transient, x);
        s_.node_value[static_cast<size_t>(x)] = in;
        fused_pointwise(x, in);
    }
    std::vector<int64_t> perm;
    for (size_t d = 0; d < shape.size(); ++d) if (!reduced(d)) perm.push_back(static_cast<int64_t>(d));
    int64_t kept = 1;
    for (int64_t d : perm) kept *= shape[static_cast<size_t>(d)];
    for (int64_t d : n.ints) perm.push_back(d);
    Shape permuted;
    const auto in_st = contiguous_strides(shape);
    std::vector<int64_t> strides;
    for (int64_t d : perm) permuted.push_back(shape[static_cast<size_t>(d)]), strides.push_back(in_st[static_cast<size_t>(d)]);
    const int32_t tmp = new_value(permuted, s_.values[static_cast<size_t>(in)].dtype);
    copy(in, tmp, {.dims = permuted, .in_strides = strides, .out_strides = contiguous_strides(permuted)});
    reduce(mode, tmp, out, kept, numel(shape) / std::max<int64_t>(kept, 1), 1);
}

}  // namespace mn::sched::detail
