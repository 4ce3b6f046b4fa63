#pragma once
// Lowering (sched::lower): one or a few kernels per live node, in graph order. Composite ops that need
// intermediate results (cross-entropy, mse, reductions over scattered axes) get scratch values.
//
// A private header of schedule/, included only by the four files that define the class, one part each:
//   lower.cpp              run(), lower(id) (which kernel a node becomes, after the fusion plan), the values
//                          and the steps, and sched::lower
//   lower_pointwise.cpp    pointwise kernels and fused trees, batched updates, copies, reductions
//   lower_products.cpp     matmuls and convolutions, and their f16 weights
//   lower_transformer.cpp  embedding, norms, RoPE, the cache write, attention
// The members below are grouped by the file that defines them, where their comments are.
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "schedule/fusion.hpp"
#include "schedule/schedule.hpp"

namespace mn::sched::detail {

inline std::vector<int64_t> contiguous_strides(const Shape& s) {
    std::vector<int64_t> st(s.size(), 1);
    for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
    return st;
}

// Strides that read `in` (NumPy-aligned to the right) while iterating `out`; 0 on broadcast dims.
inline std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
    std::vector<int64_t> st(out.size(), 0);
    const auto in_st = contiguous_strides(in);
    const size_t lead = out.size() - in.size();
    for (size_t d = 0; d < in.size(); ++d) st[lead + d] = in[d] == 1 ? 0 : in_st[d];
    return st;
}

class Lowering {
public:
    Lowering(const Graph& g, const Tuning& t) : g_(g), t_(t) {}

    Schedule run(const std::vector<int32_t>& roots);

private:
    // lower.cpp
    void lower(int32_t id);
    int32_t new_value(Shape shape, DType dtype, Storage storage = Storage::Transient, int32_t node = -1);
    int32_t stored_here(int32_t node);
    int32_t value_of(int32_t node) const { return s_.node_value[static_cast<size_t>(node)]; }
    int32_t id_of(const Node& n) const { return static_cast<int32_t>(&n - g_.nodes().data()); }  // n: one of g_'s
    const Value& value(int32_t v) const { return s_.values[static_cast<size_t>(v)]; }
    int32_t view_for(int32_t id, int32_t target);
    int32_t product_output(int32_t node, DType dtype);
    void emit(codegen::KernelSource k, std::vector<int32_t> values);
    void emit_through_partials(codegen::KernelSource first, std::optional<codegen::KernelSource> finish,
                               int64_t partial_elements, std::vector<int32_t> inputs, const std::vector<int32_t>& outs,
                               int64_t tile_counters = 0, bool summed_as_read = false);

    // lower_pointwise.cpp
    struct Batched {
        codegen::PointwiseBatch::Member member;
        std::vector<int32_t> values;  // per key of the member, inputs then outputs: the value it binds
    };
    void pointwise(Op op, const std::vector<int32_t>& ins, int32_t out);
    // A fused tree's kernel: its spec (as an epilogue of `product`, whose value its inputs -1 and -2 stood for, where
    // it has one), the values its other inputs bind, and the nodes it stores besides the root with their values.
    struct FusedTree {
        codegen::Epilogue epilogue;
        std::vector<int32_t> bind, extra;
        int32_t product = -1;
    };
    FusedTree fused_tree(int32_t root, DType out_dtype);
    FusedTree prologue_tree(int32_t root);
    void fused_pointwise(int32_t root, int32_t out, const std::vector<int32_t>& parts = {});
    bool stack_leaves(const Node& n, int32_t out);
    void add_to_batch(const std::string& name, codegen::PointwiseSpec spec, std::vector<int32_t> bind);
    Batched batched(codegen::PointwiseSpec spec, std::vector<int32_t> bind) const;
    void lower_leaf_batch(uint8_t batch);
    void emit_batches(const std::string& name, const std::vector<Batched>& members);
    bool is_view_of(int32_t node, int32_t product) const;
    void add_leaf(codegen::PointwiseSpec& spec, int32_t v);
    void add_strided_leaf(codegen::PointwiseSpec& spec, int32_t v, const Node& n);
    int32_t value_now(int32_t n);
    void copy(int32_t in, int32_t out, codegen::CopySpec spec);
    void reduce(codegen::ReduceMode mode, int32_t in, int32_t out, int64_t outer, int64_t r, int64_t inner,
                int64_t lead = 1, const FusedTree* prologue = nullptr);
    bool hold_column_sum(int32_t in, int32_t out, int64_t outer, int64_t r, int64_t inner, int64_t lead);
    void emit_held_sums(bool all);
    void lower_reduce(int32_t id, int32_t out);

    // lower_products.cpp
    // What a matmul computes besides the product (codegen::MatmulSpec): a GEMV of one row, A's RMSNorm; a second product
    // (a GEMV's, or where K is split, the split sum's); a split of K, the RMSNorm of C's rows in its sum.
    struct ProductExtras {
        double a_rms_eps = 0;
        bool b2 = false;
        int32_t b2_node = -1;  // the second product's W, cast to f16 with the first's (f16_weight)
        int32_t a2_node = -1;  // the second product's A where it has one of its own (MatmulSpec::a2), bound after W2
        int32_t sum_norm = -1;  // FusionPlan::sum_norm
        int32_t sum_delta = -1;  // FusionPlan::sum_delta
        int32_t sum_norm_grad = -1;  // FusionPlan::sum_norm_grad
    };
    void lower_product(int32_t id, const std::vector<int32_t>& outs, const codegen::Epilogue* epilogue = nullptr,
                       const std::vector<int32_t>& epilogue_inputs = {});
    int32_t f16_weight(int32_t node, int32_t v);
    int32_t weight_in_octets(int32_t w16);
    // The matmul spec of product `n` whose operands are shaped sa and sb (values: f16 copies keep the shapes).
    codegen::MatmulSpec matmul_spec(const Node& n, const Shape& sa, const Shape& sb) const;
    // How product `id`'s K is split where it is a matmul (its epilogue then runs in the sum of its pieces), for the
    // fusion plan (ProductSplit).
    ProductSplit product_split(int32_t id);
    void lower_matmul(const Node& n, const codegen::MatmulTuning& tuning, int32_t a, int32_t b,
                      const std::vector<int32_t>& outs, const codegen::Epilogue* epilogue,
                      const std::vector<int32_t>& epilogue_inputs, const ProductExtras& extras);
    codegen::ColumnPart column_part(int32_t out, std::vector<int32_t>& rope_inputs, int32_t& start) const;
    void emit_product(codegen::MatmulKernels kernels, int32_t a, int32_t b, const std::vector<int32_t>& outs,
                      const std::vector<int32_t>& epilogue_inputs);
    void emit_product_pair(codegen::MatmulKernels kernels, int32_t a, int32_t b, const std::vector<int32_t>& outs,
                           std::vector<int32_t> epilogue_inputs, bool second_a);
    void lower_conv(const Node& n, const codegen::MatmulTuning& tuning, int32_t a, int32_t b, int32_t out,
                    const codegen::Epilogue* epilogue, const std::vector<int32_t>& epilogue_inputs);

    // lower_transformer.cpp
    // The attention ops come in families that one kernel computes together: Attention with its
    // AttentionLse, AttentionGradK with AttentionGradV. Whichever member is lowered first emits
    // the kernel, with a scratch value for its sibling; the sibling becomes a view of it.
    struct AttentionKey {
        std::vector<int32_t> inputs;
        std::vector<int64_t> ints;
        std::vector<double> data;
        bool backward;
        auto operator<=>(const AttentionKey&) const = default;
    };
    static AttentionKey attention_key(const Node& n);
    bool lower_transformer(const Node& n, int32_t out);
    void slice_scatter(const Node& n, int32_t out, bool in_place);
    void lower_norm(const Node& n, int32_t out, const codegen::Epilogue* epilogue = nullptr,
                    const std::vector<int32_t>& epilogue_inputs = {});
    int32_t up_xhat_output(int32_t grad);
    void lower_norm_grad(const Node& n, int32_t out, const codegen::Epilogue* epilogue = nullptr,
                         const std::vector<int32_t>& epilogue_inputs = {});
    std::vector<int32_t> norm_bindings(const Node& n, int32_t out, const std::vector<int32_t>& epilogue_inputs) const;
    codegen::AttentionSpec attention_spec(const Node& n) const;
    void lower_rope(const Node& n, int32_t out, bool merged_out, const Node* cache = nullptr);
    void lower_attention(int32_t id, int32_t out, bool merged_out = false);
    int32_t rotated_value(int32_t rope);
    // The live node of `op` over n's operands and attributes (n's sibling, or the dQ of n's dK/dV), or -1.
    int32_t attention_member(const Node& n, Op op) const;
    void grad_q_from_scores(const codegen::AttentionSpec& s, int32_t scores, int32_t k, int32_t out);
    codegen::AttentionTiles attention_tiles(bool backward) const;
    int32_t attention_delta(codegen::AttentionSpec spec, int32_t out, int32_t d_out);
    // Whether an attention's output value is stored with its heads merged (it stands for the merge's permute).
    bool heads_merged(int32_t out) const;

    const Graph& g_;
    const Tuning& t_;
    Schedule s_;
    FusionPlan fusion_;
    std::vector<bool> lowered_;                    // by node: lower() has run (value_now may run it early)
    std::vector<bool> invariant_;                  // by node, where f16 weights are on (parameter_only_nodes)
    std::vector<bool> split_;                      // by node, where split_forward is (before_piecewise_gradients)
    std::map<int32_t, int32_t> f16_copies_;        // value -> its f16 copy (f16_weight)
    std::map<int32_t, int32_t> octet_copies_;      // f16 copy -> the same stored in octets (weight_in_octets)
    std::map<int32_t, ProductSplit> product_splits_;  // by matmul node, as the plan asked (product_split)
    // a sum's value -> the partials that stand for it and how its readers add them (emit_through_partials)
    std::map<int32_t, std::pair<int32_t, codegen::PointwiseSpec::Pieces>> pieces_of_;
    // Column sums held to run as one dispatch (hold_column_sum), by their input's dtype and [lead, outer, r, inner]:
    // the step count when the first was held, and per sum its input and pieces.
    struct HeldSums {
        size_t first_step = 0;
        std::vector<int32_t> ins, pieces;
    };
    std::map<std::tuple<DType, int64_t, int64_t, int64_t, int64_t>, HeldSums> held_sums_;
    std::vector<bool> written_in_place_;  // by node: a later kernel writes into its bytes (FusionPlan::in_place_of)
    std::vector<std::pair<std::string, std::vector<Batched>>> batches_;  // by name, in order of first use
    std::map<std::pair<AttentionKey, Op>, int32_t> attention_members_;  // every live attention node (attention_member)
    std::map<AttentionKey, int32_t> attention_siblings_;
    std::map<AttentionKey, int32_t> attention_scores_;  // a dK/dV kernel's stored dS (grad_q_from_scores), for its dQ
    std::map<std::pair<int32_t, int32_t>, int32_t> attention_deltas_;  // (out, d_out) values -> delta (attention_delta)
};

}  // namespace mn::sched::detail
