// Lowering's products (lowering.hpp): matmuls (a GEMV of one row may also compute its A's RMSNorm and a
// second product) and the three convolutions, through f32 partials where the kernels split the reduction.
// Where Tuning::f16_weights allows, an f32 operand that depends on parameters alone is cast once to an f16
// copy that the products read (a convolution's weight stored again in octets).
#include "schedule/lowering.hpp"

namespace mn::sched::detail {

// Matmul or convolution node `id` into outs (a matmul's column slices, FusionPlan::column_slices, or its
// one value), storing through `epilogue` (reading epilogue_inputs) if given.
void Lowering::lower_product(int32_t id, const std::vector<int32_t>& outs, const codegen::Epilogue* epilogue,
                             const std::vector<int32_t>& epilogue_inputs) {
    const Node& n = g_.node(id);
    const int32_t a = value_of(n.inputs[0]), b = value_of(n.inputs[1]);
    if (op_info(n.op).archetype != Archetype::MatMul) {
        return lower_conv(n, product_tuning(g_, id, t_, split_), a, b, outs[0], epilogue, epilogue_inputs);
    }
    const int32_t norm = g_.node(n.inputs[0]).op == Op::Reshape ? g_.node(n.inputs[0]).inputs[0] : n.inputs[0];
    const int32_t second = fusion_.epilogue_pair[static_cast<size_t>(id)];
    std::vector<int32_t> extra = epilogue_inputs;  // then the norm's weight, then the second product's W
    ProductExtras extras{.b2 = second >= 0, .b2_node = second >= 0 ? g_.node(second).inputs[1] : -1,
                         .a2_node = second >= 0 && g_.node(second).inputs[0] != n.inputs[0] ? g_.node(second).inputs[0] : -1,
                         .sum_norm = fusion_.sum_norm[static_cast<size_t>(id)], .sum_delta = fusion_.sum_delta[static_cast<size_t>(id)],
                         .sum_norm_grad = fusion_.sum_norm_grad[static_cast<size_t>(id)]};
    int32_t row = a;
    if (fusion_.norm_in_products[static_cast<size_t>(norm)]) {  // A reads the norm's input row, in A's shape
        const Node& rms = g_.node(norm);
        row = new_value(g_.node(n.inputs[0]).shape, n.dtype);
        s_.values[static_cast<size_t>(row)].view_of = value_of(rms.inputs[0]);
        extra.push_back(value_of(rms.inputs[1]));
        extras.a_rms_eps = rms.data[0];
    }
    if (second >= 0) extra.push_back(value_of(g_.node(second).inputs[1]));
    if (extras.a2_node >= 0) extra.push_back(value_of(extras.a2_node));
    lower_matmul(n, product_tuning(g_, id, t_, split_), row, b, outs, epilogue, extra, extras);
}

// Operand `node` (lowered to value v) of a product, as an f16 copy where Tuning::f16_weights allows
// (an f32 operand that depends on parameters alone), cast once per value however many products read it
// (a tied embedding and lm head); -1 where not.
int32_t Lowering::f16_weight(int32_t node, int32_t v) {
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
int32_t Lowering::weight_in_octets(int32_t w16) {
    auto [it, fresh] = octet_copies_.try_emplace(w16, -1);
    if (fresh) {
        const Shape w = value(w16).shape;  // a copy: new_value may reallocate
        const int64_t kk = w[2] * w[3];
        const Shape dims = {w[0], w[1] / 8, w[2], w[3], 8};
        it->second = new_value(dims, DType::F16);
        copy(w16, it->second,
             {.dims = dims, .in_strides = {w[1] * kk, 8 * kk, w[3], 1, kk}, .out_strides = contiguous_strides(dims)});
    }
    return it->second;
}

// The norm's weight and the second W (gemv) are the last of epilogue_inputs.
codegen::MatmulSpec Lowering::matmul_spec(const Node& n, const Shape& sa, const Shape& sb) const {
    const Shape batch(n.shape.begin(), n.shape.end() - 2);
    auto batch_strides = [&](const Shape& s) {
        const Shape sb_(s.begin(), s.end() - 2);
        auto st = broadcast_strides(sb_, batch);
        const int64_t mat = s[s.size() - 1] * s[s.size() - 2];
        for (auto& v : st) v *= mat;
        return st;
    };
    return {.dtype = n.dtype, .m = n.shape[n.shape.size() - 2], .n = n.shape.back(), .k = n.ints[0] ? sa[sa.size() - 2] : sa.back(),
            .trans_a = n.ints[0] != 0, .trans_b = n.ints[1] != 0, .batch = batch, .a_batch_strides = batch_strides(sa),
            .b_batch_strides = batch_strides(sb)};
}

ProductSplit Lowering::product_split(int32_t id) {
    const Node& n = g_.node(id);
    if (n.op != Op::MatMul) return {};
    auto [it, fresh] = product_splits_.try_emplace(id);
    if (fresh) {  // the plan asks several times: the product's kernels are built once
        const codegen::MatmulSpec spec = matmul_spec(n, g_.node(n.inputs[0]).shape, g_.node(n.inputs[1]).shape);
        const codegen::MatmulKernels k = codegen::matmul_kernels(spec, product_tuning(g_, id, t_, split_));
        it->second = {.splits_k = k.partial_elements > 0, .summed_tile_columns = k.tile_columns};
    }
    return it->second;
}

void Lowering::lower_matmul(const Node& n, const codegen::MatmulTuning& tuning, int32_t a, int32_t b,
                            const std::vector<int32_t>& outs, const codegen::Epilogue* epilogue,
                            const std::vector<int32_t>& epilogue_inputs, const ProductExtras& extras) {
    codegen::MatmulSpec spec = matmul_spec(n, s_.values[static_cast<size_t>(a)].shape, s_.values[static_cast<size_t>(b)].shape);
    spec.epilogue = epilogue;
    spec.a_rms_eps = extras.a_rms_eps;
    spec.b2 = extras.b2;
    spec.a2 = extras.a2_node >= 0;
    // A norm in the sum, through its epilogue where it has one (its root's tree: its leaves come before this product,
    // the plan's condition).
    const int32_t norm_root = extras.sum_norm >= 0 ? fusion_.epilogue_of[static_cast<size_t>(extras.sum_norm)] : -1;
    std::optional<FusedTree> norm_tree;
    if (extras.sum_norm >= 0) {
        spec.sum_norm_eps = g_.node(extras.sum_norm).data[0];
        spec.sum_layer_norm = g_.node(extras.sum_norm).op == Op::LayerNorm;
        if (norm_root >= 0) {
            const int32_t norm = extras.sum_norm;
            if (fusion_.epilogue_keeps[static_cast<size_t>(norm)] && value_of(norm) < 0) {  // stored by the epilogue too
                s_.node_value[static_cast<size_t>(norm)] = new_value(g_.node(norm).shape, g_.node(norm).dtype, Storage::Transient, norm);
            }
            norm_tree = fused_tree(norm_root, g_.node(norm_root).dtype);
            spec.sum_norm_epilogue = &norm_tree->epilogue;
        }
    }
    // A norm's backward in the sum: its input gradient through the norm's epilogue (dx_tree: its root's tree, whose
    // leaves come before this product, the plan's condition).
    const int32_t norm_grad = extras.sum_norm_grad;
    const int32_t dx_root = norm_grad >= 0 ? fusion_.epilogue_of[static_cast<size_t>(norm_grad)] : -1;
    std::optional<FusedTree> dx_tree;
    if (norm_grad >= 0) {
        const Node& ng = g_.node(norm_grad);
        const int32_t up_xhat = fusion_.up_xhat_of[static_cast<size_t>(norm_grad)];
        spec.sum_norm_grad = {.on = true, .layer = ng.op == Op::LayerNormGrad, .eps = ng.data[0],
                              .stores_up_xhat = up_xhat >= 0 && !lowered_[static_cast<size_t>(up_xhat)]};
        if (dx_root >= 0) {
            dx_tree = fused_tree(dx_root, g_.node(dx_root).dtype);
            if (!dx_tree->extra.empty()) throw Error("schedule: a norm gradient's epilogue in a split sum stores more than its root");
            spec.sum_norm_grad.epilogue = &dx_tree->epilogue;
        }
    }
    const int32_t attention_out = extras.sum_delta >= 0 ? g_.node(extras.sum_delta).inputs[3] : -1;
    if (attention_out >= 0) {
        lower(attention_out);  // the forward's, before this product (the plan's condition)
        const codegen::AttentionSpec a = attention_spec(g_.node(extras.sum_delta));
        spec.sum_delta = {.heads = a.q_heads, .seq = a.q_len, .head_dim = a.head_dim, .o_merged = heads_merged(value_of(attention_out))};
    }
    // An epilogue's root may be of another rank than the product (a reshape between them), and is no part.
    std::vector<int32_t> extra;  // the parts' positions and frequencies, and start (column_part), then epilogue_inputs
    int32_t start = -1;
    const auto stands_for = [&](Op op) { return value(outs[0]).node >= 0 && g_.node(value(outs[0]).node).op == op; };
    if (outs.size() > 1 || stands_for(Op::Permute) || stands_for(Op::Rope)) {
        for (int32_t o : outs) spec.column_parts.push_back(column_part(o, extra, start));
    }
    if (start >= 0) extra.push_back(start);
    extra.insert(extra.end(), epilogue_inputs.begin(), epilogue_inputs.end());
    // A second A (bound last) is read as A is: f32 (no f16 copy of A then).
    if (const int32_t a16 = spec.a2 ? -1 : f16_weight(n.inputs[0], a); a16 >= 0) a = a16, spec.a_f16 = true;
    // The second W (bound last, or before a second A) is read in B's dtype: both f16 or neither.
    const size_t w2_at = extra.size() - (spec.a2 ? 2 : 1);
    const int32_t b16 = f16_weight(n.inputs[1], b);
    const int32_t w2_16 = b16 >= 0 && extras.b2 ? f16_weight(extras.b2_node, extra[w2_at]) : -1;
    if (b16 >= 0 && (!extras.b2 || w2_16 >= 0)) {
        b = b16, spec.b_f16 = true;
        if (extras.b2) extra[w2_at] = w2_16;
    }
    codegen::MatmulKernels kernels = codegen::matmul_kernels(spec, tuning);
    // Where the sum stores the norm's input gradient (else it is lowered in its turn): x, w, dx and dx's epilogue's
    // inputs, bound before a pair's second W (and A), which emit_product_pair takes from the end.
    if (kernels.sum_stores_norm_grad) {
        const Node& ng = g_.node(norm_grad);
        const int32_t stands = dx_root >= 0 ? dx_root : norm_grad;  // the value dx is
        const int32_t dx = stored_here(stands);
        lowered_[static_cast<size_t>(norm_grad)] = true;
        std::vector<int32_t> reads = {value_now(ng.inputs[0]), value_now(ng.inputs[1]), dx};
        if (dx_tree) reads.insert(reads.end(), dx_tree->bind.begin(), dx_tree->bind.end());
        if (spec.sum_norm_grad.stores_up_xhat) reads.push_back(up_xhat_output(norm_grad));  // before its unit norm
        const auto tail = static_cast<std::ptrdiff_t>((extras.b2 ? 1 : 0) + (spec.a2 ? 1 : 0));
        extra.insert(extra.end() - tail, reads.begin(), reads.end());
    }
    if (extras.b2 && kernels.sum) return emit_product_pair(std::move(kernels), a, b, outs, std::move(extra), spec.a2);
    // Where the sum stores the norm (else, no split or rows it cannot hold, the norm is lowered in its turn).
    if (kernels.sum_stores_norm) {
        const Node& norm = g_.node(extras.sum_norm);
        const int32_t stands = norm_root >= 0 ? norm_root : extras.sum_norm;  // the value y is
        const int32_t y = stored_here(stands);
        lowered_[static_cast<size_t>(extras.sum_norm)] = true;
        for (size_t i = 1; i < norm.inputs.size(); ++i) {  // the weight (and bias): leaves (the plan's condition),
            lower(norm.inputs[i]);                          // which a model may declare after the product
            extra.push_back(value_of(norm.inputs[i]));
        }
        extra.push_back(y);
        if (norm_tree) {  // its epilogue's inputs, then what it stores besides its root
            extra.insert(extra.end(), norm_tree->bind.begin(), norm_tree->bind.end());
            extra.insert(extra.end(), norm_tree->extra.begin(), norm_tree->extra.end());
        }
    }
    // Where the sum stores the attention backward's delta (else, no split, it is lowered with the backward).
    if (kernels.sum_stores_delta) {
        const codegen::MatmulSpec::SumDelta& d = spec.sum_delta;
        const int32_t delta = new_value({spec.m / d.seq, d.heads, d.seq}, DType::F32);
        attention_deltas_[{value_of(attention_out), outs[0]}] = delta;
        extra.insert(extra.end(), {value_of(attention_out), delta});
    }
    emit_product(std::move(kernels), a, b, outs, extra);
}

// The column part that `out`, one of a product's outputs (product_output), is: [rows, width]; a split of heads
// [batch, heads, seq, head_dim], the value of the permute it stands for; a RoPE's rows, or a cache's at its start,
// [1, heads, 1 (or the cache's rows), head_dim], whose positions and frequencies it sets in `rope_inputs` (empty or
// the same for every part) and start in `start`.
codegen::ColumnPart Lowering::column_part(int32_t out, std::vector<int32_t>& rope_inputs, int32_t& start) const {
    const Shape& s = value(out).shape;
    const Node* n = value(out).node >= 0 ? &g_.node(value(out).node) : nullptr;
    if (!n || (n->op != Op::Permute && n->op != Op::Rope && n->op != Op::SliceScatter)) return {.width = s[1]};
    codegen::ColumnPart part{.width = s[1] * s[3], .head_dim = s[3], .seq = s[2]};
    if (n->op == Op::SliceScatter) {
        part.seq = 1, part.cache_rows = s[2];
        start = value_of(n->inputs[2]);
        n = &g_.node(n->inputs[1]);  // the rows: a RoPE's, or a view of the product's
    }
    if (n->op == Op::Rope) {
        part.rope = true, part.rope_inverse = n->flag;
        rope_inputs = {value_of(n->inputs[1]), value_of(n->inputs[2])};
    }
    return part;
}

// A pair of products of several rows of a (MatmulSpec::b2 where K is split; W2 the last of epilogue_inputs) whose
// pieces a dispatch sums (where the product's last piece does, MatmulKernels::tile_counters, its kernel reads W2
// itself: emit_product): the one product kernel over b and over W2, each into its own partials (one level: they are
// independent), and one split sum of both that stores the epilogue of the two (a SwiGLU's silu(gate) * up), where
// each product had a sum of its own. With second_a, the second product reads its own A (the last of epilogue_inputs,
// after W2: MatmulSpec::a2), as a sum of two products does.
void Lowering::emit_product_pair(codegen::MatmulKernels kernels, int32_t a, int32_t b, const std::vector<int32_t>& outs,
                                 std::vector<int32_t> epilogue_inputs, bool second_a) {
    const int32_t a2 = second_a ? epilogue_inputs.back() : a;  // a sum of two products: the second's own A, last
    if (second_a) epilogue_inputs.pop_back();
    const int32_t w2 = epilogue_inputs.back();
    epilogue_inputs.pop_back();
    const int32_t partial = new_value({kernels.partial_elements}, DType::F32);
    const int32_t partial2 = new_value({kernels.partial_elements}, DType::F32);
    emit(kernels.product, {a, b, partial});
    emit(std::move(kernels.product), {a2, w2, partial2});
    std::vector<int32_t> reads = {partial};
    reads.insert(reads.end(), outs.begin(), outs.end());
    reads.insert(reads.end(), epilogue_inputs.begin(), epilogue_inputs.end());
    reads.push_back(partial2);
    emit(std::move(*kernels.sum), std::move(reads));
}

// A matmul or convolution product of a and b into outs (its value, or its column parts), through f32
// partials and their sum where the kernels split the reduction (the product's last piece of each tile, or a
// dispatch of its own); the epilogue's inputs are bound after the storing kernel's outputs.
void Lowering::emit_product(codegen::MatmulKernels kernels, int32_t a, int32_t b, const std::vector<int32_t>& outs,
                            const std::vector<int32_t>& epilogue_inputs) {
    std::vector<int32_t> stores = outs;
    stores.insert(stores.end(), epilogue_inputs.begin(), epilogue_inputs.end());
    const int32_t node = value(outs.at(0)).node;
    const bool summed_as_read = stores.size() == 1 && node >= 0 && fusion_.summed_as_read[static_cast<size_t>(node)];
    emit_through_partials(std::move(kernels.product), std::move(kernels.sum), kernels.partial_elements, {a, b}, stores,
                          kernels.tile_counters, summed_as_read);
}

// Bindings in the node's input order, then the output: see codegen::ConvSpec.
void Lowering::lower_conv(const Node& n, const codegen::MatmulTuning& tuning, int32_t a, int32_t b, int32_t out,
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

}  // namespace mn::sched::detail
