// Matmul family: a workgroup computes a BM x BN tile of C, staging BK-deep slices of A and B in
// shared memory; each thread accumulates a TM x TN register tile whose rows and columns are
// strided across the workgroup tile (so neighbouring threads read neighbouring shared words).
// Transposed operands are read in place: the staging loop walks whichever dimension is
// contiguous in memory, so global reads stay coalesced either way.
#include "codegen/families.hpp"

namespace mn::codegen {

namespace {

constexpr int kMaxBatchRank = 4;

void add_batch_constants(KernelSource& k, const std::string& prefix, const std::vector<int64_t>& v, int64_t pad) {
    if (v.size() > kMaxBatchRank) throw Error("matmul supports at most 4 batch dims");
    const size_t lead = kMaxBatchRank - v.size();
    for (size_t d = 0; d < kMaxBatchRank; ++d) {
        k.iface.spec_constants.push_back(prefix + std::to_string(d));
        k.spec_values.push_back(checked_u32(d < lead ? pad : v[d - lead], "matmul batch stride"));
    }
}

const char* const kBody = R"(
shared float As[BK][BM + 1];
shared float Bs[BK][BN + 1];
const uint TX = BN / TN;   // threads along n
const uint TY = BM / TM;   // threads along m

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint tx = lid % TX, ty = lid / TX;
    uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;

    // batch offsets: decompose z over the output batch dims, apply each operand's strides
    uint z = gl_WorkGroupID.z, a_off = 0u, b_off = 0u;
    uint c3 = z % BD3; z /= BD3; uint c2 = z % BD2; z /= BD2; uint c1 = z % BD1; z /= BD1; uint c0 = z;
    a_off = c0 * AS0 + c1 * AS1 + c2 * AS2 + c3 * AS3;
    b_off = c0 * BS0 + c1 * BS1 + c2 * BS2 + c3 * BS3;
    uint c_off = gl_WorkGroupID.z * M * N;

    float acc[TM][TN];
    for (uint i = 0u; i < TM; ++i) for (uint j = 0u; j < TN; ++j) acc[i][j] = 0.0;

    for (uint k0 = 0u; k0 < K; k0 += BK) {
        for (uint e = lid; e < BM * BK; e += WG) {
            uint row, kk;
            if (TRANS_A == 0u) { row = e / BK; kk = e % BK; } else { kk = e / BM; row = e % BM; }
            uint gm = m0 + row, gk = k0 + kk;
            float v = 0.0;
            if (gm < M && gk < K) v = float(a.d[a_off + (TRANS_A == 0u ? gm * K + gk : gk * M + gm)]);
            As[kk][row] = v;
        }
        for (uint e = lid; e < BN * BK; e += WG) {
            uint col, kk;
            if (TRANS_B == 0u) { kk = e / BN; col = e % BN; } else { col = e / BK; kk = e % BK; }
            uint gn = n0 + col, gk = k0 + kk;
            float v = 0.0;
            if (gn < N && gk < K) v = float(b.d[b_off + (TRANS_B == 0u ? gk * N + gn : gn * K + gk)]);
            Bs[kk][col] = v;
        }
        barrier();
        for (uint kk = 0u; kk < BK; ++kk) {
            float av[TM], bv[TN];
            for (uint i = 0u; i < TM; ++i) av[i] = As[kk][ty + i * TY];
            for (uint j = 0u; j < TN; ++j) bv[j] = Bs[kk][tx + j * TX];
            for (uint i = 0u; i < TM; ++i) for (uint j = 0u; j < TN; ++j) acc[i][j] += av[i] * bv[j];
        }
        barrier();
    }
    for (uint i = 0u; i < TM; ++i) {
        uint gm = m0 + ty + i * TY;
        if (gm >= M) continue;
        for (uint j = 0u; j < TN; ++j) {
            uint gn = n0 + tx + j * TX;
            if (gn < N) c.d[c_off + gm * N + gn] = STORE(acc[i][j]);
        }
    }
}
)";

}  // namespace

KernelSource matmul_kernel(const MatmulSpec& spec, const MatmulTiles& t, uint32_t max_groups) {
    if (t.bm % t.tm || t.bn % t.tn) throw Error("matmul tiles must divide evenly");
    KernelSource k;
    k.label = "matmul";
    k.iface.local_size = (t.bm / t.tm) * (t.bn / t.tn);
    k.iface.spec_constants = {"M", "N", "K", "TRANS_A", "TRANS_B"};
    k.spec_values = {checked_u32(spec.m, "matmul M"), checked_u32(spec.n, "matmul N"), checked_u32(spec.k, "matmul K"),
                     spec.trans_a ? 1u : 0u, spec.trans_b ? 1u : 0u};
    add_batch_constants(k, "BD", spec.batch, 1);
    add_batch_constants(k, "AS", spec.a_batch_strides, 0);
    add_batch_constants(k, "BS", spec.b_batch_strides, 0);
    k.iface.bindings = {{"a", spec.dtype}, {"b", spec.dtype}, {"c", spec.dtype, true}};
    std::string defs = "#define BM " + std::to_string(t.bm) + "u\n#define BN " + std::to_string(t.bn) +
                       "u\n#define BK " + std::to_string(t.bk) + "u\n#define TM " + std::to_string(t.tm) +
                       "u\n#define TN " + std::to_string(t.tn) + "u\n#define STORE " + storage_type(spec.dtype) + "\n";
    k.glsl = glsl_preamble(k.iface) + defs + kBody;
    const int64_t batch = numel(spec.batch);
    const int64_t gx = (spec.n + t.bn - 1) / t.bn, gy = (spec.m + t.bm - 1) / t.bm;
    if (gx > max_groups || gy > max_groups || batch > max_groups) {
        throw Error("matmul grid " + std::to_string(gx) + "x" + std::to_string(gy) + "x" + std::to_string(batch) +
                    " exceeds the device's workgroup limit");
    }
    checked_u32(batch * spec.m * spec.n, "matmul output size");
    k.groups = {static_cast<uint32_t>(std::max<int64_t>(gx, 1)), static_cast<uint32_t>(std::max<int64_t>(gy, 1)),
                static_cast<uint32_t>(std::max<int64_t>(batch, 1))};
    return k;
}

}  // namespace mn::codegen
