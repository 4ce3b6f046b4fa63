// Lowering: one or a few kernels per live node, in graph order. Composite ops that need
// intermediate results (cross-entropy, mse, reductions over scattered axes) get scratch values.
#include <algorithm>
#include <map>
#include <set>

#include "schedule/fusion.hpp"
#include "schedule/schedule.hpp"

namespace mn::sched {

namespace {

using codegen::KernelSource;

std::vector<int64_t> contiguous_strides(const Shape& s) {
    std::vector<int64_t> st(s.size(), 1);
    for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
    return st;
}

// Strides that read `in` (NumPy-aligned to the right) while iterating `out`; 0 on broadcast dims.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
    std::vector<int64_t> st(out.size(), 0);
    const auto in_st = contiguous_strides(in);
    const size_t lead = out.size() - in.size();
    for (size_t d = 0; d < in.size(); ++d) st[lead + d] = in[d] == 1 ? 0 : in_st[d];
    return st;
}

class Lowering {
public:
    Lowering(const Graph& g, const Tuning& t) : g_(g), t_(t) {}

    Schedule run(const std::vector<int32_t>& roots) {
        std::vector<bool> live(g_.nodes().size(), false);
        for (int32_t r : roots) live[static_cast<size_t>(r)] = true;
        for (size_t i = live.size(); i-- > 0;) {
            if (!live[i]) continue;
            for (int32_t in : g_.nodes()[i].inputs) live[static_cast<size_t>(in)] = true;
        }
        fusion_ = plan_fusion(g_, live, roots, t_.max_fused_inputs);
        // No f16 weights where there are gradients: the forward's products may be split (f32 operands).
        if (t_.f16_weights && !g_.has_gradients()) invariant_ = parameter_only_nodes(g_);
        if (t_.split_forward && g_.has_gradients()) split_ = before_piecewise_gradients(g_);
        std::set<int32_t> seconds;  // a pair's second product: its first stores the epilogue
        for (int32_t second : fusion_.epilogue_pair) seconds.insert(second);
        for (size_t i = 0; i < live.size(); ++i) {
            if (fusion_.epilogue_of[i] >= 0 && !seconds.count(static_cast<int32_t>(i))) {
                epilogue_product_[fusion_.epilogue_of[i]] = static_cast<int32_t>(i);
            }
        }
        s_.node_value.assign(live.size(), -1);
        // Assignments copy last, once every other kernel has read the targets' old contents.
        std::vector<int32_t> copies;
        for (size_t i = 0; i < live.size(); ++i) {
            if (!live[i]) continue;
            if (g_.nodes()[i].op == Op::Assign) {
                const int32_t id = static_cast<int32_t>(i);
                s_.node_value[i] = value_of(g_.node(id).inputs[1]);  // the node reads as the value
                if (!fusion_.assign_elided[i]) copies.push_back(id);
                continue;
            }
            lower(static_cast<int32_t>(i));
        }
        for (const auto& [name, members] : batches_) emit_batches(name, members);
        for (int32_t id : copies) {
            const int32_t target = value_of(g_.node(id).inputs[0]);
            const Shape shape = value(target).shape;
            copy(value_of(g_.node(id).inputs[1]), view_for(id, target),
                 {.dims = shape, .in_strides = contiguous_strides(shape), .out_strides = contiguous_strides(shape)});
            s_.steps.back().kernel.label = "assign";
        }
        for (int32_t r : roots) s_.values[static_cast<size_t>(s_.root(s_.node_value[static_cast<size_t>(r)]))].pinned = true;
        return std::move(s_);
    }

private:
    int32_t new_value(Shape shape, DType dtype, Storage storage = Storage::Transient, int32_t node = -1) {
        Value v{.shape = std::move(shape), .dtype = dtype, .storage = storage, .node = node};
        v.pinned = storage != Storage::Transient;
        s_.values.push_back(std::move(v));
        return static_cast<int32_t>(s_.values.size() - 1);
    }
    int32_t value_of(int32_t node) const { return s_.node_value[static_cast<size_t>(node)]; }
    // A value written into `target`'s bytes (an update in place, an assignment's copy) that stands for
    // node `id`, so that MEGANEURA_CHECK judges the write as that node's.
    int32_t view_for(int32_t id, int32_t target) {
        const int32_t v = new_value(value(target).shape, value(target).dtype, Storage::Transient, id);
        s_.values[static_cast<size_t>(v)].view_of = target;
        return v;
    }

    void emit(KernelSource k, std::vector<int32_t> values) { s_.steps.push_back({std::move(k), std::move(values)}); }

    // A kernel reading `inputs` and storing `outs`, or where its work is split (`finish` set), storing f32
    // partials (partial_elements) that `finish` reads and turns into `outs`: split-K's sum, a split
    // reduction's, the attention's combine of key chunks and its backward's sums.
    void emit_through_partials(KernelSource first, std::optional<KernelSource> finish, int64_t partial_elements,
                               std::vector<int32_t> inputs, const std::vector<int32_t>& outs) {
        if (!finish) {
            inputs.insert(inputs.end(), outs.begin(), outs.end());
            return emit(std::move(first), std::move(inputs));
        }
        const int32_t partial = new_value({partial_elements}, DType::F32);
        inputs.push_back(partial);
        emit(std::move(first), std::move(inputs));
        std::vector<int32_t> reads = {partial};
        reads.insert(reads.end(), outs.begin(), outs.end());
        emit(std::move(*finish), std::move(reads));
    }

    // A single pointwise op over values (the building block composite lowerings use).
    void pointwise(Op op, const std::vector<int32_t>& ins, int32_t out) {
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

    // The fused tree rooted at pointwise node `root` (see fusion.hpp), as one kernel writing `out`.
    // With a product planned as its epilogue's kernel (fusion_.epilogue_of), the product stores the tree instead.
    void fused_pointwise(int32_t root, int32_t out) {
        codegen::PointwiseSpec spec{.out_dtype = value(out).dtype, .out_shape = value(out).shape};
        const auto product = epilogue_product_.find(root);
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
            const int32_t second = product != epilogue_product_.end() ? fusion_.epilogue_pair[static_cast<size_t>(product->second)] : -1;
            if (product != epilogue_product_.end() &&
                (node == product->second || is_view_of(node, product->second) || (second >= 0 && (node == second || is_view_of(node, second))))) {
                bind.push_back(node == product->second || is_view_of(node, product->second) ? -1 : -2);  // a product's value, never stored
                spec.in_dtypes.push_back(g_.node(node).dtype);
                spec.in_strides.emplace_back();
                spec.program.push_back({.op = Op::Input, .a = static_cast<int32_t>(bind.size() - 1), .dtype = g_.node(node).dtype});
            } else if (node != root && !fusion_.inlined[static_cast<size_t>(node)] && !stored_here) {
                bind.push_back(value_of(node));
                add_leaf(spec, value_of(node));
                spec.program.push_back({.op = Op::Input, .a = static_cast<int32_t>(bind.size() - 1),
                                        .dtype = value(value_of(node)).dtype});
            } else {
                const Node& n = g_.node(node);
                const int32_t a = self(self, n.inputs[0]);
                const int32_t b = n.inputs.size() > 1 ? self(self, n.inputs[1]) : -1;
                spec.program.push_back({.op = n.op, .a = a, .b = b, .dtype = n.dtype});
            }
            return step_of[node] = static_cast<int32_t>(spec.program.size() - 1);
        };
        build(build, root);
        std::vector<int32_t> extra;  // bound after the leaves (and, in a pointwise kernel, out0)
        for (int32_t node : stored) {
            spec.extra_outputs.emplace_back(step_of.at(node), value(value_of(node)).dtype);
            extra.push_back(value_of(node));
        }
        if (product != epilogue_product_.end() && fusion_.epilogue_keeps[static_cast<size_t>(product->second)]) {
            const auto read = std::find_if(step_of.begin(), step_of.end(), [&](const auto& at) {  // or a view of it
                return at.first == product->second || is_view_of(at.first, product->second);
            });
            spec.extra_outputs.emplace_back(read->second, g_.node(product->second).dtype);
            extra.push_back(value_of(product->second));
        }
        if (product != epilogue_product_.end()) {
            const auto position = [&](int32_t marker) {
                const auto at = std::find(bind.begin(), bind.end(), marker);
                return at == bind.end() ? -1 : static_cast<int32_t>(at - bind.begin());
            };
            const codegen::Epilogue epilogue{.tree = std::move(spec), .product = position(-1), .product2 = position(-2)};
            std::erase_if(bind, [](int32_t v) { return v < 0; });
            bind.insert(bind.end(), extra.begin(), extra.end());
            if (is_norm(g_.node(product->second).op)) return lower_norm(g_.node(product->second), out, &epilogue, bind);
            if (is_norm_grad(g_.node(product->second).op)) return lower_norm_grad(g_.node(product->second), out, &epilogue, bind);
            return lower_product(product->second, {out}, &epilogue, bind);
        }
        bind.push_back(out);
        bind.insert(bind.end(), extra.begin(), extra.end());
        if (const int32_t assign = fusion_.batched_update[static_cast<size_t>(root)]; assign >= 0) {
            return add_to_batch(g_.node(assign).name, std::move(spec), std::move(bind));
        }
        emit(codegen::pointwise_kernel(spec, t_.pointwise), std::move(bind));
    }

    struct Batched {
        codegen::PointwiseBatch::Member member;
        std::vector<int32_t> values;  // per key of the member, inputs then outputs: the value it binds
    };
    // A batched update (FusionPlan::batched_update) waits for the others of its name; `bind` is what its
    // pointwise kernel would bind. Each binding's key is the storage it names (its root value), so a
    // scalar every member reads is one binding and an update in place reads and writes its target through one.
    void add_to_batch(const std::string& name, codegen::PointwiseSpec spec, std::vector<int32_t> bind) {
        Batched b{.member = {.spec = std::move(spec)}, .values = std::move(bind)};
        const size_t inputs = b.member.spec.in_dtypes.size();
        for (size_t k = 0; k < b.values.size(); ++k) (k < inputs ? b.member.in_keys : b.member.out_keys).push_back(s_.root(b.values[k]));
        const auto it = std::find_if(batches_.begin(), batches_.end(), [&](const auto& e) { return e.first == name; });
        (it != batches_.end() ? it->second : batches_.emplace_back(name, std::vector<Batched>{}).second).push_back(std::move(b));
    }

    // The batch's members in order, as few dispatches as fit the device's bindings. A member that writes what an
    // earlier one in the dispatch reads, or reads what it writes, starts the next: their workgroups run in no order.
    void emit_batches(const std::string& name, const std::vector<Batched>& members) {
        codegen::PointwiseBatch batch;
        std::vector<const Batched*> in_batch;
        std::set<int32_t> reads, writes;
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
        };
        for (const Batched& b : members) {
            const auto& m = b.member;
            const bool conflict =
                std::any_of(m.out_keys.begin(), m.out_keys.end(), [&](int32_t k) { return reads.count(k) || writes.count(k); }) ||
                std::any_of(m.in_keys.begin(), m.in_keys.end(), [&](int32_t k) { return writes.count(k) > 0; });
            batch.members.push_back(m);
            if (conflict || codegen::batch_bindings(batch) > t_.max_batch_bindings) {
                batch.members.pop_back();
                flush();
                batch.members.push_back(m);
            }
            in_batch.push_back(&b);
            reads.insert(m.in_keys.begin(), m.in_keys.end());
            writes.insert(m.out_keys.begin(), m.out_keys.end());
        }
        if (!batch.members.empty()) flush();
    }

    bool is_view_of(int32_t node, int32_t product) const {
        return g_.node(node).op == Op::Reshape && g_.node(node).inputs[0] == product;
    }

    void add_leaf(codegen::PointwiseSpec& spec, int32_t v) {
        spec.in_dtypes.push_back(value(v).dtype);
        spec.in_strides.push_back(broadcast_strides(value(v).shape, spec.out_shape));
    }
    const Value& value(int32_t v) const { return s_.values[static_cast<size_t>(v)]; }

    void copy(int32_t in, int32_t out, codegen::CopySpec spec) {
        spec.dtype = s_.values[static_cast<size_t>(in)].dtype;
        emit(codegen::strided_copy_kernel(spec, t_.pointwise), {in, out});
    }

    void reduce(codegen::ReduceMode mode, int32_t in, int32_t out, int64_t outer, int64_t r, int64_t inner,
                int64_t lead = 1) {
        const DType in_dtype = s_.values[static_cast<size_t>(in)].dtype, out_dtype = s_.values[static_cast<size_t>(out)].dtype;
        codegen::Reduction k = codegen::reduce_kernels(mode, in_dtype, out_dtype, outer, r, inner, t_.reduction, lead);
        emit_through_partials(std::move(k.partial), std::move(k.sum), k.partial_elements, {in}, {out});
    }

    // The number of labels a cross-entropy node counts (not its ignore index), as an f32 scalar.
    int32_t cross_entropy_count(const Node& n, int32_t labels, int64_t rows) {
        const int32_t count = new_value({}, DType::F32);
        emit(codegen::cross_entropy_count_kernel(rows, n.ints[0], t_.reduction), {labels, count});
        return count;
    }

    // sum / mean / max over node.ints. Ignoring size-1 dims, reduced axes that form one block map to
    // [outer, R, inner] directly, and a leading block plus one more to [lead, outer, R, inner] (a
    // per-channel sum of NCHW over {0, 2, 3}); otherwise they are first permuted to the end.
    void lower_reduce(const Node& n, int32_t in, int32_t out) {
        const Shape shape = s_.values[static_cast<size_t>(in)].shape;  // a copy: new values may reallocate
        auto reduced = [&](size_t d) { return std::binary_search(n.ints.begin(), n.ints.end(), static_cast<int64_t>(d)); };
        const auto mode = n.op == Op::Sum ? codegen::ReduceMode::Sum
                        : n.op == Op::Mean ? codegen::ReduceMode::Mean : codegen::ReduceMode::Max;
        // The dims of size > 1 as runs of reduced and kept ones, with each run's size.
        std::vector<std::pair<bool, int64_t>> runs;
        for (size_t d = 0; d < shape.size(); ++d) {
            if (shape[d] == 1) continue;
            if (runs.empty() || runs.back().first != reduced(d)) runs.emplace_back(reduced(d), 1);
            runs.back().second *= shape[d];
        }
        auto size_of = [&](size_t run) { return run < runs.size() ? runs[run].second : 1; };
        const size_t reduced_runs = static_cast<size_t>(std::count_if(runs.begin(), runs.end(), [](auto& r) { return r.first; }));
        if (reduced_runs == 0) {  // nothing of size > 1 is reduced: an element-wise pass
            reduce(mode, in, out, numel(shape), 1, 1);
            return;
        }
        if (reduced_runs == 1) {
            const size_t at = runs[0].first ? 0 : 1;
            reduce(mode, in, out, at ? size_of(0) : 1, size_of(at), size_of(at + 1));
            return;
        }
        if (reduced_runs == 2 && runs[0].first) {  // reduced, kept, reduced[, kept]
            reduce(mode, in, out, size_of(1), size_of(2), size_of(3), size_of(0));
            return;
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

    void lower(int32_t id) {
        const Node& n = g_.node(id);
        auto in = [&](size_t k) { return value_of(n.inputs[k]); };
        auto shape_of = [&](int32_t v) -> const Shape& { return s_.values[static_cast<size_t>(v)].shape; };
        if (op_info(n.op).archetype == Archetype::Leaf) {
            if (value_of(id) >= 0) return;  // a RoPE that stores into a cache lowered it first
            const Storage st = n.op == Op::Input ? Storage::Input
                             : n.op == Op::Parameter ? Storage::Parameter
                             : n.op == Op::State ? Storage::State : Storage::Constant;
            s_.node_value[static_cast<size_t>(id)] = new_value(n.shape, n.dtype, st, id);
            return;
        }
        if (fusion_.inlined[static_cast<size_t>(id)]) return;  // evaluated inside its consumer's kernel
        if (fusion_.epilogue_of[static_cast<size_t>(id)] >= 0) {  // lowered in its epilogue's place
            if (fusion_.epilogue_keeps[static_cast<size_t>(id)]) {   // which stores its value too
                s_.node_value[static_cast<size_t>(id)] = new_value(n.shape, n.dtype, Storage::Transient, id);
            }
            return;
        }
        if (n.op == Op::Reshape && fusion_.epilogue_of[static_cast<size_t>(n.inputs[0])] >= 0 &&
            !fusion_.epilogue_keeps[static_cast<size_t>(n.inputs[0])]) {
            return;  // and its view
        }
        // An RMSNorm its products compute (FusionPlan::norm_in_products), and its views: never stored.
        if (fusion_.norm_in_products[static_cast<size_t>(n.op == Op::Reshape ? n.inputs[0] : id)]) return;
        if (n.op == Op::Reshape && fusion_.heads_split_stored[static_cast<size_t>(id)] >= 0) return;  // see below
        if (n.op == Op::Reshape) {
            const int32_t v = new_value(n.shape, n.dtype, Storage::Transient, id);
            s_.values[static_cast<size_t>(v)].view_of = in(0);
            s_.node_value[static_cast<size_t>(id)] = v;
            return;
        }
        const bool stored = fusion_.stored_in[static_cast<size_t>(id)] >= 0;  // by a later kernel
        if (const int32_t scatter = fusion_.rope_into_cache[static_cast<size_t>(id)]; scatter >= 0) {
            const int32_t cache = fusion_.in_place_of[static_cast<size_t>(scatter)];
            lower(cache);  // a leaf, which a model may declare after the RoPE
            const int32_t v = view_for(scatter, value_of(cache));
            s_.node_value[static_cast<size_t>(scatter)] = v;  // the rope's own value is never stored
            return lower_rope(n, v, false, &g_.node(scatter));
        }
        if (const int32_t target = fusion_.in_place_of[static_cast<size_t>(id)]; target >= 0) {
            if (value_of(id) >= 0) return;  // its RoPE stored the rows (rope_into_cache)
            const int32_t v = view_for(id, value_of(target));
            s_.node_value[static_cast<size_t>(id)] = v;
            if (n.op == Op::SliceScatter) return slice_scatter(n, v, true);
            if (!stored) fused_pointwise(id, v);
            return;
        }
        if (n.op == Op::Permute && value_of(id) >= 0) return;  // its input's kernel stored it (heads_merged_into)
        if (fusion_.heads_split_by[static_cast<size_t>(id)] >= 0) return;  // its rope reads its input
        if (const int32_t permute = fusion_.heads_merged_into[static_cast<size_t>(id)]; permute >= 0) {
            const int32_t v = new_value(g_.node(permute).shape, n.dtype, Storage::Transient, permute);
            s_.node_value[static_cast<size_t>(id)] = s_.node_value[static_cast<size_t>(permute)] = v;
            return n.op == Op::Rope ? lower_rope(n, v, true) : lower_attention(n, v, true);
        }
        if (n.op == Op::Slice && !fusion_.column_slices[static_cast<size_t>(n.inputs[0])].empty()) return;  // its product stored it
        if (const auto& slices = fusion_.column_slices[static_cast<size_t>(id)]; !slices.empty()) {
            std::vector<int32_t> outs;  // the product's own value is never stored
            for (int32_t slice : slices) {  // nor, where it stores the split of heads, the slice's and its reshape's
                const int32_t permute = fusion_.heads_split_stored[static_cast<size_t>(slice)];
                const int32_t stored = permute >= 0 ? permute : slice;
                outs.push_back(new_value(g_.node(stored).shape, n.dtype, Storage::Transient, stored));
                s_.node_value[static_cast<size_t>(stored)] = outs.back();
            }
            return lower_product(id, outs);
        }
        if (const int32_t permute = fusion_.heads_split_stored[static_cast<size_t>(id)]; n.op == Op::MatMul && permute >= 0) {
            const int32_t v = new_value(g_.node(permute).shape, n.dtype, Storage::Transient, permute);
            s_.node_value[static_cast<size_t>(permute)] = v;  // the product's own value is never stored
            return lower_product(id, {v});
        }
        const int32_t out = new_value(n.shape, n.dtype, Storage::Transient, id);
        s_.node_value[static_cast<size_t>(id)] = out;
        if (stored) return;
        if (lower_transformer(n, out)) return;
        switch (op_info(n.op).archetype) {
            case Archetype::Pointwise: return fused_pointwise(id, out);
            case Archetype::MatMul: case Archetype::Conv: return lower_product(id, {out});
            case Archetype::Attention: return lower_attention(n, out);
            case Archetype::Leaf: case Archetype::Reduction: case Archetype::DataMovement: break;
        }
        const Shape x = shape_of(in(0));  // a copy: new values may reallocate
        switch (n.op) {
            case Op::Sum: case Op::Mean: case Op::Max: return lower_reduce(n, in(0), out);
            case Op::Softmax: case Op::LogSoftmax: {
                const auto a = static_cast<size_t>(n.ints[0]);
                int64_t outer = 1, inner = 1;
                for (size_t d = 0; d < a; ++d) outer *= x[d];
                for (size_t d = a + 1; d < x.size(); ++d) inner *= x[d];
                reduce(n.op == Op::Softmax ? codegen::ReduceMode::Softmax : codegen::ReduceMode::LogSoftmax, in(0), out,
                       outer, x[a], inner);
                return;
            }
            case Op::CrossEntropy: {
                const int32_t count = cross_entropy_count(n, in(1), x[0]);
                const int32_t rows = new_value({x[0]}, DType::F32);
                const int32_t total = new_value({}, DType::F32);
                emit(codegen::cross_entropy_rows_kernel(n.dtype, x[0], x[1], n.ints[0], t_.reduction), {in(0), in(1), rows});
                reduce(codegen::ReduceMode::Sum, rows, total, 1, x[0], 1);
                pointwise(Op::Div, {total, count}, out);
                return;
            }
            case Op::CrossEntropyGrad: {
                const int32_t count = cross_entropy_count(n, in(1), x[0]);
                emit(codegen::cross_entropy_grad_kernel(n.dtype, x[0], x[1], n.ints[0], t_.reduction),
                     {in(0), in(1), in(2), count, out});
                return;
            }
            case Op::MseLoss: {
                const int32_t diff = new_value(x, n.dtype);
                const int32_t sq = new_value(x, n.dtype);
                pointwise(Op::Sub, {in(0), in(1)}, diff);
                pointwise(Op::Mul, {diff, diff}, sq);
                reduce(codegen::ReduceMode::Mean, sq, out, 1, numel(x), 1);
                return;
            }
            case Op::Permute: {
                const auto st = contiguous_strides(x);
                std::vector<int64_t> in_strides;
                for (int64_t p : n.ints) in_strides.push_back(st[static_cast<size_t>(p)]);
                copy(in(0), out, {.dims = n.shape, .in_strides = in_strides, .out_strides = contiguous_strides(n.shape)});
                return;
            }
            case Op::Slice: {
                const auto st = contiguous_strides(x);
                const size_t rank = x.size();
                codegen::CopySpec spec{.dims = n.shape, .out_strides = contiguous_strides(n.shape)};
                for (size_t d = 0; d < rank; ++d) {
                    spec.in_strides.push_back(st[d] * n.ints[2 * rank + d]);
                    spec.in_offset += n.ints[d] * st[d];
                }
                copy(in(0), out, spec);
                return;
            }
            case Op::Concat: {
                const auto axis = static_cast<size_t>(n.ints[0]);
                const auto out_st = contiguous_strides(n.shape);
                int64_t at = 0;
                for (size_t k = 0; k < n.inputs.size(); ++k) {
                    const Shape piece = shape_of(in(k));
                    copy(in(k), out, {.dims = piece, .in_strides = contiguous_strides(piece), .out_strides = out_st,
                                      .out_offset = at * out_st[axis]});
                    at += piece[axis];
                }
                return;
            }
            case Op::MaxPool2d:
            case Op::MaxPool2dGrad: {
                const bool backward = n.op == Op::MaxPool2dGrad;
                const Shape y = backward ? shape_of(in(1)) : n.shape;
                const codegen::PoolSpec spec{.dtype = n.dtype, .x = x, .out_h = y[2], .out_w = y[3],
                                             .kernel = n.ints[0], .stride = n.ints[1], .padding = n.ints[2]};
                std::vector<int32_t> bind{in(0)};
                if (backward) bind.push_back(in(1));
                bind.push_back(out);
                emit(codegen::max_pool2d_kernel(spec, backward, t_.pointwise), std::move(bind));
                return;
            }
            case Op::Expand:
                copy(in(0), out, {.dims = n.shape, .in_strides = broadcast_strides(x, n.shape),
                                  .out_strides = contiguous_strides(n.shape)});
                return;
            // leaves (never lowered), and the ops lowered above: by archetype, or by lower_transformer
            case Op::Input: case Op::Parameter: case Op::Constant: case Op::State: case Op::Neg: case Op::Exp:
            case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Relu: case Op::Sigmoid:
            case Op::Tanh: case Op::Silu: case Op::GeluErf: case Op::GeluTanh: case Op::Cast: case Op::Sign:
            case Op::GeluErfDeriv: case Op::GeluTanhDeriv: case Op::Add: case Op::Sub: case Op::Mul: case Op::Div:
            case Op::Maximum: case Op::Minimum: case Op::Pow: case Op::Greater: case Op::Equal: case Op::MatMul:
            case Op::Conv2d: case Op::Conv2dGradInput: case Op::Conv2dGradWeight: case Op::Attention:
            case Op::AttentionLse: case Op::AttentionGradQ: case Op::AttentionGradK: case Op::AttentionGradV:
            case Op::Reshape: case Op::Assign: case Op::Embedding: case Op::EmbeddingGrad: case Op::RmsNorm:
            case Op::LayerNorm: case Op::RmsNormGrad: case Op::LayerNormGrad: case Op::GroupNorm:
            case Op::GroupNormGrad: case Op::Rope: case Op::SliceScatter:
                break;
        }
        throw Error(std::string("schedule: no lowering for op ") + op_info(n.op).name);
    }

    // Embedding, norms, RoPE and the cache write: one kernel each over a [rows, last dim] view
    // (two for the embedding gradient: zero, then the per-id sums). False for other ops.
    bool lower_transformer(const Node& n, int32_t out) {
        std::vector<int32_t> ins;
        for (int32_t i : n.inputs) ins.push_back(value_of(i));
        auto bind = [&](std::vector<int32_t> values) {
            values.push_back(out);
            return values;
        };
        const int64_t dim = n.shape.empty() ? 1 : n.shape.back(), rows = numel(n.shape) / std::max<int64_t>(dim, 1);
        switch (n.op) {
            case Op::Embedding:
                emit(codegen::embedding_kernel(n.dtype, rows, g_.node(n.inputs[1]).shape[0], dim, t_.pointwise), bind(ins));
                return true;
            case Op::EmbeddingGrad:
                emit(codegen::fill_zero_kernel(n.dtype, numel(n.shape), t_.pointwise), {out});
                emit(codegen::embedding_grad_kernel(n.dtype, numel(g_.node(n.inputs[0]).shape), n.shape[0], dim, t_.reduction),
                     bind(ins));
                return true;
            case Op::RmsNorm: case Op::LayerNorm: case Op::GroupNorm:
                lower_norm(n, out);
                return true;
            case Op::RmsNormGrad: case Op::LayerNormGrad: case Op::GroupNormGrad:
                lower_norm_grad(n, out);
                return true;
            case Op::Rope:
                lower_rope(n, out, false);
                return true;
            case Op::SliceScatter:
                slice_scatter(n, out, false);
                return true;
            // lowered by lower()'s other cases
            case Op::Input: case Op::Parameter: case Op::Constant: case Op::State: case Op::Neg: case Op::Exp:
            case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Relu: case Op::Sigmoid:
            case Op::Tanh: case Op::Silu: case Op::GeluErf: case Op::GeluTanh: case Op::Cast: case Op::Sign:
            case Op::GeluErfDeriv: case Op::GeluTanhDeriv: case Op::Add: case Op::Sub: case Op::Mul: case Op::Div:
            case Op::Maximum: case Op::Minimum: case Op::Pow: case Op::Greater: case Op::Equal: case Op::Sum:
            case Op::Mean: case Op::Max: case Op::Softmax: case Op::LogSoftmax: case Op::CrossEntropy:
            case Op::MseLoss: case Op::CrossEntropyGrad: case Op::MatMul: case Op::Conv2d: case Op::Conv2dGradInput:
            case Op::Conv2dGradWeight: case Op::Attention: case Op::AttentionLse: case Op::AttentionGradQ:
            case Op::AttentionGradK: case Op::AttentionGradV: case Op::Reshape: case Op::Permute: case Op::Slice:
            case Op::Concat: case Op::Expand: case Op::Assign: case Op::MaxPool2d: case Op::MaxPool2dGrad:
                break;
        }
        return false;
    }

    // A SliceScatter node into out: a copy of x with src's rows in it, or in place (out a view of x,
    // FusionPlan::in_place_of), src's rows alone.
    void slice_scatter(const Node& n, int32_t out, bool in_place) {
        const auto axis = static_cast<size_t>(n.ints[0]);
        int64_t outer = 1, inner = 1;
        for (size_t d = 0; d < axis; ++d) outer *= n.shape[d];
        for (size_t d = axis + 1; d < n.shape.size(); ++d) inner *= n.shape[d];
        const int64_t dim = n.shape[axis], len = g_.node(n.inputs[1]).shape[axis];
        const int32_t src = value_of(n.inputs[1]), start = value_of(n.inputs[2]);
        if (in_place) return emit(codegen::slice_write_kernel(n.dtype, outer, dim, len, inner, t_.pointwise), {src, start, out});
        emit(codegen::slice_scatter_kernel(n.dtype, outer, dim, len, inner, t_.pointwise), {value_of(n.inputs[0]), src, start, out});
    }

    // A norm node's rows: the last dim (RMSNorm, LayerNorm), or (image, group) pairs (GroupNorm).
    static codegen::NormSpec norm_spec(const Node& n) {
        const bool rms = n.op == Op::RmsNorm || n.op == Op::RmsNormGrad;
        codegen::NormSpec spec{.mode = rms ? codegen::NormMode::Rms : codegen::NormMode::Layer, .dtype = n.dtype,
                               .rows = 0, .dim = n.shape.back(), .eps = n.data[0]};
        if (n.op == Op::GroupNorm || n.op == Op::GroupNormGrad) {
            spec.groups = n.ints[0];
            spec.rows = n.shape[0] * spec.groups;
            spec.spatial = numel(n.shape) / (n.shape[0] * n.shape[1]);
            spec.dim = numel(n.shape) / spec.rows;
        } else {
            spec.rows = numel(n.shape) / std::max<int64_t>(spec.dim, 1);
        }
        return spec;
    }

    // Norm node n (or its input gradient) into out, storing through `epilogue` (reading epilogue_inputs) if given.
    void lower_norm(const Node& n, int32_t out, const codegen::Epilogue* epilogue = nullptr,
                    const std::vector<int32_t>& epilogue_inputs = {}) {
        codegen::NormSpec spec = norm_spec(n);
        spec.epilogue = epilogue;
        emit(codegen::norm_kernel(spec, t_.reduction), norm_bindings(n, out, epilogue_inputs));
    }
    void lower_norm_grad(const Node& n, int32_t out, const codegen::Epilogue* epilogue = nullptr,
                         const std::vector<int32_t>& epilogue_inputs = {}) {
        codegen::NormSpec spec = norm_spec(n);
        spec.epilogue = epilogue;
        emit(codegen::norm_grad_kernel(spec, t_.reduction), norm_bindings(n, out, epilogue_inputs));
    }
    std::vector<int32_t> norm_bindings(const Node& n, int32_t out, const std::vector<int32_t>& epilogue_inputs) const {
        std::vector<int32_t> bind;
        for (int32_t i : n.inputs) bind.push_back(value_of(i));
        bind.push_back(out);
        bind.insert(bind.end(), epilogue_inputs.begin(), epilogue_inputs.end());
        return bind;
    }

    // Matmul or convolution node `id` into outs (a matmul's column slices, FusionPlan::column_slices, or its
    // one value), storing through `epilogue` (reading epilogue_inputs) if given.
    void lower_product(int32_t id, const std::vector<int32_t>& outs, const codegen::Epilogue* epilogue = nullptr,
                       const std::vector<int32_t>& epilogue_inputs = {}) {
        const Node& n = g_.node(id);
        const int32_t a = value_of(n.inputs[0]), b = value_of(n.inputs[1]);
        if (op_info(n.op).archetype != Archetype::MatMul) return lower_conv(n, product_tuning(g_, id, t_, split_), a, b, outs[0], epilogue, epilogue_inputs);
        const int32_t norm = g_.node(n.inputs[0]).op == Op::Reshape ? g_.node(n.inputs[0]).inputs[0] : n.inputs[0];
        const int32_t second = fusion_.epilogue_pair[static_cast<size_t>(id)];
        std::vector<int32_t> extra = epilogue_inputs;  // then the norm's weight, then the second product's W
        GemvExtras gemv{.b2 = second >= 0, .b2_node = second >= 0 ? g_.node(second).inputs[1] : -1};
        int32_t row = a;
        if (fusion_.norm_in_products[static_cast<size_t>(norm)]) {  // A reads the norm's input row, in A's shape
            const Node& rms = g_.node(norm);
            row = new_value(g_.node(n.inputs[0]).shape, n.dtype);
            s_.values[static_cast<size_t>(row)].view_of = value_of(rms.inputs[0]);
            extra.push_back(value_of(rms.inputs[1]));
            gemv.a_rms_eps = rms.data[0];
        }
        if (second >= 0) extra.push_back(value_of(g_.node(second).inputs[1]));
        lower_matmul(n, product_tuning(g_, id, t_, split_), row, b, outs, epilogue, extra, gemv);
    }

    // Operand `node` (lowered to value v) of a product, as an f16 copy where Tuning::f16_weights allows
    // (an f32 operand that depends on parameters alone), cast once per value however many products read it
    // (a tied embedding and lm head); -1 where not.
    int32_t f16_weight(int32_t node, int32_t v) {
        if (invariant_.empty() || !invariant_[static_cast<size_t>(node)] || value(v).dtype != DType::F32) return -1;
        auto [it, fresh] = f16_copies_.try_emplace(v, -1);
        if (fresh) {
            it->second = new_value(value(v).shape, DType::F16);
            pointwise(Op::Cast, {v}, it->second);
        }
        return it->second;
    }

    // A convolution's f16 weight copy [O, C, KH, KW] stored again as [O, C / 8, KH, KW, 8] (codegen::ConvSpec::weight_octets),
    // once per copy; it depends on parameters alone, so it is hoisted like the cast.
    int32_t weight_in_octets(int32_t w16) {
        auto [it, fresh] = octet_copies_.try_emplace(w16, -1);
        if (fresh) {
            const Shape w = value(w16).shape;  // a copy: new_value may reallocate
            const int64_t kk = w[2] * w[3];
            const Shape dims = {w[0], w[1] / 8, w[2], w[3], 8};
            it->second = new_value(dims, DType::F16);
            copy(w16, it->second, {.dims = dims, .in_strides = {w[1] * kk, 8 * kk, w[3], 1, kk}, .out_strides = contiguous_strides(dims)});
        }
        return it->second;
    }

    // What a GEMV of one row computes besides the product (codegen::MatmulSpec): A's RMSNorm, a second product.
    struct GemvExtras {
        double a_rms_eps = 0;
        bool b2 = false;
        int32_t b2_node = -1;  // the second product's W, cast to f16 with the first's (f16_weight)
    };

    // The norm's weight and the second W (gemv) are the last of epilogue_inputs.
    void lower_matmul(const Node& n, const codegen::MatmulTuning& tuning, int32_t a, int32_t b, const std::vector<int32_t>& outs,
                      const codegen::Epilogue* epilogue, const std::vector<int32_t>& epilogue_inputs, const GemvExtras& gemv) {
        const Shape sa = s_.values[static_cast<size_t>(a)].shape;  // copies: f16_weight adds values
        const Shape sb = s_.values[static_cast<size_t>(b)].shape;
        const Shape batch(n.shape.begin(), n.shape.end() - 2);
        auto batch_strides = [&](const Shape& s) {
            const Shape sb_(s.begin(), s.end() - 2);
            auto st = broadcast_strides(sb_, batch);
            const int64_t mat = s[s.size() - 1] * s[s.size() - 2];
            for (auto& v : st) v *= mat;
            return st;
        };
        codegen::MatmulSpec spec{.dtype = n.dtype, .m = n.shape[n.shape.size() - 2], .n = n.shape.back(),
                                 .k = n.ints[0] ? sa[sa.size() - 2] : sa.back(), .trans_a = n.ints[0] != 0,
                                 .trans_b = n.ints[1] != 0, .batch = batch, .a_batch_strides = batch_strides(sa),
                                 .b_batch_strides = batch_strides(sb), .epilogue = epilogue, .a_rms_eps = gemv.a_rms_eps, .b2 = gemv.b2};
        // A split of heads is the value of the permute it stands for (FusionPlan::heads_split_stored); an
        // epilogue's root may be of another rank than the product (a reshape between them), and is no part.
        const auto heads_split = [&](int32_t o) { return value(o).node >= 0 && g_.node(value(o).node).op == Op::Permute; };
        if (outs.size() > 1 || heads_split(outs[0])) {
            for (int32_t o : outs) {  // [rows, width], or a split of heads [batch, heads, seq, head_dim]
                const Shape& s = value(o).shape;
                spec.column_parts.push_back(s.size() == 4 ? codegen::ColumnPart{.width = s[1] * s[3], .head_dim = s[3], .seq = s[2]}
                                                          : codegen::ColumnPart{.width = s[1]});
            }
        }
        if (const int32_t a16 = f16_weight(n.inputs[0], a); a16 >= 0) a = a16, spec.a_f16 = true;
        std::vector<int32_t> extra = epilogue_inputs;
        // A GEMV's second W (bound last) is read in B's dtype: both f16 or neither.
        const int32_t b16 = f16_weight(n.inputs[1], b);
        const int32_t w2_16 = b16 >= 0 && gemv.b2 ? f16_weight(gemv.b2_node, extra.back()) : -1;
        if (b16 >= 0 && (!gemv.b2 || w2_16 >= 0)) {
            b = b16, spec.b_f16 = true;
            if (gemv.b2) extra.back() = w2_16;
        }
        emit_product(codegen::matmul_kernels(spec, tuning), a, b, outs, extra);
    }

    // A matmul or convolution product of a and b into outs (its value, or its column parts), through f32
    // partials and their sum where the kernels split the reduction; the epilogue's inputs are bound after the
    // storing kernel's outputs.
    void emit_product(codegen::MatmulKernels kernels, int32_t a, int32_t b, const std::vector<int32_t>& outs,
                      const std::vector<int32_t>& epilogue_inputs) {
        std::vector<int32_t> stores = outs;
        stores.insert(stores.end(), epilogue_inputs.begin(), epilogue_inputs.end());
        emit_through_partials(std::move(kernels.product), std::move(kernels.sum), kernels.partial_elements, {a, b}, stores);
    }

    // Bindings in the node's input order, then the output: see codegen::ConvSpec.
    void lower_conv(const Node& n, const codegen::MatmulTuning& tuning, int32_t a, int32_t b, int32_t out,
                    const codegen::Epilogue* epilogue, const std::vector<int32_t>& epilogue_inputs) {
        const Shape sa = s_.values[static_cast<size_t>(a)].shape, sb = s_.values[static_cast<size_t>(b)].shape;
        codegen::ConvSpec spec{.dtype = n.dtype, .attrs = n.ints, .epilogue = epilogue};
        // The three convolution ops only (lower_product's callers): not a switch over every op.
        if (n.op == Op::Conv2d) {
            spec.mode = codegen::ConvMode::Forward, spec.x = sa, spec.weight = sb, spec.y = n.shape;
            if (const int32_t b16 = f16_weight(n.inputs[1], b); b16 >= 0) {
                b = b16, spec.weight_f16 = true;
                if (codegen::conv_weight_in_octets(spec, tuning)) b = weight_in_octets(b), spec.weight_octets = true;
            }
        } else if (n.op == Op::Conv2dGradInput) {
            spec.mode = codegen::ConvMode::GradInput, spec.x = n.shape, spec.weight = sb, spec.y = sa;
        } else if (n.op == Op::Conv2dGradWeight) {
            spec.mode = codegen::ConvMode::GradWeight, spec.x = sa, spec.weight = n.shape, spec.y = sb;
        } else {
            throw Error(std::string("schedule: ") + op_info(n.op).name + " is not a convolution");
        }
        auto [kernels, swapped] = codegen::conv2d_kernels(spec, tuning);
        if (swapped) std::swap(a, b);
        emit_product(std::move(kernels), a, b, {out}, epilogue_inputs);
    }

    // The attention ops come in families that one kernel computes together: Attention with its
    // AttentionLse, AttentionGradK with AttentionGradV. Whichever member is lowered first emits
    // the kernel, with a scratch value for its sibling; the sibling becomes a view of it.
    struct AttentionKey {
        std::vector<int32_t> inputs;
        std::vector<int64_t> ints;
        std::vector<double> data;
        bool backward;
        auto operator<=>(const AttentionKey&) const = default;
    };

    codegen::AttentionSpec attention_spec(const Node& n) const {
        const Shape& q = g_.node(n.inputs[0]).shape;
        const Shape& k = g_.node(n.inputs[1]).shape;
        const bool dynamic = n.inputs.size() == (n.op == Op::Attention || n.op == Op::AttentionLse ? 4u : 7u);
        return {.dtype = g_.node(n.inputs[0]).dtype, .batch = q[0], .q_heads = q[1], .kv_heads = k[1], .q_len = q[2],
                .kv_len = k[2], .head_dim = q[3], .causal = n.ints[0] != 0, .window = n.ints[1], .scale = n.data[0],
                .dynamic_start = dynamic, .query_start = k[2] - q[2]};
    }

    // RoPE over [batch, heads, seq, dim], reading a split of the heads in place (FusionPlan::heads_split_by),
    // with merged_out storing in the merged layout (heads_merged_into), and with `cache`, the SliceScatter
    // whose rows it is, storing them into the cache at its start (rope_into_cache; out is the cache's view).
    void lower_rope(const Node& n, int32_t out, bool merged_out, const Node* cache = nullptr) {
        const int32_t x = n.inputs[0];
        const bool split = fusion_.heads_split_by[static_cast<size_t>(x)] >= 0;
        const int32_t in = value_of(split ? g_.node(x).inputs[0] : x);  // split: [batch, seq, heads, dim]
        const int64_t dim = n.shape.back(), rows = numel(n.shape) / dim;
        const codegen::RopeLayout layout{.heads = split || merged_out ? n.shape[1] : 0, .reads_split = split,
                                         .writes_merged = merged_out,
                                         .cache_rows = cache ? cache->shape[static_cast<size_t>(cache->ints[0])] : 0};
        std::vector<int32_t> bind{in, value_of(n.inputs[1]), value_of(n.inputs[2]), out};
        if (cache) bind.push_back(value_of(cache->inputs[2]));
        emit(codegen::rope_kernel(n.dtype, rows, n.shape[n.shape.size() - 2], dim, n.flag, t_.pointwise, layout), std::move(bind));
    }

    // merged_out: out is the merge of the heads (FusionPlan::heads_merged_into).
    void lower_attention(const Node& n, int32_t out, bool merged_out = false) {
        const bool backward = n.op != Op::Attention && n.op != Op::AttentionLse;
        auto in = [&](size_t k) { return value_of(n.inputs[k]); };
        codegen::AttentionSpec spec = attention_spec(n);
        spec.merged_out = merged_out;
        std::vector<int32_t> start;
        if (spec.dynamic_start) start.push_back(in(backward ? 6 : 3));
        auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) { a.insert(a.end(), b.begin(), b.end()); return a; };
        // A backward kernel's inputs, then its outputs (dq, or dk and dv), through f32 partials and their sum
        // where it splits its sweep.
        auto emit_grad = [&](codegen::AttentionGradKernels k, const std::vector<int32_t>& outs) {
            emit_through_partials(std::move(k.product), std::move(k.sum), k.partial_elements,
                                  cat({in(0), in(1), in(2), in(4), in(5), attention_delta(in(3), in(4))}, start), outs);
        };
        if (n.op == Op::AttentionGradQ) {
            return emit_grad(codegen::attention_grad_q_kernels(spec, attention_tiles(true), t_.pointwise.max_groups), {out});
        }
        const AttentionKey key{n.inputs, n.ints, n.data, backward};
        if (const auto it = attention_siblings_.find(key); it != attention_siblings_.end()) {
            s_.values[static_cast<size_t>(out)].view_of = it->second;
            return;
        }
        // out is the first of the pair; the sibling's value: lse / out of the forward, dV / dK.
        const bool first = n.op == Op::Attention || n.op == Op::AttentionGradK;
        const Shape& q = g_.node(n.inputs[0]).shape;
        const Shape sibling_shape = n.op == Op::Attention ? Shape{q[0], q[1], q[2]} : backward ? n.shape : q;
        const DType sibling_dtype = n.op == Op::Attention ? DType::F32 : spec.dtype;
        const int32_t sibling = new_value(sibling_shape, sibling_dtype);
        attention_siblings_[key] = sibling;
        const std::vector<int32_t> pair = first ? std::vector<int32_t>{out, sibling} : std::vector<int32_t>{sibling, out};
        if (!backward) {
            codegen::AttentionForwardKernels f = codegen::attention_forward_kernels(spec, attention_tiles(false), t_.pointwise);
            emit_through_partials(std::move(f.forward), std::move(f.combine), f.partial_elements,
                                  cat({in(0), in(1), in(2)}, start), pair);
        } else {
            emit_grad(codegen::attention_grad_kv_kernels(spec, attention_tiles(true), t_.pointwise.max_groups), pair);
        }
    }

    // The attention tiles, cooperative where the matmuls' cooperative kernels run (the start-up self-test
    // turns both off); the backward's (its products scale dO and dS as the scaled matmuls do) unless
    // MEGANEURA_FAST_GRADIENTS=f32 keeps every gradient product f32.
    codegen::AttentionTiles attention_tiles(bool backward) const {
        codegen::AttentionTiles tiles = t_.attention;
        tiles.coop_subgroup = t_.matmul.coop_subgroup;
        tiles.coop_declined = t_.matmul.coop_declined;
        if (backward && tiles.coop_subgroup && t_.fast_gradients == Tuning::FastGradients::F32) {
            tiles.coop_subgroup = 0;
            tiles.coop_declined = "a gradient, kept f32 (MEGANEURA_FAST_GRADIENTS=f32)";
        }
        return tiles;
    }

    // delta = rowsum(d_out * out), once per (out, d_out) pair.
    int32_t attention_delta(int32_t out, int32_t d_out) {
        const auto [it, fresh] = attention_deltas_.try_emplace({out, d_out}, -1);
        if (!fresh) return it->second;
        const Shape shape = s_.values[static_cast<size_t>(out)].shape;  // a copy: new values may reallocate
        it->second = new_value({shape[0], shape[1], shape[2]}, DType::F32);
        emit(codegen::attention_delta_kernel(s_.values[static_cast<size_t>(out)].dtype, shape[0] * shape[1] * shape[2],
                                             shape[3], t_.pointwise),
             {out, d_out, it->second});
        return it->second;
    }

    const Graph& g_;
    const Tuning& t_;
    Schedule s_;
    FusionPlan fusion_;
    std::map<int32_t, int32_t> epilogue_product_;  // fused root -> the product that stores it (its epilogue)
    std::vector<bool> invariant_;                  // by node, where f16 weights are on (parameter_only_nodes)
    std::vector<bool> split_;                      // by node, where split_forward is (before_piecewise_gradients)
    std::map<int32_t, int32_t> f16_copies_;        // value -> its f16 copy (f16_weight)
    std::map<int32_t, int32_t> octet_copies_;      // f16 copy -> the same stored in octets (weight_in_octets)
    std::vector<std::pair<std::string, std::vector<Batched>>> batches_;  // by name, in order of first use
    std::map<AttentionKey, int32_t> attention_siblings_;
    std::map<std::pair<int32_t, int32_t>, int32_t> attention_deltas_;
};

}  // namespace

Schedule lower(const Graph& graph, const std::vector<int32_t>& roots, const Tuning& tuning) {
    return Lowering(graph, tuning).run(roots);
}

}  // namespace mn::sched
