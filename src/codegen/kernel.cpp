// Shared pieces of every generated shader: the preamble and the grid helpers.
#include "codegen/kernel.hpp"

#include <algorithm>

namespace mn::codegen {

const char* storage_type(DType t) {
    switch (t) {
        case DType::F32: return "float";
        case DType::F16: return "float16_t";
        case DType::I32: return "int";
    }
    return "float";
}

const char* compute_type(DType t) { return t == DType::I32 ? "int" : "float"; }

std::string glsl_preamble(const KernelInterface& iface) {
    std::string s = "#version 450\n";
    const bool f16 = std::any_of(iface.bindings.begin(), iface.bindings.end(),
                                 [](const Binding& b) { return b.dtype == DType::F16; });
    if (f16) s += "#extension GL_EXT_shader_16bit_storage : require\n"
                  "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n";
    s += "layout(local_size_x = " + std::to_string(iface.local_size) + ") in;\n";
    s += "const uint WG = " + std::to_string(iface.local_size) + "u;\n";
    for (size_t i = 0; i < iface.spec_constants.size(); ++i) {
        s += "layout(constant_id = " + std::to_string(i) + ") const uint " + iface.spec_constants[i] + " = 1u;\n";
    }
    for (size_t i = 0; i < iface.bindings.size(); ++i) {
        const Binding& b = iface.bindings[i];
        s += buffer_view(i, b.name, b.writes ? Access::ReadWrite : Access::Read, storage_type(b.dtype), b.coherent);
    }
    return s;
}

std::string buffer_view(size_t at, const std::string& name, Access access, const std::string& type, bool coherent) {
    const char* qualifier = access == Access::Read ? "readonly " : access == Access::Write ? "writeonly " : "";
    return "layout(std430, set = 0, binding = " + std::to_string(at) + ") " + (coherent ? "coherent " : "") + qualifier +
           "buffer B_" + name + " { " + type + " d[]; } " + name + ";\n";
}

const char* const kFlatGroupId =
    "uint mn_group_id() { return (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * "
    "gl_NumWorkGroups.x + gl_WorkGroupID.x; }\n";

const char* const kWorkgroupPairSum = R"(shared vec2 red[WG];
vec2 wg_sum(vec2 v) {
    uint lid = gl_LocalInvocationID.x;
    red[lid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) red[lid] += red[lid + s];
        barrier();
    }
    vec2 total = red[0];
    barrier();
    return total;
}
)";

const char* const kLaneSum = R"(
#extension GL_EXT_control_flow_attributes : require
shared float lane_sums[WG];
float lane_sum(float v) {
    uint lid = gl_LocalInvocationID.x, lane = lid % TPR;
    lane_sums[lid] = v;
    barrier();
    [[unroll]] for (uint w = TPR / 2u; w > 0u; w /= 2u) {
        if (lane < w) lane_sums[lid] += lane_sums[lid + w];
        barrier();
    }
    return lane_sums[lid];
}
)";

const char* const kLastPieceGlsl = R"(
// Whether this workgroup stored the last of a tile's `arrivals` pieces (cnt counts them, and is zero again after the
// last, for the next run). A barrier makes each workgroup's stores visible device-wide before its count, and the last
// one's loads see them all after. Every invocation calls it after storing its piece.
shared bool tile_summed;
bool last_piece(uint tile, uint arrivals) {
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        tile_summed = atomicAdd(cnt.d[tile], 1) == int(arrivals) - 1;
        if (tile_summed) cnt.d[tile] = 0;
    }
    barrier();
    memoryBarrierBuffer();
    return tile_summed;
}
)";

std::array<uint32_t, 3> grid_for(uint64_t groups, uint32_t max_per_dim) {
    groups = std::max<uint64_t>(groups, 1);
    const uint64_t x = std::min<uint64_t>(groups, max_per_dim);
    const uint64_t rest = (groups + x - 1) / x;
    const uint64_t y = std::min<uint64_t>(rest, max_per_dim);
    const uint64_t z = (rest + y - 1) / y;
    if (z > max_per_dim) throw Error("kernel grid of " + std::to_string(groups) + " workgroups is too large");
    return {static_cast<uint32_t>(x), static_cast<uint32_t>(y), static_cast<uint32_t>(z)};
}

uint32_t checked_u32(int64_t v, const char* what) {
    if (v < 0 || v > 0xFFFFFFFFll) throw Error(std::string(what) + " " + std::to_string(v) + " does not fit 32 bits");
    return static_cast<uint32_t>(v);
}

}  // namespace mn::codegen

namespace mn::codegen {

std::string heads_row_fn(const std::string& fn, const std::string& seq, const std::string& heads) {
    return "uint " + fn + "(uint r) { uint bh = r / (" + seq + "); return ((bh / (" + heads + ")) * (" + seq + ") + r % (" + seq +
           ")) * (" + heads + ") + bh % (" + heads + "); }\n";
}

std::string strided_offset_fn(const std::string& fn, const std::string& dims, const std::string& strides,
                              const std::string& offset) {
    std::string s = "uint " + fn + "(uint i) {\n    uint r = " + offset + ";\n";
    for (int d = kMaxRank - 1; d >= 0; --d) {
        const std::string ds = std::to_string(d);
        s += "    r += (i % " + dims + ds + ") * " + strides + ds + "; i /= " + dims + ds + ";\n";
    }
    return s + "    return r;\n}\n";
}

void add_rank_constants(KernelSource& k, const std::string& prefix, const std::vector<int64_t>& values,
                        int64_t pad) {
    if (values.size() > static_cast<size_t>(kMaxRank)) {
        throw Error("tensors of rank " + std::to_string(values.size()) + " exceed the supported rank " +
                    std::to_string(kMaxRank));
    }
    const size_t lead = kMaxRank - values.size();
    for (int d = 0; d < kMaxRank; ++d) {
        k.iface.spec_constants.push_back(prefix + std::to_string(d));
        const int64_t v = static_cast<size_t>(d) < lead ? pad : values[static_cast<size_t>(d) - lead];
        k.spec_values.push_back(checked_u32(v, prefix.c_str()));
    }
}

}  // namespace mn::codegen
