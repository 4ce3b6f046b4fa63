// The row-wise attention kernels, for problems with few rows (a decode step, small heads): a workgroup owns BR
// rows, TPR threads per row; each thread owns the columns d = lane + c*TPR of its row (neighbouring threads touch
// neighbouring shared words). Per tile, each thread computes the scores of its row for the tile entries
// jj = lane + n*TPR into shared memory; after a barrier every thread of the row reads the whole score row back,
// so no cross-thread reduction is needed. attention.cpp supplies the interface and the shared definitions
// (its kCommon: QUERY_BLOCK, STAGE_KV, HEAD_DIM, the masks and the splits).
#include "codegen/attention_rowwise.hpp"

namespace mn::codegen {

const char* const kRowwiseForward = R"(
shared float Qs[BR * DS];
shared float Ks[BT * DS];
shared float Vs[BT * DS];
shared float Ss[BR * SS];

void main() {
    QUERY_BLOCK

    uint qbase = (head * ROWS + r0) * D;
    for (uint e = lid; e < BR * D; e += WG) {
        uint i = e / D;
        Qs[i * DS + e % D] = r0 + i < ROWS ? float(q.d[qbase + e]) * scale() : 0.0;
    }
    float acc[DPT];
    [[unroll]] for (uint c = 0u; c < DPT; ++c) acc[c] = 0.0;
    float m = NEG_INF, l = 0.0;
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        barrier();  // the previous tile is consumed (and Qs staged, on the first pass)
        STAGE_KV(j0)
        barrier();
        for (uint jj = lane; jj < BT; jj += TPR) {
            uint j = j0 + jj;
            float s = NEG_INF;
            if (live && j < keys.y && sees(position, j)) {
                s = 0.0;
                HEAD_DIM(d) s += Qs[row * DS + d] * Ks[jj * DS + d];
            }
            Ss[row * SS + jj] = s;
        }
        barrier();
        float tile_max = NEG_INF;
        [[unroll]] for (uint jj = 0u; jj < BT; ++jj) tile_max = max(tile_max, Ss[row * SS + jj]);
        float m_new = max(m, tile_max);
        if (m_new == NEG_INF) continue;  // nothing seen yet: acc and l stay 0
        float alpha = exp(m - m_new);
        l *= alpha;
        [[unroll]] for (uint c = 0u; c < DPT; ++c) acc[c] *= alpha;
        for (uint jj = 0u; jj < BT; ++jj) {
            float p = exp(Ss[row * SS + jj] - m_new);
            l += p;
            [[unroll]] for (uint c = 0u; c < DPT; ++c) {
                uint d = lane + c * TPR;
                if (d < D) acc[c] += p * Vs[jj * DS + d];
            }
        }
        m = m_new;
    }
#ifdef SPLIT
    // The chunk's record for the combine kernel: unnormalized sums, then m and l.
    uint pbase = ((head * ROWS + r) * SPLITS + split) * (D + 2u);
    [[unroll]] for (uint c = 0u; c < DPT; ++c) {
        uint d = lane + c * TPR;
        if (live && d < D) part.d[pbase + d] = acc[c];
    }
    if (live && lane == 0u) {
        part.d[pbase + D] = m;
        part.d[pbase + D + 1u] = l;
    }
#ifdef COMBINE
    combine_block(head, r0, qblock);
#endif
#else
    if (!live) return;
    float inv = l > 0.0 ? 1.0 / l : 0.0;  // a row that sees no key yields zeros
    uint obase = out_row(head * ROWS + r) * D;
    [[unroll]] for (uint c = 0u; c < DPT; ++c) {
        uint d = lane + c * TPR;
        if (d < D) o.d[obase + d] = STORE(acc[c] * inv);
    }
    if (lane == 0u) lse.d[head * ROWS + r] = l > 0.0 ? m + log(l) : NEG_INF;
#endif
}
)";

const char* const kRowwiseGradQ = R"(
shared float Qs[BR * DS];
shared float Os[BR * DS];
shared float Ks[BT * DS];
shared float Vs[BT * DS];
shared float Ss[BR * SS];

void main() {
    QUERY_BLOCK
    float row_lse = live ? lse.d[head * ROWS + r] : 0.0;
    float row_delta = live ? delta.d[head * ROWS + r] : 0.0;

    uint qbase = (head * ROWS + r0) * D;
    for (uint e = lid; e < BR * D; e += WG) {
        uint i = e / D;
        bool in_range = r0 + i < ROWS;
        Qs[i * DS + e % D] = in_range ? float(q.d[qbase + e]) * scale() : 0.0;
        Os[i * DS + e % D] = in_range ? float(dout.d[qbase + e]) : 0.0;
    }
    float acc[DPT];
    [[unroll]] for (uint c = 0u; c < DPT; ++c) acc[c] = 0.0;
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        barrier();
        STAGE_KV(j0)
        barrier();
        for (uint jj = lane; jj < BT; jj += TPR) {
            uint j = j0 + jj;
            float ds = 0.0;
            if (live && j < keys.y && sees(position, j)) {
                float s = 0.0, dp = 0.0;
                HEAD_DIM(d) {
                    s += Qs[row * DS + d] * Ks[jj * DS + d];
                    dp += Os[row * DS + d] * Vs[jj * DS + d];
                }
                ds = exp(s - row_lse) * (dp - row_delta);
            }
            Ss[row * SS + jj] = ds;
        }
        barrier();
        for (uint jj = 0u; jj < BT; ++jj) {
            float ds = Ss[row * SS + jj];
            [[unroll]] for (uint c = 0u; c < DPT; ++c) {
                uint d = lane + c * TPR;
                if (d < D) acc[c] += ds * Ks[jj * DS + d];
            }
        }
    }
    if (!live) return;
    uint obase = out_row(head * ROWS + r) * D;
    [[unroll]] for (uint c = 0u; c < DPT; ++c) {
        uint d = lane + c * TPR;
        if (d < D) dq.d[obase + d] = STORE(acc[c] * scale());
    }
}
)";

const char* const kRowwiseGradKV = R"(
shared float Ks[BR * DS];
shared float Vs[BR * DS];
shared float Qs[BT * DS];
shared float Os[BT * DS];
shared float Ls[BT];
shared float Dl[BT];
shared float Ps[BR * SS];
shared float Gs[BR * SS];

void main() {
    uint lid = gl_LocalInvocationID.x, row = lid / TPR, lane = lid % TPR;
    uint blocks = (TK + BR - 1u) / BR;
    uint g = mn_group_id();
    if (g >= HEADS * blocks) return;
    uint head = g / blocks, j0 = (g % blocks) * BR, j = j0 + row;
    bool live = j < TK;
    int s0 = query_start();
    uvec2 queries = query_range(j0, min(j0 + BR, TK) - 1u);

    uint kbase = (head * TK + j0) * D;
    for (uint e = lid; e < BR * D; e += WG) {
        uint jj = e / D;
        bool in_range = j0 + jj < TK;
        Ks[jj * DS + e % D] = in_range ? float(k.d[kbase + e]) : 0.0;
        Vs[jj * DS + e % D] = in_range ? float(v.d[kbase + e]) : 0.0;
    }
    float dk_acc[DPT], dv_acc[DPT];
    [[unroll]] for (uint c = 0u; c < DPT; ++c) { dk_acc[c] = 0.0; dv_acc[c] = 0.0; }
    for (uint gh = 0u; gh < G; ++gh) {
        for (uint t0 = queries.x; t0 < queries.y; t0 += BT) {
            barrier();
            uint rbase = head * ROWS + gh * TQ + t0;  // the tile's first row
            for (uint e = lid; e < BT * D; e += WG) {
                uint i = e / D;
                bool in_range = t0 + i < queries.y;
                Qs[i * DS + e % D] = in_range ? float(q.d[rbase * D + e]) * scale() : 0.0;
                Os[i * DS + e % D] = in_range ? float(dout.d[rbase * D + e]) : 0.0;
            }
            for (uint i = lid; i < BT; i += WG) {
                bool in_range = t0 + i < queries.y;
                Ls[i] = in_range ? lse.d[rbase + i] : 0.0;
                Dl[i] = in_range ? delta.d[rbase + i] : 0.0;
            }
            barrier();
            for (uint i = lane; i < BT; i += TPR) {
                uint t = t0 + i;
                float p = 0.0, ds = 0.0;
                if (live && t < queries.y && sees(s0 + int(t), j)) {
                    float s = 0.0, dp = 0.0;
                    HEAD_DIM(d) {
                        s += Qs[i * DS + d] * Ks[row * DS + d];
                        dp += Os[i * DS + d] * Vs[row * DS + d];
                    }
                    p = exp(s - Ls[i]);
                    ds = p * (dp - Dl[i]);
                }
                Ps[row * SS + i] = p;
                Gs[row * SS + i] = ds;
            }
            barrier();
            for (uint i = 0u; i < BT; ++i) {
                float p = Ps[row * SS + i], ds = Gs[row * SS + i];
                [[unroll]] for (uint c = 0u; c < DPT; ++c) {
                    uint d = lane + c * TPR;
                    if (d < D) {
                        dv_acc[c] += p * Os[i * DS + d];
                        dk_acc[c] += ds * Qs[i * DS + d];  // Qs holds scale * q
                    }
                }
            }
        }
    }
    if (!live) return;
    uint dk_at = kv_row(head * TK + j) * D, dv_at = dv_row(head * TK + j) * D;
    [[unroll]] for (uint c = 0u; c < DPT; ++c) {
        uint d = lane + c * TPR;
        if (d < D) {
            dk.d[dk_at + d] = STORE(dk_acc[c]);
            dv.d[dv_at + d] = STORE(dv_acc[c]);
        }
    }
}
)";

}  // namespace mn::codegen
