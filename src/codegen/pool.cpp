// Max pooling: one thread per output element forward, one per input element backward.
//
// The backward gathers instead of scattering (no atomics): input pixel (ih, iw) collects gy from
// every window that contains it and whose argmax it is. Both directions find a window's argmax
// with the same function, the first maximum in row-major order as PyTorch and the reference do,
// so the gradient goes exactly where the forward took its value from.
#include "codegen/families.hpp"

namespace mn::codegen {

namespace {

const char* const kArgmax = R"(
// flat index into x of the first maximum of window (oh, ow) of plane p; padding never wins
uint window_argmax(uint p, uint oh, uint ow) {
    uint best = 0xFFFFFFFFu;
    float best_v = 0.0;
    for (uint i = 0u; i < KSIZE; ++i) {
        int ih = int(oh * STRIDE + i) - int(PAD);
        if (ih < 0 || ih >= int(H)) continue;
        for (uint j = 0u; j < KSIZE; ++j) {
            int iw = int(ow * STRIDE + j) - int(PAD);
            if (iw < 0 || iw >= int(W)) continue;
            uint at = (p * H + uint(ih)) * W + uint(iw);
            float v = float(x.d[at]);
            if (best == 0xFFFFFFFFu || v > best_v) { best = at; best_v = v; }
        }
    }
    return best;
}
)";

const char* const kForward = R"(
void main() {
    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;
    if (i >= TOTAL) return;
    uint ow = i % OW, oh = (i / OW) % OH, p = i / (OW * OH);
    y.d[i] = x.d[window_argmax(p, oh, ow)];
}
)";

// Windows containing input row ih: oh * STRIDE - PAD <= ih <= oh * STRIDE - PAD + KSIZE - 1.
const char* const kBackward = R"(
void main() {
    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;
    if (i >= TOTAL) return;
    uint iw = i % W, ih = (i / W) % H, p = i / (W * H);
    int hi_h = int(ih + PAD) / int(STRIDE), hi_w = int(iw + PAD) / int(STRIDE);
    int lo_h = max(int(ih + PAD) - int(KSIZE) + int(STRIDE), 0) / int(STRIDE);
    int lo_w = max(int(iw + PAD) - int(KSIZE) + int(STRIDE), 0) / int(STRIDE);
    float total = 0.0;
    for (int oh = lo_h; oh <= min(hi_h, int(OH) - 1); ++oh)
        for (int ow = lo_w; ow <= min(hi_w, int(OW) - 1); ++ow)
            if (window_argmax(p, uint(oh), uint(ow)) == i) total += float(gy.d[(p * OH + uint(oh)) * OW + uint(ow)]);
    gx.d[i] = STORE(total);
}
)";

}  // namespace

KernelSource max_pool2d_kernel(const PoolSpec& spec, bool backward, const Launch& launch) {
    KernelSource k;
    k.label = backward ? "max_pool2d_grad" : "max_pool2d";
    k.iface.local_size = launch.local_size;
    const Shape& x = spec.x;
    const int64_t total = backward ? numel(x) : x[0] * x[1] * spec.out_h * spec.out_w;
    k.iface.spec_constants = {"TOTAL", "H", "W", "OH", "OW", "KSIZE", "STRIDE", "PAD"};
    for (int64_t v : {total, x[2], x[3], spec.out_h, spec.out_w, spec.kernel, spec.stride, spec.padding}) {
        k.spec_values.push_back(checked_u32(v, "max_pool2d size"));
    }
    if (backward) {
        k.iface.bindings = {{"x", spec.dtype}, {"gy", spec.dtype}, {"gx", spec.dtype, true}};
    } else {
        k.iface.bindings = {{"x", spec.dtype}, {"y", spec.dtype, true}};
    }
    k.glsl = glsl_preamble(k.iface) + "#define STORE " + storage_type(spec.dtype) + "\n" + kFlatGroupId + kArgmax +
             (backward ? kBackward : kForward);
    k.groups = grid_for((static_cast<uint64_t>(total) + launch.local_size - 1) / launch.local_size, launch.max_groups);
    return k;
}

}  // namespace mn::codegen
