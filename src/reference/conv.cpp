// Convolution and max pooling in the reference, written as the textbook sums.
//
// A convolution is a set of taps: output pixel (n, o, oh, ow) reads input pixel
// (n, c, oh*s - p + kh*d, ow*s - p + kw*d) times weight (o, c, kh, kw), for every input channel c
// of o's group and every kernel offset whose pixel lies inside the image (outside is the zero
// padding). for_each_tap visits each tap once with its three flat positions; the forward sums
// x * w into y, the input gradient sums gy * w into gx, the weight gradient sums x * gy into gw.
// All three are the same loop, so they cannot disagree about the geometry.
#include "reference/conv.hpp"

#include <cmath>
#include <limits>

namespace mn::ref {
namespace {

struct Geometry {
    int64_t batch, channels, height, width;    // x
    int64_t outs, kh, kw;                      // weight [outs, channels / groups, kh, kw]
    int64_t out_h, out_w;                      // y
    int64_t sh, sw, ph, pw, dh, dw, groups;    // the node's ints
};

// tap(x_pos, w_pos, y_pos) for every tap of the convolution.
template <class Tap>
void for_each_tap(const Geometry& g, Tap tap) {
    const int64_t cg = g.channels / g.groups, og = g.outs / g.groups;
    for (int64_t n = 0; n < g.batch; ++n)
        for (int64_t o = 0; o < g.outs; ++o)
            for (int64_t oh = 0; oh < g.out_h; ++oh)
                for (int64_t ow = 0; ow < g.out_w; ++ow)
                    for (int64_t c = 0; c < cg; ++c)
                        for (int64_t i = 0; i < g.kh; ++i)
                            for (int64_t j = 0; j < g.kw; ++j) {
                                const int64_t ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
                                if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) continue;
                                const int64_t channel = o / og * cg + c;
                                tap(((n * g.channels + channel) * g.height + ih) * g.width + iw,
                                    ((o * cg + c) * g.kh + i) * g.kw + j, ((n * g.outs + o) * g.out_h + oh) * g.out_w + ow);
                            }
}

Geometry geometry(const Shape& x, const Shape& w, const Shape& y, const std::vector<int64_t>& a) {
    return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], a[0], a[1], a[2], a[3], a[4], a[5], a[6]};
}

}  // namespace

Value conv2d_family(const Node& node, const Value& a, const Value& b) {
    Value out{node.shape, std::vector<double>(static_cast<size_t>(numel(node.shape)), 0.0)};
    std::vector<double>& r = out.data;
    if (node.op == Op::Conv2d) {  // a = x, b = weight
        for_each_tap(geometry(a.shape, b.shape, node.shape, node.ints),
                     [&](int64_t xi, int64_t wi, int64_t yi) { r[yi] += a.data[xi] * b.data[wi]; });
    } else if (node.op == Op::Conv2dGradInput) {  // a = gy, b = weight
        for_each_tap(geometry(node.shape, b.shape, a.shape, node.ints),
                     [&](int64_t xi, int64_t wi, int64_t yi) { r[xi] += a.data[yi] * b.data[wi]; });
    } else if (node.op == Op::Conv2dGradWeight) {  // a = x, b = gy
        for_each_tap(geometry(a.shape, node.shape, b.shape, node.ints),
                     [&](int64_t xi, int64_t wi, int64_t yi) { r[wi] += a.data[xi] * b.data[yi]; });
    } else {
        throw Error(std::string("reference: ") + op_info(node.op).name + " is not a convolution");
    }
    return out;
}

// Each window's first maximum in row-major order (as PyTorch picks it) is its argmax; padding is
// never picked. The forward reads it, the backward adds gy into it.
Value max_pool2d_family(const Node& node, const Value& x, const Value* gy) {
    const int64_t kernel = node.ints[0], stride = node.ints[1], pad = node.ints[2];
    const int64_t planes = x.shape[0] * x.shape[1], h = x.shape[2], w = x.shape[3];
    const Shape y = gy ? gy->shape : node.shape;
    const int64_t oh_count = y[2], ow_count = y[3];
    Value out{node.shape, std::vector<double>(static_cast<size_t>(numel(node.shape)), 0.0)};
    for (int64_t p = 0; p < planes; ++p)
        for (int64_t oh = 0; oh < oh_count; ++oh)
            for (int64_t ow = 0; ow < ow_count; ++ow) {
                int64_t best = -1;
                for (int64_t i = 0; i < kernel; ++i)
                    for (int64_t j = 0; j < kernel; ++j) {
                        const int64_t ih = oh * stride - pad + i, iw = ow * stride - pad + j;
                        if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                        const int64_t at = (p * h + ih) * w + iw;
                        if (best < 0 || x.data[at] > x.data[best]) best = at;
                    }
                const int64_t yi = (p * oh_count + oh) * ow_count + ow;
                if (gy) out.data[best] += gy->data[yi];
                else out.data[yi] = x.data[best];
            }
    return out;
}

}  // namespace mn::ref
