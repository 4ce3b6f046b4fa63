// The fusion planner's decisions about the layouts of a transformer's tensors (fusion_planner.hpp, fusion.hpp): the
// split of the heads read in place or stored by its product, their merge stored by the attention or RoPE before it,
// RMSNorms computed by the products or split sums that read them, q's and k's RoPEs and cache writes in their
// product's GEMV or split sum, and the RoPE's gradient stored by the attention gradient.
#include <algorithm>
#include <set>

#include "schedule/fusion_planner.hpp"

namespace mn::sched::detail {

// See fusion.hpp: dQ or dK that a RoPE alone reads, stored rotated by its kernel.
void FusionPlanner::try_rope_of_gradient(int32_t id) {
    const int32_t rope = only_reader(id);
    if (rope < 0 || g_.node(rope).op != Op::Rope || g_.node(rope).inputs[0] != id || g_.node(rope).dtype != g_.node(id).dtype ||
        plan_.rope_into_cache[static_cast<size_t>(rope)] >= 0 || plan_.in_gemv[static_cast<size_t>(rope)] >= 0 ||
        plan_.in_place_of[static_cast<size_t>(rope)] >= 0) {
        return;
    }
    for (int32_t in : {g_.node(rope).inputs[1], g_.node(rope).inputs[2]}) {  // lowered before the gradient
        if (in > id && op_info(g_.node(in).op).archetype != Archetype::Leaf) return;
    }
    plan_.rope_of_gradient[static_cast<size_t>(id)] = rope;
}

void FusionPlanner::try_split_heads_in_rope(int32_t id) {
    const auto& readers = consumers_[static_cast<size_t>(id)];
    if (is_root_[static_cast<size_t>(id)] || readers.size() != 1 || g_.node(id).ints != std::vector<int64_t>{0, 2, 1, 3}) return;
    const Node& rope = g_.node(readers[0]);
    if (rope.op == Op::Rope && rope.inputs[0] == id) plan_.heads_split_by[static_cast<size_t>(id)] = readers[0];
}

// See fusion.hpp: an RMSNorm of one f32 row whose readers (through reshapes) are all products of one row
// reading it as A, which compute it themselves.
void FusionPlanner::try_norm_in_products(int32_t id) {
    const Node& norm = g_.node(id);
    const int64_t k = norm.shape.back();
    if (is_root_[static_cast<size_t>(id)] || norm.dtype != DType::F32 || numel(norm.shape) != k ||
        plan_.epilogue_of[static_cast<size_t>(id)] >= 0) {
        return;
    }
    const auto reads_row = [&](int32_t reader, int32_t a) {
        const Node& p = g_.node(reader);
        return p.op == Op::MatMul && p.inputs[0] == a && p.inputs[1] != a && p.shape.size() == 2 && p.shape[0] == 1 &&
               p.ints[0] == 0 && p.dtype == DType::F32;
    };
    for (int32_t r : consumers_[static_cast<size_t>(id)]) {
        if (reads_row(r, id)) continue;
        const auto& readers = consumers_[static_cast<size_t>(r)];
        if (g_.node(r).op != Op::Reshape || is_root_[static_cast<size_t>(r)] || readers.empty() ||
            !std::all_of(readers.begin(), readers.end(), [&](int32_t m) { return reads_row(m, r); })) {
            return;
        }
    }
    plan_.norm_in_products[static_cast<size_t>(id)] = true;
}

// See fusion.hpp: an RMSNorm or LayerNorm of f32 rows stored by the split-K sum of the matmul that stores its input.
void FusionPlanner::try_norm_in_sum(int32_t id) {
    const Node& norm = g_.node(id);
    // The weight (and bias) leaves: the product's lowering reads them, where a model may declare them after it.
    const auto leaf = [&](int32_t n) { return op_info(g_.node(n).op).archetype == Archetype::Leaf; };
    if (plan_.norm_in_products[static_cast<size_t>(id)] || norm.dtype != DType::F32 ||
        !std::all_of(norm.inputs.begin() + 1, norm.inputs.end(), leaf)) {
        return;
    }
    int32_t x = norm.inputs[0];
    if (const Node& r = g_.node(x); r.op == Op::Reshape && plan_.heads_split_stored[static_cast<size_t>(x)] < 0 &&
                                    r.shape.back() == g_.node(r.inputs[0]).shape.back()) {
        x = r.inputs[0];  // a linear layer's view of its rows
    }
    const bool own = g_.node(x).op == Op::MatMul && plan_.epilogue_of[static_cast<size_t>(x)] < 0;
    const int32_t product = own ? x : plan_.epilogue_product[static_cast<size_t>(x)];
    if (product < 0 || g_.node(product).op != Op::MatMul) return;
    const Node& p = g_.node(product);
    if (p.dtype != DType::F32 || g_.node(x).dtype != DType::F32 || p.shape.back() != norm.shape.back() ||
        numel(g_.node(x).shape) != numel(p.shape) || plan_.epilogue_pair[static_cast<size_t>(product)] >= 0 ||
        !plan_.column_slices[static_cast<size_t>(product)].empty() ||
        plan_.heads_split_stored[static_cast<size_t>(x)] >= 0 || plan_.sum_norm[static_cast<size_t>(product)] >= 0 ||
        !split_of_(product).splits_k || !epilogue_fits_sum(id, product, true)) {
        return;
    }
    plan_.norm_in_sum[static_cast<size_t>(id)] = product;
    plan_.sum_norm[static_cast<size_t>(product)] = id;
}

// See fusion.hpp: a unit-weight norm times up, stored by the kernel of the input gradient of the same x and up, which
// runs before it. The norm's epilogue is that product alone (nothing else reads the norm; the root stores nothing else).
void FusionPlanner::try_up_xhat_in_norm_grad(int32_t norm) {
    const Node& n = g_.node(norm);
    const bool layer = n.op == Op::LayerNorm;
    const auto constant = [&](int32_t id, double value) {
        const Node& c = g_.node(id);
        return c.op == Op::Constant && std::all_of(c.data.begin(), c.data.end(), [&](double d) { return d == value; });
    };
    const int32_t root = plan_.epilogue_of[static_cast<size_t>(norm)];
    if (root < 0 || !constant(n.inputs[1], 1.0) || (layer && !constant(n.inputs[2], 0.0)) || n.dtype != DType::F32 ||
        plan_.epilogue_keeps[static_cast<size_t>(norm)] || stored_outputs_[static_cast<size_t>(root)] > 0) {
        return;
    }
    const Node& r = g_.node(root);
    if (r.op != Op::Mul || r.shape != n.shape || (r.inputs[0] != norm && r.inputs[1] != norm)) return;
    const int32_t up = r.inputs[0] == norm ? r.inputs[1] : r.inputs[0];
    if (up == norm || leaves_of(root) != std::set<int32_t>{norm, up}) return;
    const Op grad = layer ? Op::LayerNormGrad : Op::RmsNormGrad;
    for (int32_t c : consumers_[static_cast<size_t>(n.inputs[0])]) {
        const Node& gn = g_.node(c);
        // Its kernel runs where it is lowered: its product's split sum's, or in its epilogue's root's place.
        const int32_t in_sum = plan_.norm_grad_in_sum[static_cast<size_t>(c)];
        const int32_t at = in_sum >= 0 ? in_sum : std::max(c, plan_.epilogue_of[static_cast<size_t>(c)]);
        if (gn.op == grad && gn.inputs[0] == n.inputs[0] && gn.inputs[2] == up && gn.data == n.data && at < root &&
            gn.shape == n.shape && plan_.up_xhat_of[static_cast<size_t>(c)] < 0) {
            plan_.up_xhat_of[static_cast<size_t>(c)] = root;
            plan_.up_xhat_by[static_cast<size_t>(root)] = c;
            return;
        }
    }
}

// Whether the epilogue of norm (or norm gradient) `id`, if it has one, can be stored by the split sum of `product` in the
// norm's place: it stores nothing but its root (no co-roots; the norm's own value too only where `keeps`: a norm's sum
// stores it, a norm gradient's does not), and its other leaves are computed before the product.
bool FusionPlanner::epilogue_fits_sum(int32_t id, int32_t product, bool keeps) const {
    const int32_t root = plan_.epilogue_of[static_cast<size_t>(id)];
    if (root < 0) return true;
    if (stored_outputs_[static_cast<size_t>(root)] > 0 || (!keeps && plan_.epilogue_keeps[static_cast<size_t>(id)])) return false;
    const std::set<int32_t> leaves = leaves_of(root);
    return std::all_of(leaves.begin(), leaves.end(), [&](int32_t leaf) {
        return leaf == id || leaf < product || op_info(g_.node(leaf).op).archetype == Archetype::Leaf;
    });
}

// See fusion.hpp: a norm's backward computed by the split sum of the matmul that stores its output gradient. Its inputs:
// x, w, up.
void FusionPlanner::try_norm_grad_in_sum(int32_t id) {
    const Node& norm = g_.node(id);
    int32_t up = norm.inputs[2];
    if (const Node& r = g_.node(up); r.op == Op::Reshape && r.shape.back() == g_.node(r.inputs[0]).shape.back()) {
        up = r.inputs[0];  // a linear layer's view of its rows
    }
    const bool own = g_.node(up).op == Op::MatMul && plan_.epilogue_of[static_cast<size_t>(up)] < 0;
    const int32_t product = own ? up : plan_.epilogue_product[static_cast<size_t>(up)];
    if (product < 0 || g_.node(product).op != Op::MatMul || norm.dtype != DType::F32) return;
    const size_t p = static_cast<size_t>(product);
    const Node& pn = g_.node(product);
    if (pn.dtype != DType::F32 || g_.node(up).dtype != DType::F32 || pn.shape.back() != norm.shape.back() ||
        numel(g_.node(up).shape) != numel(pn.shape) || !plan_.column_slices[p].empty() || plan_.sum_norm[p] >= 0 ||
        plan_.sum_norm_grad[p] >= 0 || plan_.sum_delta[p] >= 0) {
        return;
    }
    if (const ProductSplit split = split_of_(product); !split.splits_k || split.summed_tile_columns) return;
    // What the sum reads besides the pieces is computed before the product: the norm's input and weight, and its
    // epilogue's other leaves.
    const auto before = [&](int32_t n) { return n < product || op_info(g_.node(n).op).archetype == Archetype::Leaf; };
    if (!before(norm.inputs[0]) || !before(norm.inputs[1]) || !epilogue_fits_sum(id, product, false)) return;
    plan_.norm_grad_in_sum[static_cast<size_t>(id)] = product;
    plan_.sum_norm_grad[p] = id;
}

// See fusion.hpp: an attention backward's delta stored by the split sum of the matmul that stores its d_out split into
// heads. Its inputs: q, k, v, out, d_out, lse[, start].
void FusionPlanner::try_delta_in_sum(int32_t grad) {
    const int32_t out = g_.node(grad).inputs[3], d_out = g_.node(grad).inputs[4];
    if (g_.node(d_out).op != Op::Permute) return;
    int32_t x = g_.node(d_out).inputs[0];
    while (g_.node(x).op == Op::Reshape) x = g_.node(x).inputs[0];
    const size_t p = static_cast<size_t>(x);
    if (g_.node(x).op != Op::MatMul || plan_.heads_split_stored[p] != d_out || g_.node(x).dtype != DType::F32 ||
        g_.node(out).dtype != DType::F32 || out > x || plan_.epilogue_pair[p] >= 0 || plan_.sum_norm[p] >= 0 ||
        plan_.sum_delta[p] >= 0 || !plan_.column_slices[p].empty()) {
        return;
    }
    if (const ProductSplit split = split_of_(x); !split.splits_k || split.summed_tile_columns) return;
    plan_.sum_delta[p] = grad;
}

// `id`: a matmul, or a fused root a matmul stores alone through its epilogue, whose kernel stores nothing else.
void FusionPlanner::try_store_column_slices(int32_t id) {
    const Node& p = g_.node(id);
    std::vector<int32_t> slices = consumers_[static_cast<size_t>(id)];
    const auto is_slice = [&](int32_t s) { return g_.node(s).op == Op::Slice; };
    if (is_root_[static_cast<size_t>(id)] || p.shape.size() != 2 || slices.size() < 2 ||
        !std::all_of(slices.begin(), slices.end(), is_slice) || stored_outputs_[static_cast<size_t>(id)] > 0) {
        return;
    }
    std::sort(slices.begin(), slices.end(), [&](int32_t a, int32_t b) { return g_.node(a).ints[1] < g_.node(b).ints[1]; });
    int64_t at = 0;  // ints: starts, ends, steps
    for (int32_t s : slices) {
        const int64_t width = g_.node(s).shape[1];
        if (g_.node(s).ints != std::vector<int64_t>{0, at, p.shape[0], at + width, 1, 1}) return;
        at += width;
    }
    if (at == p.shape[1]) plan_.column_slices[static_cast<size_t>(id)] = std::move(slices);
}

// Per fused root: the unbatched matmul that stores it through its epilogue, that matmul storing nothing else (no
// value of its own, no column slices, no second product); else -1.
std::vector<int32_t> FusionPlanner::matmuls_storing_alone() const {
    std::vector<int32_t> stored_by(g_.nodes().size(), -1);
    for (size_t root = 0; root < stored_by.size(); ++root) {
        const int32_t p = plan_.epilogue_product[root];
        if (p < 0) continue;
        const Node& product = g_.node(p);
        const auto at = static_cast<size_t>(p);
        if (product.op == Op::MatMul && product.shape.size() == 2 && !plan_.epilogue_keeps[at] &&
            plan_.epilogue_pair[at] < 0 && plan_.column_slices[at].empty()) {
            stored_by[root] = p;
        }
    }
    return stored_by;
}

// `stored`: a product's column slice, an unsliced product of two dims, or a fused root a matmul alone stores.
void FusionPlanner::try_store_heads_split(int32_t stored) {
    const Shape& s = g_.node(stored).shape;  // [rows, heads * head_dim]; an epilogue's may be [batch, seq, ...]
    if (s.size() != 2 && (s.size() != 3 || g_.node(stored).op == Op::MatMul)) return;
    std::vector<int32_t> reshapes;  // a linear layer's view [batch, seq, heads * head_dim] may come first
    int32_t permute = only_reader(stored);
    while (permute >= 0 && g_.node(permute).op == Op::Reshape) {
        reshapes.push_back(permute);
        permute = only_reader(permute);
    }
    if (reshapes.empty() || permute < 0 || g_.node(permute).op != Op::Permute ||
        g_.node(permute).ints != std::vector<int64_t>{0, 2, 1, 3} || plan_.heads_split_by[static_cast<size_t>(permute)] >= 0) {
        return;
    }
    const Shape& heads = g_.node(reshapes.back()).shape;
    if (heads.size() != 4 || heads[0] * heads[1] != numel(s) / s.back() || heads[2] * heads[3] != s.back()) return;
    plan_.heads_split_stored[static_cast<size_t>(stored)] = permute;
    for (int32_t r : reshapes) plan_.heads_split_stored[static_cast<size_t>(r)] = permute;
}

// The Permute {0, 2, 1, 3} that is the one reader of `id` (a merge of the heads), or -1. An attention's output
// may be read by its gradients too, which read it through the delta kernel in either layout.
int32_t FusionPlanner::merge_of(int32_t id) const {
    const auto is_merge = [&](int32_t p) {
        return g_.node(p).op == Op::Permute && g_.node(p).ints == std::vector<int64_t>{0, 2, 1, 3} &&
               plan_.heads_split_by[static_cast<size_t>(p)] < 0;
    };
    const auto is_gradient = [&](int32_t r) {
        const Op op = g_.node(r).op;
        return (op == Op::AttentionGradQ || op == Op::AttentionGradK || op == Op::AttentionGradV) && g_.node(r).inputs[3] == id;
    };
    if (is_root_[static_cast<size_t>(id)]) return -1;
    int32_t merge = -1;
    for (int32_t r : consumers_[static_cast<size_t>(id)]) {
        if (merge < 0 && is_merge(r)) {
            merge = r;
        } else if (g_.node(id).op != Op::Attention || !is_gradient(r)) {
            return -1;
        }
    }
    return merge;
}

// An Attention, RoPE or attention gradient whose one reader merges its heads. The kernel that computes an
// attention's logsumexp too stores both from the one lowered first: not an attention lowered after its
// logsumexp (whose layout stays). dK and dV each take the layout their reader does (lower_attention).
void FusionPlanner::try_merge_heads(int32_t id) {
    const int32_t permute = merge_of(id);
    if (permute < 0) return;
    const Node& n = g_.node(id);
    for (int32_t c : consumers_[static_cast<size_t>(n.inputs[0])]) {  // the kernel's other output
        const Node& other = g_.node(c);
        if (n.op == Op::Attention && other.op == Op::AttentionLse && other.inputs == n.inputs && other.ints == n.ints &&
            other.data == n.data && c < id) {
            return;
        }
    }
    plan_.heads_merged_into[static_cast<size_t>(id)] = permute;
}

// See fusion.hpp: a one-row product's column slices that its GEMV rotates or writes into a cache itself. Each
// slice is one part: a plain one, or through its reshapes to [1, heads, 1, head_dim] read by a RoPE alone (which
// may store into a cache, rope_into_cache) or by a cache's write in place alone. All of one head dim, their
// positions, frequencies and start lowered before the product, which is where the cache rows are now written.
void FusionPlanner::try_rows_in_gemv(int32_t product) {
    const std::vector<int32_t>& slices = plan_.column_slices[static_cast<size_t>(product)];
    if (g_.node(product).shape[0] != 1 || g_.node(product).dtype != DType::F32) return;
    const auto before_product = [&](int32_t n) { return n < product || op_info(g_.node(n).op).archetype == Archetype::Leaf; };
    struct Part {
        int32_t rope = -1, scatter = -1;
        std::vector<int32_t> chain;  // the reshapes
    };
    std::vector<Part> parts;
    int64_t head_dim = 0;
    int32_t positions = -1, inv_freq = -1, start = -1;
    const auto same = [](int32_t& seen, int32_t n) {  // the first of its kind, or the same node as that
        if (seen < 0) seen = n;
        return seen == n;
    };
    for (int32_t slice : slices) {
        Part part;
        int32_t at = slice;
        for (int32_t r = only_reader(at); r >= 0 && g_.node(r).op == Op::Reshape; r = only_reader(at)) part.chain.push_back(at = r);
        const Shape& view = g_.node(at).shape;
        const int32_t next = only_reader(at);
        if (!part.chain.empty() && view.size() == 4 && view[0] == 1 && view[2] == 1 && next >= 0) {
            const Node& n = g_.node(next);
            if (n.op == Op::Rope && n.inputs[0] == at && plan_.heads_merged_into[static_cast<size_t>(next)] < 0) {
                part.rope = next;
                part.scatter = plan_.rope_into_cache[static_cast<size_t>(next)];
            } else if (n.op == Op::SliceScatter && n.inputs[1] == at && plan_.in_place_of[static_cast<size_t>(next)] >= 0) {
                part.scatter = next;
            }
        }
        if (part.rope >= 0 || part.scatter >= 0) {
            if (head_dim && view[3] != head_dim) return;
            head_dim = view[3];
        }
        if (part.rope >= 0) {
            const Node& rope = g_.node(part.rope);
            if (numel(g_.node(rope.inputs[1]).shape) != 1 || !same(positions, rope.inputs[1]) || !same(inv_freq, rope.inputs[2])) return;
        }
        if (part.scatter >= 0) {
            const Node& scatter = g_.node(part.scatter);
            if (scatter.ints[0] != 2 || !same(start, scatter.inputs[2]) ||
                !old_contents_read_before(consumers_[static_cast<size_t>(part.scatter)][0], product)) {
                return;
            }
        }
        parts.push_back(std::move(part));
    }
    if (head_dim == 0 || head_dim % 2 != 0) return;
    for (int32_t n : {positions, inv_freq, start}) {
        if (n >= 0 && !before_product(n)) return;
    }
    for (int32_t slice : slices) {
        if (g_.node(slice).shape[1] % head_dim != 0) return;  // every part whole heads: the GEMV's column pairs
    }
    for (size_t i = 0; i < slices.size(); ++i) {
        const Part& part = parts[i];
        if (part.rope < 0 && part.scatter < 0) continue;
        plan_.rope_in_gemv[static_cast<size_t>(slices[i])] = part.rope;
        plan_.cache_in_gemv[static_cast<size_t>(slices[i])] = part.scatter;
        for (int32_t n : part.chain) plan_.in_gemv[static_cast<size_t>(n)] = product;
        for (int32_t n : {part.rope, part.scatter}) {
            if (n >= 0) plan_.in_gemv[static_cast<size_t>(n)] = product;
        }
        if (part.rope >= 0) plan_.rope_into_cache[static_cast<size_t>(part.rope)] = -1;
    }
}

// See fusion.hpp: a product of several rows whose heads RoPEs rotate (a prefill's q and k: its column slices', or its
// own value's), each through reshapes to [batch, seq, heads, head_dim] and the split of the heads that its RoPE
// alone reads (heads_split_by), stores them rotated where its last piece of a tile sums the pieces: a tile holds
// whole heads.
void FusionPlanner::try_rows_rotated_in_sum(int32_t product) {
    const std::vector<int32_t>& column_slices = plan_.column_slices[static_cast<size_t>(product)];
    const std::vector<int32_t> slices = column_slices.empty() ? std::vector<int32_t>{product} : column_slices;
    const Node& p = g_.node(product);
    if (p.shape.size() != 2 || p.shape[0] == 1 || p.dtype != DType::F32 || plan_.epilogue_of[static_cast<size_t>(product)] >= 0 ||
        (column_slices.empty() && plan_.heads_split_stored[static_cast<size_t>(product)] >= 0)) {
        return;
    }
    const auto before_product = [&](int32_t n) { return n < product || op_info(g_.node(n).op).archetype == Archetype::Leaf; };
    struct Part {
        int32_t rope = -1;
        std::vector<int32_t> chain;  // the reshapes and the split of the heads
    };
    std::vector<Part> parts(slices.size());
    int64_t head_dim = 0, seq = 0;
    int32_t positions = -1, inv_freq = -1;
    for (size_t i = 0; i < slices.size(); ++i) {
        int32_t at = slices[i];
        std::vector<int32_t> chain;
        for (int32_t r = only_reader(at); r >= 0 && g_.node(r).op == Op::Reshape; r = only_reader(at)) chain.push_back(at = r);
        const int32_t next = only_reader(at);
        if (chain.empty() || next < 0 || g_.node(at).shape.size() != 4) continue;
        // The split of the heads that the RoPE reads, [batch, seq, heads, head_dim]; or of one head, a view
        // [batch, 1, seq, head_dim] the RoPE reads itself (the optimizer drops a permute of a dim of 1).
        const Shape& view = g_.node(at).shape;
        const bool one_head = g_.node(next).op == Op::Rope && g_.node(next).inputs[0] == at && view[1] == 1;
        const int32_t rope = one_head ? next : plan_.heads_split_by[static_cast<size_t>(next)];
        if (rope < 0 || plan_.rope_into_cache[static_cast<size_t>(rope)] >= 0 ||
            plan_.heads_merged_into[static_cast<size_t>(rope)] >= 0) {
            continue;
        }
        const Node& r = g_.node(rope);
        const int64_t rows = one_head ? view[2] : view[1];  // positions
        if ((head_dim && view[3] != head_dim) || (seq && rows != seq) || numel(g_.node(r.inputs[1]).shape) != rows) return;
        if ((positions >= 0 && positions != r.inputs[1]) || (inv_freq >= 0 && inv_freq != r.inputs[2])) return;
        head_dim = view[3], seq = rows, positions = r.inputs[1], inv_freq = r.inputs[2];
        if (!one_head) chain.push_back(next);
        parts[i] = {rope, std::move(chain)};
    }
    if (head_dim == 0 || head_dim % 2 != 0 || !before_product(positions) || !before_product(inv_freq)) return;
    for (int32_t slice : slices) {
        if (g_.node(slice).shape.back() % head_dim != 0) return;  // every part whole heads: the sum's column pairs
    }
    if (!split_of_(product).sum_rotates_heads_of(head_dim)) return;
    for (size_t i = 0; i < slices.size(); ++i) {
        if (parts[i].rope < 0) continue;
        plan_.rope_in_gemv[static_cast<size_t>(slices[i])] = parts[i].rope;
        for (int32_t n : parts[i].chain) plan_.in_gemv[static_cast<size_t>(n)] = product;
        plan_.in_gemv[static_cast<size_t>(parts[i].rope)] = product;
    }
}

// See fusion.hpp: assign(x, slice_scatter(x, src, axis, start)) writes src's rows into x in place, when the
// assignment alone reads the slice_scatter and every other reader of x's old contents runs in an earlier kernel.
void FusionPlanner::try_write_rows_in_place(int32_t assign) {
    const Node& a = g_.node(assign);
    const int32_t target = a.inputs[0], value = a.inputs[1];
    const Node& v = g_.node(value);
    if (v.op != Op::SliceScatter || v.inputs[0] != target || is_root_[static_cast<size_t>(value)] ||
        consumers_[static_cast<size_t>(value)] != std::vector<int32_t>{assign}) {
        return;
    }
    const auto old_read_before = [&](int32_t writer) { return old_contents_read_before(assign, writer); };
    if (!old_read_before(value)) return;
    plan_.in_place_of[static_cast<size_t>(value)] = target;
    plan_.assign_elided[static_cast<size_t>(assign)] = true;
    // Rotated keys that nothing else reads: the RoPE stores them into the cache itself, at its own place.
    const int32_t src = v.inputs[1];
    const Node& rope = g_.node(src);
    if (rope.op == Op::Rope && !is_root_[static_cast<size_t>(src)] && consumers_[static_cast<size_t>(src)] == std::vector<int32_t>{value} &&
        v.ints[0] == static_cast<int64_t>(v.shape.size()) - 2 && plan_.heads_merged_into[static_cast<size_t>(src)] < 0 &&
        v.inputs[2] < src && old_read_before(src)) {  // the start is lowered before the RoPE
        plan_.rope_into_cache[static_cast<size_t>(src)] = value;
    }
}

}  // namespace mn::sched::detail
