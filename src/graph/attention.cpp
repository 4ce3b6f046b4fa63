// Graph::attention, composed from matmul, a mask and softmax: it materializes the score matrix.
// The semantics here are the contract for any fused kernel that replaces it.
#include <cmath>

#include "meganeura/graph.hpp"

namespace mn {

namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("[attention] " + what); }

}  // namespace

Tensor Graph::attention(Tensor q, Tensor k, Tensor v, const AttentionOptions& o) {
    check(q, "attention");
    check(k, "attention");
    check(v, "attention");
    const Shape qs = q.shape(), ks = k.shape(), vs = v.shape();
    if (qs.size() != 4 || ks.size() != 4 || vs.size() != 4) {
        fail("q, k, v must be [B, H, T, D]; got " + shape_str(qs) + ", " + shape_str(ks) + ", " + shape_str(vs));
    }
    if (ks != vs) fail("k is " + shape_str(ks) + " but v is " + shape_str(vs));
    if (qs[0] != ks[0] || qs[3] != ks[3]) fail("q is " + shape_str(qs) + ", k is " + shape_str(ks) + ": batch or head dim differ");
    if (qs[1] % ks[1] != 0) fail("query heads " + std::to_string(qs[1]) + " are not a multiple of kv heads " + std::to_string(ks[1]));
    if (o.window < 0 || (o.window > 0 && !o.causal)) fail("a sliding window needs causal attention and window > 0");
    if (o.query_start && (o.query_start->dtype() != DType::I32 || !o.query_start->shape().empty())) {
        fail("query_start must be an i32 scalar");
    }
    const int64_t B = qs[0], Hkv = ks[1], Tq = qs[2], Tk = ks[2], D = qs[3], G = qs[1] / ks[1];
    const double scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(D));

    // Query head h = kv * G + g lands in row g * Tq + t of kv head kv's score block.
    Tensor scores = matmul(reshape(q, {B, Hkv, G * Tq, D}), k, false, true) * scale;
    if (o.causal) {
        std::vector<double> key_minus_query(static_cast<size_t>(G * Tq * Tk));
        for (int64_t r = 0; r < G * Tq; ++r) {
            for (int64_t j = 0; j < Tk; ++j) key_minus_query[static_cast<size_t>(r * Tk + j)] = static_cast<double>(j - r % Tq);
        }
        const Tensor offset = constant(std::move(key_minus_query), {G * Tq, Tk}, q.dtype());
        const Tensor start = o.query_start ? cast(*o.query_start, q.dtype()) : scalar(static_cast<double>(Tk - Tq), q.dtype());
        Tensor hidden = greater(offset, start);  // key after the query
        if (o.window > 0) hidden = maximum(hidden, greater(start - static_cast<double>(o.window - 1), offset));
        scores = scores + hidden * -1e30;
    }
    const Tensor out = matmul(softmax(scores, -1), v);
    return reshape(out, {B, qs[1], Tq, D});
}

}  // namespace mn
