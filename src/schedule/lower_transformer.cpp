// Lowering's transformer ops (lowering.hpp): the embedding and its gradient, the norms and their gradients,
// RoPE, the cache's slice writes, and attention, whose ops one kernel computes in pairs (forward and its
// log-sum-exp, the keys' and values' gradients).
#include <algorithm>

#include "schedule/lowering.hpp"

namespace mn::sched::detail {

// Embedding, norms, RoPE and the cache write: one kernel each over a [rows, last dim] view
// (two for the embedding gradient: zero, then the per-id sums). False for other ops.
bool Lowering::lower_transformer(const Node& n, int32_t out) {
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
void Lowering::slice_scatter(const Node& n, int32_t out, bool in_place) {
    const auto axis = static_cast<size_t>(n.ints[0]);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < axis; ++d) outer *= n.shape[d];
    for (size_t d = axis + 1; d < n.shape.size(); ++d) inner *= n.shape[d];
    const int64_t dim = n.shape[axis], len = g_.node(n.inputs[1]).shape[axis];
    const int32_t src = value_of(n.inputs[1]), start = value_of(n.inputs[2]);
    if (in_place) return emit(codegen::slice_write_kernel(n.dtype, outer, dim, len, inner, t_.pointwise), {src, start, out});
    emit(codegen::slice_scatter_kernel(n.dtype, outer, dim, len, inner, t_.pointwise), {value_of(n.inputs[0]), src, start, out});
}

namespace {

// A norm node's rows: the last dim (RMSNorm, LayerNorm), or (image, group) pairs (GroupNorm).
codegen::NormSpec norm_spec(const Node& n) {
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

}  // namespace

// Norm node n (or its input gradient) into out, storing through `epilogue` (reading epilogue_inputs) if given.
void Lowering::lower_norm(const Node& n, int32_t out, const codegen::Epilogue* epilogue,
                          const std::vector<int32_t>& epilogue_inputs) {
    codegen::NormSpec spec = norm_spec(n);
    spec.epilogue = epilogue;
    std::vector<int32_t> bind = norm_bindings(n, out, epilogue_inputs);
    // An input the kernel computes (FusionPlan::norm_prologue): its tree's leaves in x's place, its value stored last.
    const int32_t x = fusion_.norm_prologue[static_cast<size_t>(id_of(n))];
    std::optional<FusedTree> tree;
    if (x >= 0) {
        tree = prologue_tree(x);
        spec.prologue = &tree->epilogue;
        bind.erase(bind.begin());
        bind.insert(bind.begin(), tree->bind.begin(), tree->bind.end());
        bind.push_back(stored_here(x));
    }
    emit(codegen::norm_kernel(spec, t_.reduction), std::move(bind));
}

void Lowering::lower_norm_grad(const Node& n, int32_t out, const codegen::Epilogue* epilogue,
                               const std::vector<int32_t>& epilogue_inputs) {
    codegen::NormSpec spec = norm_spec(n);
    spec.epilogue = epilogue;
    std::vector<int32_t> bind = norm_bindings(n, out, epilogue_inputs);
    if (const int32_t up_xhat = up_xhat_output(id_of(n)); up_xhat >= 0) {
        spec.stores_up_xhat = true;
        bind.push_back(up_xhat);
    }
    emit(codegen::norm_grad_kernel(spec, t_.reduction), std::move(bind));
}

// The value of up * xhat that norm gradient `grad`'s kernel stores too (FusionPlan::up_xhat_of), made now; or -1, also
// where the unit norm's kernel ran already (a split sum planned to compute the gradient declined it, so it runs later).
int32_t Lowering::up_xhat_output(int32_t grad) {
    const int32_t root = fusion_.up_xhat_of[static_cast<size_t>(grad)];
    return root < 0 || lowered_[static_cast<size_t>(root)] ? -1 : stored_here(root);
}

std::vector<int32_t> Lowering::norm_bindings(const Node& n, int32_t out,
                                             const std::vector<int32_t>& epilogue_inputs) const {
    std::vector<int32_t> bind;
    for (int32_t i : n.inputs) bind.push_back(value_of(i));
    bind.push_back(out);
    bind.insert(bind.end(), epilogue_inputs.begin(), epilogue_inputs.end());
    return bind;
}

codegen::AttentionSpec Lowering::attention_spec(const Node& n) const {
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
void Lowering::lower_rope(const Node& n, int32_t out, bool merged_out, const Node* cache) {
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

// merged_out: out is the merge of the heads (FusionPlan::heads_merged_into). A gradient that a RoPE alone reads (dQ,
// or dK: FusionPlan::rope_of_gradient) is out, or dK's sibling value, as the RoPE's value (rotated_value), stored
// rotated where the kernel can (AttentionGradKernels::rotated); where it cannot, the gradient goes into a value of its
// own and the RoPE's kernel follows.
void Lowering::lower_attention(int32_t id, int32_t out, bool merged_out) {
    const Node& n = g_.node(id);
    const bool backward = n.op != Op::Attention && n.op != Op::AttentionLse;
    auto in = [&](size_t k) { return value_of(n.inputs[k]); };
    codegen::AttentionSpec spec = attention_spec(n);
    spec.merged_out = merged_out;
    std::vector<int32_t> start;
    if (spec.dynamic_start) start.push_back(in(backward ? 6 : 3));
    auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) { a.insert(a.end(), b.begin(), b.end()); return a; };
    // A backward kernel's inputs (and `scores`, where the dK/dV kernel stores dS), then its outputs (dq, or dk and
    // dv), through f32 partials and their sum where it splits its sweep; then the positions and frequencies of the
    // RoPE whose value it stores.
    auto emit_grad = [&](codegen::AttentionGradKernels k, std::vector<int32_t> outs, int32_t rope, std::vector<int32_t> scores = {}) {
        std::vector<int32_t> inputs = {in(0), in(1), in(2), in(4), in(5), attention_delta(attention_spec(n), in(3), in(4))};
        if (k.rotated) outs.insert(outs.end(), {value_of(g_.node(rope).inputs[1]), value_of(g_.node(rope).inputs[2])});
        emit_through_partials(std::move(k.product), std::move(k.sum), k.partial_elements, cat(cat(inputs, scores), start), outs,
                              k.tile_counters);
    };
    // The RoPE that reads a gradient (-1: none), and its sign for the kernel.
    const auto rope_of = [&](int32_t grad) { return grad >= 0 ? fusion_.rope_of_gradient[static_cast<size_t>(grad)] : -1; };
    const auto rotate = [&](int32_t rope) { spec.rotate_sign = rope < 0 ? 0.0f : g_.node(rope).flag ? -1.0f : 1.0f; };
    // Where the kernel does not rotate: the gradient into a value of its own, for the RoPE's kernel after it.
    const auto unrotated = [&](int32_t grad) {
        spec.rotate_sign = 0;
        spec.merged_out = false;
        return s_.node_value[static_cast<size_t>(grad)] = new_value(g_.node(grad).shape, g_.node(grad).dtype, Storage::Transient, grad);
    };
    const auto rope_after = [&](int32_t rope, int32_t rotated) {
        lower_rope(g_.node(rope), rotated, fusion_.heads_merged_into[static_cast<size_t>(rope)] >= 0);
    };
    const AttentionKey key = attention_key(n);
    if (n.op == Op::AttentionGradQ) {
        const int32_t rope = rope_of(id);
        rotate(rope);
        const auto scores = attention_scores_.find(key);
        if (scores == attention_scores_.end()) {
            codegen::AttentionGradKernels k = codegen::attention_grad_q_kernels(spec, attention_tiles(true), t_.pointwise.max_groups);
            if (rope < 0 || k.rotated) return emit_grad(std::move(k), {out}, rope);
        }
        const int32_t dq = rope < 0 ? out : unrotated(id);
        if (scores != attention_scores_.end()) {
            grad_q_from_scores(spec, scores->second, in(1), dq);
        } else {
            emit_grad(codegen::attention_grad_q_kernels(spec, attention_tiles(true), t_.pointwise.max_groups), {dq}, -1);
        }
        if (rope >= 0) rope_after(rope, out);
        return;
    }
    if (const auto it = attention_siblings_.find(key); it != attention_siblings_.end()) {
        s_.values[static_cast<size_t>(out)].view_of = it->second;
        return;
    }
    // out is the first of the pair; the sibling's value: lse / out of the forward, dV / dK, each of dK and dV in the
    // layout its reader takes (FusionPlan::heads_merged_into), the merged one's shape that of its permute; a rotated dK
    // the RoPE's value.
    const bool first = n.op == Op::Attention || n.op == Op::AttentionGradK;
    const int32_t dk_node = n.op == Op::AttentionGradK ? id : backward ? attention_member(n, Op::AttentionGradK) : -1;
    const int32_t rope = rope_of(dk_node);
    const Shape& q = g_.node(n.inputs[0]).shape;
    Shape sibling_shape = n.op == Op::Attention ? Shape{q[0], q[1], q[2]} : backward ? n.shape : q;
    if (backward) {
        const int32_t other = attention_member(n, first ? Op::AttentionGradV : Op::AttentionGradK);
        const bool sibling_merged = other >= 0 && fusion_.heads_merged_into[static_cast<size_t>(other)] >= 0;
        if (sibling_merged) sibling_shape = {n.shape[0], n.shape[2], n.shape[1], n.shape[3]};
        spec.merged_out = first ? merged_out : sibling_merged;  // dK's layout
        spec.merged_dv = first ? sibling_merged : merged_out;
        if (!first && rope >= 0) spec.merged_out = fusion_.heads_merged_into[static_cast<size_t>(rope)] >= 0;
    }
    const DType sibling_dtype = n.op == Op::Attention ? DType::F32 : spec.dtype;
    const int32_t sibling = !first && rope >= 0 ? rotated_value(rope) : new_value(sibling_shape, sibling_dtype);
    attention_siblings_[key] = sibling;
    std::vector<int32_t> pair = first ? std::vector<int32_t>{out, sibling} : std::vector<int32_t>{sibling, out};
    if (!backward) {
        codegen::AttentionForwardKernels f = codegen::attention_forward_kernels(spec, attention_tiles(false), t_.pointwise);
        emit_through_partials(std::move(f.forward), std::move(f.combine), f.partial_elements,
                              cat({in(0), in(1), in(2)}, start), pair, f.tile_counters);
        return;
    }
    // dQ, lowered after this pair (autodiff appends it last), is a matmul of the dS this kernel stores where
    // grad_q_from_scores allows.
    const codegen::AttentionTiles tiles = attention_tiles(true);
    const bool store_scores = attention_member(n, Op::AttentionGradQ) >= 0 && codegen::grad_q_from_scores(spec, tiles);
    std::vector<int32_t> scores;
    if (store_scores) {
        scores.push_back(new_value({spec.batch * spec.kv_heads, spec.q_len * (spec.q_heads / spec.kv_heads), spec.kv_len}, DType::F32));
        attention_scores_[key] = scores[0];
    }
    rotate(rope);
    codegen::AttentionGradKernels k = codegen::attention_grad_kv_kernels(spec, tiles, t_.pointwise.max_groups, store_scores);
    if (rope < 0 || k.rotated) return emit_grad(std::move(k), pair, rope, scores);
    const int32_t rotated = pair[0];
    pair[0] = unrotated(dk_node);
    emit_grad(codegen::attention_grad_kv_kernels(spec, tiles, t_.pointwise.max_groups, store_scores), pair, -1, scores);
    rope_after(rope, rotated);
}

// The value that RoPE `rope` stores (its own, or where its one reader merges the heads, the permute's), for the
// attention gradient that stores it (FusionPlan::rope_of_gradient); its leaves lowered first.
int32_t Lowering::rotated_value(int32_t rope) {
    const Node& r = g_.node(rope);
    for (int32_t leaf : {r.inputs[1], r.inputs[2]}) {
        if (op_info(g_.node(leaf).op).archetype == Archetype::Leaf) lower(leaf);
    }
    const int32_t permute = fusion_.heads_merged_into[static_cast<size_t>(rope)];
    const int32_t stands = permute >= 0 ? permute : rope;
    const int32_t v = new_value(g_.node(stands).shape, r.dtype, Storage::Transient, stands);
    s_.node_value[static_cast<size_t>(rope)] = v;
    if (permute >= 0) s_.node_value[static_cast<size_t>(permute)] = v;
    return v;
}

Lowering::AttentionKey Lowering::attention_key(const Node& n) {
    return {n.inputs, n.ints, n.data, n.op != Op::Attention && n.op != Op::AttentionLse};
}

int32_t Lowering::attention_member(const Node& n, Op op) const {
    const auto it = attention_members_.find({attention_key(n), op});
    return it == attention_members_.end() ? -1 : it->second;
}

// dQ = scores @ k for each kv head (codegen::grad_q_from_scores: scores holds dS times the scale), as
// [B * Hkv, G * Tq, D], which is dQ's [B, Hq, Tq, D]; where out merges the heads ([B, Tq, Hq, D]: the matmul's
// output rows are the heads'), the product stores its rows there (MatmulSpec::heads_merged). The product is f32, as
// the attention's gradients are.
void Lowering::grad_q_from_scores(const codegen::AttentionSpec& s, int32_t scores, int32_t k, int32_t out) {
    const int64_t heads = s.batch * s.kv_heads, rows = s.q_len * (s.q_heads / s.kv_heads);
    codegen::MatmulSpec spec{.dtype = s.dtype, .m = rows, .n = s.head_dim, .k = s.kv_len, .batch = {heads},
                             .a_batch_strides = {rows * s.kv_len}, .b_batch_strides = {s.kv_len * s.head_dim}};
    if (s.merged_out) spec.heads_merged = s.q_heads, spec.heads_seq = s.q_len;
    codegen::MatmulTuning tuning = t_.matmul;
    tuning.coop_subgroup = 0;
    tuning.coop_declined = "the gradient of an f32 attention";
    emit_product(codegen::matmul_kernels(spec, tuning), scores, k, {out}, {});
}

// The attention tiles, cooperative where the matmuls' cooperative kernels run (the start-up self-test
// turns both off); the backward's (its products scale dO and dS as the scaled matmuls do) unless
// MEGANEURA_FAST_GRADIENTS=f32 keeps every gradient product f32.
codegen::AttentionTiles Lowering::attention_tiles(bool backward) const {
    codegen::AttentionTiles tiles = t_.attention;
    tiles.coop_subgroup = t_.matmul.coop_subgroup;
    tiles.coop_declined = t_.matmul.coop_declined;
    if (backward && tiles.coop_subgroup && t_.fast_gradients == Tuning::FastGradients::F32) {
        tiles.coop_subgroup = 0;
        tiles.coop_declined = "a gradient, kept f32 (MEGANEURA_FAST_GRADIENTS=f32)";
    }
    return tiles;
}

// delta = rowsum(d_out * out), once per (out, d_out) pair, for the backward of `spec`; out is read with its heads
// merged where the forward stored it so (its value stands for the merge's permute, FusionPlan::heads_merged_into).
// (A split sum may have stored it beside d_out: FusionPlan::sum_delta.)
int32_t Lowering::attention_delta(codegen::AttentionSpec spec, int32_t out, int32_t d_out) {
    const auto [it, fresh] = attention_deltas_.try_emplace({out, d_out}, -1);
    if (!fresh) return it->second;
    spec.merged_out = heads_merged(out);
    it->second = new_value({spec.batch, spec.q_heads, spec.q_len}, DType::F32);
    emit(codegen::attention_delta_kernel(spec, t_.pointwise), {out, d_out, it->second});
    return it->second;
}

bool Lowering::heads_merged(int32_t out) const {
    return value(out).node >= 0 && g_.node(value(out).node).op == Op::Permute;
}

}  // namespace mn::sched::detail
