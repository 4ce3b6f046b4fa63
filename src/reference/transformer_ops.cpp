// Reference rules of the transformer ops. Rows are the last dim: a tensor [..., D] is read as
// numel / D rows of D.
#include "reference/transformer_ops.hpp"

#include <cmath>

namespace mn::ref {

namespace {

[[noreturn]] void fail(const std::string& message) { throw Error("reference: " + message); }

int64_t id_at(const Node& node, const Value& ids, size_t n, int64_t vocab) {
    const double id = ids.data[n];
    if (!(id >= 0 && id < static_cast<double>(vocab))) {
        fail(std::string(op_info(node.op).name) + " id " + std::to_string(static_cast<int64_t>(id)) + " at position " +
             std::to_string(n) + " is outside [0, " + std::to_string(vocab) + ")");
    }
    return static_cast<int64_t>(id);
}

}  // namespace

Value embedding(const Node& node, const Value& ids, const Value& weight) {
    const int64_t vocab = weight.shape[0], d = weight.shape[1];
    Value out{node.shape, {}};
    for (size_t n = 0; n < ids.data.size(); ++n) {
        const int64_t row = id_at(node, ids, n, vocab);
        out.data.insert(out.data.end(), weight.data.begin() + row * d, weight.data.begin() + (row + 1) * d);
    }
    return out;
}

Value embedding_grad(const Node& node, const Value& ids, const Value& upstream) {
    const int64_t vocab = node.shape[0], d = node.shape[1];
    Value out{node.shape, std::vector<double>(static_cast<size_t>(vocab * d), 0.0)};
    for (size_t n = 0; n < ids.data.size(); ++n) {
        const int64_t row = id_at(node, ids, n, vocab);
        for (int64_t j = 0; j < d; ++j) out.data[row * d + j] += upstream.data[n * d + j];
    }
    return out;
}

// Per row: RMSNorm y = x / sqrt(mean(x^2) + eps) * w; LayerNorm y = (x - mean) / sqrt(var + eps)
// * w + b with the biased variance. With xhat the normalized row, r the reciprocal std and
// g = upstream * w, their derivatives are r (g - xhat mean(g xhat)) for RMSNorm and
// r (g - mean(g) - xhat mean(g xhat)) for LayerNorm. GroupNorm is LayerNorm over the rows of
// x [N, C, ...] viewed as [N * groups, C / groups * spatial], element j of row r taking the weight
// (and bias) of its channel (r % groups) * C / groups + j / spatial.
Value norm(const Node& node, const Value& x, const Value& weight, const Value* third) {
    const bool group = node.op == Op::GroupNorm || node.op == Op::GroupNormGrad;
    const int64_t groups = group ? node.ints.at(0) : 1;
    const int64_t rows = group ? x.shape[0] * groups : numel(x.shape) / std::max<int64_t>(x.shape.back(), 1);
    const int64_t d = group ? numel(x.shape) / rows : x.shape.back();
    const int64_t spatial = group ? numel(x.shape) / (x.shape[0] * x.shape[1]) : 1;
    auto channel = [&](int64_t r, int64_t j) { return static_cast<size_t>((r % groups) * (d / spatial) + j / spatial); };
    const double eps = node.data.at(0);
    const bool layer = node.op != Op::RmsNorm && node.op != Op::RmsNormGrad;
    const bool grad = node.op == Op::RmsNormGrad || node.op == Op::LayerNormGrad || node.op == Op::GroupNormGrad;
    Value out{node.shape, std::vector<double>(x.data.size())};
    for (int64_t r = 0; r < rows; ++r) {
        const double* row = x.data.data() + r * d;
        double mean = 0, var = 0;
        if (layer) {
            for (int64_t j = 0; j < d; ++j) mean += row[j];
            mean /= static_cast<double>(d);
        }
        for (int64_t j = 0; j < d; ++j) var += (row[j] - mean) * (row[j] - mean);
        const double rstd = 1.0 / std::sqrt(var / static_cast<double>(d) + eps);
        double* y = out.data.data() + r * d;
        if (!grad) {
            for (int64_t j = 0; j < d; ++j) {
                y[j] = (row[j] - mean) * rstd * weight.data[channel(r, j)] + (third ? third->data[channel(r, j)] : 0.0);
            }
            continue;
        }
        const double* up = third->data.data() + r * d;
        double mean_g = 0, mean_gx = 0;
        for (int64_t j = 0; j < d; ++j) {
            const double g = up[j] * weight.data[channel(r, j)];
            mean_g += g;
            mean_gx += g * (row[j] - mean) * rstd;
        }
        mean_g /= static_cast<double>(d);
        mean_gx /= static_cast<double>(d);
        for (int64_t j = 0; j < d; ++j) {
            const double g = up[j] * weight.data[channel(r, j)], xhat = (row[j] - mean) * rstd;
            y[j] = rstd * (g - (layer ? mean_g : 0.0) - xhat * mean_gx);
        }
    }
    return out;
}

// Pair (i, i + D/2) of row t turns by angle positions[t] * inv_freq[i] (by minus that angle
// when node.flag: the inverse rotation, which is rope's VJP). The angle is rounded to f32 as
// Hugging Face computes it: at position 4096 that rounding alone moves it by up to 2e-4 rad, which
// is part of the op's meaning in a Llama checkpoint, not an error to remove.
Value rope(const Node& node, const Value& x, const Value& positions, const Value& inv_freq) {
    const int64_t d = x.shape.back(), half = d / 2, t = x.shape[x.shape.size() - 2];
    const int64_t rows = numel(x.shape) / d;
    Value out{node.shape, std::vector<double>(x.data.size())};
    for (int64_t r = 0; r < rows; ++r) {
        const double pos = positions.data[static_cast<size_t>(r % t)];
        for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<float>((node.flag ? -pos : pos) * inv_freq.data[static_cast<size_t>(i)]);
            const double a = x.data[r * d + i], b = x.data[r * d + i + half];
            out.data[r * d + i] = a * std::cos(angle) - b * std::sin(angle);
            out.data[r * d + i + half] = b * std::cos(angle) + a * std::sin(angle);
        }
    }
    return out;
}

Value slice_scatter(const Node& node, const Value& x, const Value& src, const Value& start) {
    const auto axis = static_cast<size_t>(node.ints[0]);
    const int64_t dim = x.shape[axis], len = src.shape[axis];
    const double s = start.data[0];
    if (!(s >= 0 && s + static_cast<double>(len) <= static_cast<double>(dim))) {
        fail("slice_scatter start " + std::to_string(static_cast<int64_t>(s)) + " with " + std::to_string(len) +
             " rows does not fit axis " + std::to_string(axis) + " of " + shape_str(x.shape));
    }
    int64_t inner = 1;
    for (size_t k = axis + 1; k < x.shape.size(); ++k) inner *= x.shape[k];
    Value out = x;
    const auto begin = static_cast<int64_t>(s);
    for (int64_t i = 0; i < numel(src.shape); ++i) {
        const int64_t outer = i / (len * inner), along = (i / inner) % len, in = i % inner;
        out.data[static_cast<size_t>((outer * dim + begin + along) * inner + in)] = src.data[static_cast<size_t>(i)];
    }
    return out;
}

}  // namespace mn::ref
