// Attention in float64, by the definition: for every query row, the scaled dot products with
// the keys it sees, their softmax, and the probability-weighted sum of values. The backward ops
// recompute the same probabilities P and take the textbook derivatives:
//   dV[j] = sum_i P[i,j] dO[i]                     (summed over the query heads of a kv group)
//   dS[i,j] = P[i,j] (dO[i] . v[j] - sum_j' P[i,j'] dO[i] . v[j'])
//   dQ[i] = scale sum_j dS[i,j] k[j]      dK[j] = scale sum_i dS[i,j] q[i]
// The out and lse inputs of the gradient ops are what the GPU kernels read; the reference needs
// neither, so a GPU forward that got them wrong cannot agree with it.
#include "reference/attention.hpp"

#include <cmath>
#include <limits>

namespace mn::ref {
namespace {

struct Geometry {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, dim;
    bool causal;
    int64_t window, start;
    double scale;
};

Geometry geometry(const Node& node, const std::vector<const Value*>& in) {
    const Shape& q = in[0]->shape;
    const Shape& k = in[1]->shape;
    const bool forward = node.op == Op::Attention || node.op == Op::AttentionLse;
    const size_t start_at = forward ? 3 : 6;  // query_start is the optional last input
    const int64_t start = in.size() > start_at ? static_cast<int64_t>(in[start_at]->data[0]) : k[2] - q[2];
    return {q[0], q[1], k[1], q[2], k[2], q[3], node.ints[0] != 0, node.ints[1], start, node.data[0]};
}

bool sees(const Geometry& g, int64_t i, int64_t j) {
    if (!g.causal) return true;
    const int64_t position = g.start + i;
    return j <= position && (g.window == 0 || j > position - g.window);
}

// Offsets of row i of query head h and of row j of the kv head h reads.
int64_t q_row(const Geometry& g, int64_t b, int64_t h, int64_t i) { return ((b * g.q_heads + h) * g.q_len + i) * g.dim; }
int64_t kv_row(const Geometry& g, int64_t b, int64_t h, int64_t j) {
    return ((b * g.kv_heads + h / (g.q_heads / g.kv_heads)) * g.kv_len + j) * g.dim;
}

double dot(const Value& a, int64_t at, const Value& b, int64_t bt, int64_t n) {
    double s = 0;
    for (int64_t d = 0; d < n; ++d) s += a.data[at + d] * b.data[bt + d];
    return s;
}

// The probabilities of query row i of head h over all keys (0 for hidden ones) and the row's
// logsumexp of scaled scores (-inf when it sees no key; then every probability is 0).
struct Row {
    std::vector<double> p;
    double lse = -std::numeric_limits<double>::infinity();
};

Row softmax_row(const Geometry& g, const Value& q, const Value& k, int64_t b, int64_t h, int64_t i) {
    Row row{std::vector<double>(static_cast<size_t>(g.kv_len), 0.0)};
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < g.kv_len; ++j) {
        if (!sees(g, i, j)) continue;
        row.p[j] = g.scale * dot(q, q_row(g, b, h, i), k, kv_row(g, b, h, j), g.dim);
        max = std::max(max, row.p[j]);
    }
    if (std::isinf(max)) return row;
    double sum = 0;
    for (int64_t j = 0; j < g.kv_len; ++j) sum += sees(g, i, j) ? std::exp(row.p[j] - max) : 0.0;
    for (int64_t j = 0; j < g.kv_len; ++j) row.p[j] = sees(g, i, j) ? std::exp(row.p[j] - max) / sum : 0.0;
    row.lse = max + std::log(sum);
    return row;
}

// Calls fn(b, h, i, row) for every query row.
template <class Fn>
void for_each_row(const Geometry& g, const Value& q, const Value& k, Fn fn) {
    for (int64_t b = 0; b < g.batch; ++b)
        for (int64_t h = 0; h < g.q_heads; ++h)
            for (int64_t i = 0; i < g.q_len; ++i) fn(b, h, i, softmax_row(g, q, k, b, h, i));
}

Value forward(const Node& node, const Geometry& g, const Value& q, const Value& k, const Value& v) {
    const bool lse = node.op == Op::AttentionLse;
    Value out{node.shape, std::vector<double>(static_cast<size_t>(numel(node.shape)), 0.0)};
    for_each_row(g, q, k, [&](int64_t b, int64_t h, int64_t i, const Row& row) {
        if (lse) {
            out.data[(b * g.q_heads + h) * g.q_len + i] = row.lse;
            return;
        }
        for (int64_t j = 0; j < g.kv_len; ++j) {
            for (int64_t d = 0; d < g.dim; ++d) out.data[q_row(g, b, h, i) + d] += row.p[j] * v.data[kv_row(g, b, h, j) + d];
        }
    });
    return out;
}

Value gradient(const Node& node, const Geometry& g, const Value& q, const Value& k, const Value& v, const Value& d_out) {
    const Value& wrt = node.op == Op::AttentionGradQ ? q : node.op == Op::AttentionGradK ? k : v;
    Value grad{wrt.shape, std::vector<double>(wrt.data.size(), 0.0)};
    for_each_row(g, q, k, [&](int64_t b, int64_t h, int64_t i, const Row& row) {
        const int64_t qi = q_row(g, b, h, i);
        std::vector<double> dp(static_cast<size_t>(g.kv_len));
        double delta = 0;
        for (int64_t j = 0; j < g.kv_len; ++j) {
            dp[j] = dot(d_out, qi, v, kv_row(g, b, h, j), g.dim);
            delta += row.p[j] * dp[j];
        }
        for (int64_t j = 0; j < g.kv_len; ++j) {
            const int64_t kj = kv_row(g, b, h, j);
            const double ds = row.p[j] * (dp[j] - delta);
            for (int64_t d = 0; d < g.dim; ++d) {
                if (node.op == Op::AttentionGradQ) {
                    grad.data[qi + d] += g.scale * ds * k.data[kj + d];
                } else if (node.op == Op::AttentionGradK) {
                    grad.data[kj + d] += g.scale * ds * q.data[qi + d];
                } else {  // AttentionGradV
                    grad.data[kj + d] += row.p[j] * d_out.data[qi + d];
                }
            }
        }
    });
    return grad;
}

}  // namespace

Value attention_op(const Node& node, const std::vector<const Value*>& in) {
    const Geometry g = geometry(node, in);
    if (node.op == Op::Attention || node.op == Op::AttentionLse) return forward(node, g, *in[0], *in[1], *in[2]);
    return gradient(node, g, *in[0], *in[1], *in[2], *in[4]);
}

}  // namespace mn::ref
