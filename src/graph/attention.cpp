// Graph::attention: checks its operands and emits one Attention node, lowered to a fused
// flash-style kernel (src/codegen/attention.cpp). The semantics, which the reference
// (src/reference/attention.cpp) spells out as loops:
//   q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D]; query head h reads kv head h / (Hq / Hkv).
//   out[b, h, i] = sum_j softmax_j(scale * q[b, h, i] . k[b, kv, j]) v[b, kv, j] over the keys j
//   that query row i sees: all of them, or with causal those j <= p (p = query_start + i, the
//   row's position, bottom-right aligned by default: query_start = Tk - Tq), and with a sliding
//   window also j > p - window. A row that sees no key at all yields zeros.
#include <cmath>

#include "meganeura/graph.hpp"

namespace mn {

namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("[attention] " + what); }

bool is_float(DType t) { return t == DType::F32 || t == DType::F16; }

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
    if (ks[1] == 0 || qs[1] % ks[1] != 0) {
        fail("query heads " + std::to_string(qs[1]) + " are not a multiple of kv heads " + std::to_string(ks[1]));
    }
    if (q.dtype() != k.dtype() || q.dtype() != v.dtype() || !is_float(q.dtype())) {
        fail(std::string("q, k, v must share a float dtype; got ") + dtype_name(q.dtype()) + ", " +
             dtype_name(k.dtype()) + ", " + dtype_name(v.dtype()));
    }
    if (o.window < 0 || (o.window > 0 && !o.causal)) fail("a sliding window needs causal attention and window > 0");
    std::vector<int32_t> inputs = {q.id, k.id, v.id};
    if (o.query_start) {
        check(*o.query_start, "attention");
        if (o.query_start->dtype() != DType::I32 || !o.query_start->shape().empty()) fail("query_start must be an i32 scalar");
        inputs.push_back(o.query_start->id);
    }
    const double scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(qs[3]));
    return emit({.op = Op::Attention, .inputs = std::move(inputs), .shape = qs, .dtype = q.dtype(),
                 .ints = {o.causal ? 1 : 0, o.window}, .data = {scale}});
}

}  // namespace mn
