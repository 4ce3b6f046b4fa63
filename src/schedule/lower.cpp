// Lowering's core (lowering.hpp): run() plans the fusion and lowers every live node in graph order, the
// assignments' copies and the batched updates last. lower(id) reads the fusion plan to decide whether a node is
// stored, where (a view, in place, a product's column part, the heads' merged or split layout) and by which
// kernel: its family's (lower_pointwise.cpp, lower_products.cpp, lower_transformer.cpp), or for softmax, the
// losses, the data movement and pooling, one written here. Here too: the values and the steps that compute them.
#include <set>

#include "schedule/lowering.hpp"

namespace mn::sched {

namespace detail {

Schedule Lowering::run(const std::vector<int32_t>& roots) {
    std::vector<bool> live(g_.nodes().size(), false);
    for (int32_t r : roots) live[static_cast<size_t>(r)] = true;
    for (size_t i = live.size(); i-- > 0;) {
        if (!live[i]) continue;
        for (int32_t in : g_.nodes()[i].inputs) live[static_cast<size_t>(in)] = true;
    }
    for (size_t i = 0; i < live.size(); ++i) {
        const Node& n = g_.nodes()[i];
        if (live[i] && op_info(n.op).archetype == Archetype::Attention) {
            attention_members_.try_emplace({attention_key(n), n.op}, static_cast<int32_t>(i));
        }
    }
    if (t_.split_forward && g_.has_gradients()) split_ = before_piecewise_gradients(g_);
    fusion_ = plan_fusion(
        g_, live, roots, t_.max_fused_inputs,
        [&](int32_t product) {
            using U = Tuning::UpdatesInProducts;
            return t_.updates_in_products == U::All || (t_.updates_in_products == U::SplitSums && product_split(product).splits_k);
        },
        [&](int32_t product) { return product_split(product); });
    // No f16 weights where there are gradients: the forward's products may be split (f32 operands).
    if (t_.f16_weights && !g_.has_gradients()) invariant_ = parameter_only_nodes(g_);
    written_in_place_.assign(live.size(), false);
    for (int32_t target : fusion_.in_place_of) {
        if (target >= 0) written_in_place_[static_cast<size_t>(target)] = true;
    }
    s_.node_value.assign(live.size(), -1);
    lowered_.assign(live.size(), false);
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
    emit_held_sums(true);  // before the updates that read them
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

int32_t Lowering::new_value(Shape shape, DType dtype, Storage storage, int32_t node) {
    Value v{.shape = std::move(shape), .dtype = dtype, .storage = storage, .node = node};
    v.pinned = storage != Storage::Transient;
    s_.values.push_back(std::move(v));
    return static_cast<int32_t>(s_.values.size() - 1);
}

// A transient value for `node` that the kernel being lowered stores besides its own: node's value from now on, and
// node lowered.
int32_t Lowering::stored_here(int32_t node) {
    const int32_t v = new_value(g_.node(node).shape, g_.node(node).dtype, Storage::Transient, node);
    s_.node_value[static_cast<size_t>(node)] = v;
    lowered_[static_cast<size_t>(node)] = true;
    return v;
}

// A value written into `target`'s bytes (an update in place, an assignment's copy) that stands for
// node `id`, so that MEGANEURA_CHECK judges the write as that node's.
int32_t Lowering::view_for(int32_t id, int32_t target) {
    const int32_t v = new_value(value(target).shape, value(target).dtype, Storage::Transient, id);
    s_.values[static_cast<size_t>(v)].view_of = target;
    return v;
}

// The value a product stores for `node` (itself, or one of its column slices): the node's own; where the
// product stores the split of the heads, the permute's (FusionPlan::heads_split_stored; neither the node nor
// its reshapes get a value); where its GEMV rotates the slice, the RoPE's, or writes it into a cache, the
// cache write's, a view of the cache (FusionPlan::rope_in_gemv, cache_in_gemv).
int32_t Lowering::product_output(int32_t node, DType dtype) {
    const int32_t rope = fusion_.rope_in_gemv[static_cast<size_t>(node)];
    const int32_t scatter = fusion_.cache_in_gemv[static_cast<size_t>(node)];
    // The leaves the GEMV reads for them, which a model may declare after the product (the others come before it).
    std::vector<int32_t> leaves;
    if (rope >= 0) leaves = {g_.node(rope).inputs[1], g_.node(rope).inputs[2]};
    if (scatter >= 0) leaves.insert(leaves.end(), {fusion_.in_place_of[static_cast<size_t>(scatter)], g_.node(scatter).inputs[2]});
    for (int32_t leaf : leaves) {
        if (op_info(g_.node(leaf).op).archetype == Archetype::Leaf) lower(leaf);
    }
    if (scatter >= 0) {
        const int32_t v = view_for(scatter, value_of(fusion_.in_place_of[static_cast<size_t>(scatter)]));
        s_.node_value[static_cast<size_t>(scatter)] = v;
        return v;
    }
    const int32_t permute = fusion_.heads_split_stored[static_cast<size_t>(node)];
    const int32_t stored = permute >= 0 ? permute : rope >= 0 ? rope : node;
    const int32_t v = new_value(g_.node(stored).shape, dtype, Storage::Transient, stored);
    s_.node_value[static_cast<size_t>(stored)] = v;
    return v;
}

void Lowering::emit(codegen::KernelSource k, std::vector<int32_t> values) {
    s_.steps.push_back({std::move(k), std::move(values)});
    emit_held_sums(false);
}

// A kernel reading `inputs` and storing `outs`, or where its work is split (`finish` set), storing f32
// partials (partial_elements) that `finish` reads and turns into `outs`: split-K's sum, a split
// reduction's, the attention's combine of key chunks and its backward's sums. With tile_counters, the kernel
// finishes its work itself (the workgroup that stores a tile's last piece): it binds the partials, the counters
// and `outs`. With summed_as_read (a plain split sum of one output), `finish` is not run: the output's readers read
// the partials as its pieces (pieces_of_, FusionPlan::summed_as_read).
void Lowering::emit_through_partials(codegen::KernelSource first, std::optional<codegen::KernelSource> finish,
                                     int64_t partial_elements, std::vector<int32_t> inputs,
                                     const std::vector<int32_t>& outs, int64_t tile_counters, bool summed_as_read) {
    if (tile_counters) {
        inputs.push_back(new_value({partial_elements}, DType::F32));
        inputs.push_back(new_value({tile_counters}, DType::I32, Storage::Counters));
    }
    if (!finish) {
        inputs.insert(inputs.end(), outs.begin(), outs.end());
        return emit(std::move(first), std::move(inputs));
    }
    const int32_t partial = new_value({partial_elements}, DType::F32);
    inputs.push_back(partial);
    emit(std::move(first), std::move(inputs));
    if (summed_as_read) {
        const int64_t elements = numel(value(outs.at(0)).shape);
        pieces_of_[outs[0]] = {partial, {codegen::checked_u32(partial_elements / elements, "pieces"), elements}};
        return;
    }
    std::vector<int32_t> reads = {partial};
    reads.insert(reads.end(), outs.begin(), outs.end());
    emit(std::move(*finish), std::move(reads));
}

// A concat of leaves along their first axis (optimize/'s stacked weights and biases of sibling products) whose bytes
// can lie one after another: each becomes a part of the concat's value (Value::part_at), which is then no copy, in a
// training step as in inference. Each a parameter or constant with bytes of its own so far (no part of another, nor
// twice in this one), every part starting at a multiple of the binding alignment. The stack is a parameter where one
// of its parts is, and pinned as leaves are.
bool Lowering::stack_leaves(const Node& n, int32_t out) {
    if (n.ints[0] != 0) return false;
    uint64_t at = 0;
    bool parameters = false;
    std::set<int32_t> parts;
    for (int32_t in : n.inputs) {
        const Op op = g_.node(in).op;
        const int32_t v = value_of(in);
        if ((op != Op::Parameter && op != Op::Constant) || v < 0 || value(v).view_of >= 0 || !parts.insert(v).second ||
            at % t_.binding_alignment) {
            return false;
        }
        parameters = parameters || op == Op::Parameter;
        at += value(v).bytes();
    }
    Value& stack = s_.values[static_cast<size_t>(out)];
    stack.storage = parameters ? Storage::Parameter : Storage::Constant;
    stack.pinned = true;
    at = 0;
    for (int32_t in : n.inputs) {
        Value& part = s_.values[static_cast<size_t>(value_of(in))];
        part.view_of = out;
        part.part_at = static_cast<int64_t>(at);
        at += part.bytes();
    }
    return true;
}

void Lowering::lower(int32_t id) {
    if (lowered_[static_cast<size_t>(id)]) return;
    lowered_[static_cast<size_t>(id)] = true;
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
    if (fusion_.reduced_in[static_cast<size_t>(id)] >= 0) return;  // evaluated by its reduction (or stored by it)
    if (fusion_.prologue_of_norm[static_cast<size_t>(id)] >= 0) return;  // computed and stored by its norm's kernel
    if (fusion_.in_gemv[static_cast<size_t>(id)] >= 0) return;  // its product's GEMV stored it (product_output)
    if (fusion_.epilogue_of[static_cast<size_t>(id)] >= 0) {  // lowered in its epilogue's place
        if (fusion_.epilogue_keeps[static_cast<size_t>(id)] && value_of(id) < 0) {  // which stores its value too
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
    if (fusion_.norm_in_sum[static_cast<size_t>(id)] >= 0 && value_of(id) >= 0) return;  // its product's split sum stored it
    if (n.op == Op::Reshape && fusion_.heads_split_stored[static_cast<size_t>(id)] >= 0) return;  // see below
    if (n.op == Op::Reshape && fusion_.read_strided[static_cast<size_t>(id)]) return;  // its concatenation reads it
    if (n.op == Op::Reshape) {
        const int32_t v = new_value(n.shape, n.dtype, Storage::Transient, id);
        s_.values[static_cast<size_t>(v)].view_of = in(0);
        s_.node_value[static_cast<size_t>(id)] = v;
        return;
    }
    const bool stored = fusion_.stored_in[static_cast<size_t>(id)] >= 0;  // by a later kernel
    if (n.op == Op::Rope && value_of(id) >= 0) return;  // its attention gradient's kernel stored it (rope_of_gradient)
    if (const int32_t rope = fusion_.rope_of_gradient[static_cast<size_t>(id)]; rope >= 0) {
        // into the RoPE's value; dK's is there already where its dV was lowered first
        if (value_of(rope) < 0) lower_attention(id, rotated_value(rope), fusion_.heads_merged_into[static_cast<size_t>(rope)] >= 0);
        return;
    }
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
    if (fusion_.read_strided[static_cast<size_t>(id)]) return;  // its readers read its input
    if (fusion_.heads_split_by[static_cast<size_t>(id)] >= 0) return;  // its rope reads its input
    if (const int32_t permute = fusion_.heads_merged_into[static_cast<size_t>(id)]; permute >= 0) {
        const int32_t v = new_value(g_.node(permute).shape, n.dtype, Storage::Transient, permute);
        s_.node_value[static_cast<size_t>(id)] = s_.node_value[static_cast<size_t>(permute)] = v;
        return n.op == Op::Rope ? lower_rope(n, v, true) : lower_attention(id, v, true);
    }
    if (n.op == Op::Slice && !fusion_.column_slices[static_cast<size_t>(n.inputs[0])].empty()) return;  // its product stored it
    if (const auto& slices = fusion_.column_slices[static_cast<size_t>(id)]; !slices.empty()) {
        std::vector<int32_t> outs;  // the product's own value is never stored
        for (int32_t slice : slices) outs.push_back(product_output(slice, n.dtype));
        if (n.op == Op::MatMul) return lower_product(id, outs);
        return fused_pointwise(id, outs[0], outs);  // a root its matmul stores, through its epilogue
    }
    if (n.op == Op::MatMul && (fusion_.heads_split_stored[static_cast<size_t>(id)] >= 0 || fusion_.rope_in_gemv[static_cast<size_t>(id)] >= 0)) {
        return lower_product(id, {product_output(id, n.dtype)});  // its heads split, or rotated (its RoPE's value)
    }
    if (fusion_.heads_split_stored[static_cast<size_t>(id)] >= 0 && op_info(n.op).archetype == Archetype::Pointwise) {
        return fused_pointwise(id, product_output(id, n.dtype));  // its matmul's epilogue stores it split into heads
    }
    if (stored && value_of(id) >= 0) return;  // a co-root its kernel, earlier, stored
    if (const uint8_t batch = fusion_.leaf_batch[static_cast<size_t>(id)]) return lower_leaf_batch(batch);
    const int32_t out = new_value(n.shape, n.dtype, Storage::Transient, id);
    s_.node_value[static_cast<size_t>(id)] = out;
    if (stored) return;
    if (lower_transformer(n, out)) return;
    switch (op_info(n.op).archetype) {
        case Archetype::Pointwise: return fused_pointwise(id, out);
        case Archetype::MatMul: case Archetype::Conv: return lower_product(id, {out});
        case Archetype::Attention: return lower_attention(id, out);
        case Archetype::Leaf: case Archetype::Reduction: case Archetype::DataMovement: break;
    }
    // A copy (new values may reallocate); a reduction's input may be no value (FusionPlan::reduced_in).
    const Shape x = in(0) >= 0 ? shape_of(in(0)) : g_.node(n.inputs[0]).shape;
    switch (n.op) {
        case Op::Sum: case Op::Mean: case Op::Max: return lower_reduce(id, out);
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
            const int32_t row_loss = new_value({x[0]}, DType::F32);
            const int32_t counter = new_value({1}, DType::I32, Storage::Counters);
            emit(codegen::cross_entropy_kernel(n.dtype, x[0], x[1], n.ints[0], t_.reduction),
                 {in(0), in(1), row_loss, counter, out});
            return;
        }
        case Op::CrossEntropyGrad: {
            const int32_t count = new_value({}, DType::F32);
            emit(codegen::cross_entropy_count_kernel(x[0], n.ints[0], t_.reduction), {in(1), count});
            emit(codegen::cross_entropy_grad_kernel(n.dtype, x[0], x[1], n.ints[0], t_.reduction),
                 {in(0), in(1), in(2), count, out});
            return;
        }
        case Op::MseLoss: {
            // The mean of (prediction - target)^2 evaluated as the reduction reads its operands: one kernel (and its
            // pieces' sum), where the difference and its square took a kernel and a level each.
            FusedTree squares{.epilogue = {.tree = {.out_dtype = n.dtype, .out_shape = x}, .product = -1},
                              .bind = {in(0), in(1)}};
            codegen::PointwiseSpec& tree = squares.epilogue.tree;
            for (int32_t k = 0; k < 2; ++k) {
                add_leaf(tree, in(static_cast<size_t>(k)));
                tree.program.push_back({.op = Op::Input, .a = k, .dtype = n.dtype});
            }
            tree.program.push_back({.op = Op::Sub, .a = 0, .b = 1, .dtype = n.dtype});
            tree.program.push_back({.op = Op::Mul, .a = 2, .b = 2, .dtype = n.dtype});
            reduce(codegen::ReduceMode::Mean, in(0), out, 1, numel(x), 1, 1, &squares);
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
            if (stack_leaves(n, out)) return;
            const auto axis = static_cast<size_t>(n.ints[0]);
            // One kernel, one level (a U-Net's skip connection: its copies of the two pieces took two levels, the
            // second waiting for the first's writes to the same tensor); a copy a piece past the storage buffers a
            // kernel may bind.
            if (concat_in_one_kernel(n.inputs.size(), t_.max_fused_inputs)) {
                std::vector<codegen::ConcatPiece> pieces;
                std::vector<int32_t> bind;
                for (size_t k = 0; k < n.inputs.size(); ++k) {
                    const Node& piece = g_.node(n.inputs[k]);
                    pieces.push_back({.length = piece.shape[axis]});
                    if (!fusion_.read_strided[static_cast<size_t>(n.inputs[k])]) {
                        bind.push_back(in(k));
                        continue;
                    }
                    // An expand (or its reshape) no kernel stores: its input, read through the expand's strides.
                    const Node& expand = piece.op == Op::Reshape ? g_.node(piece.inputs[0]) : piece;
                    const int32_t v = value_of(expand.inputs[0]);
                    pieces.back().dims = expand.shape;
                    pieces.back().strides = broadcast_strides(value(v).shape, expand.shape);
                    bind.push_back(v);
                }
                bind.push_back(out);
                emit(codegen::concat_kernel(n.dtype, n.shape, axis, pieces, t_.pointwise), std::move(bind));
                return;
            }
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

}  // namespace detail

Schedule lower(const Graph& graph, const std::vector<int32_t>& roots, const Tuning& tuning) {
    return detail::Lowering(graph, tuning).run(roots);
}

}  // namespace mn::sched
