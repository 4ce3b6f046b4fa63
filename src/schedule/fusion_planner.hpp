#pragma once
// The fusion planner behind plan_fusion (fusion.hpp): its decisions about kernels (inlining, values stored by a later
// kernel, co-roots, epilogues and pairs of products, assignments in place, batched updates) in fusion.cpp, and about
// the layouts of a transformer's tensors (the heads split and merged, RoPEs, norms in products, rows into caches) in
// fusion_layouts.cpp.
#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "schedule/fusion.hpp"

namespace mn::sched::detail {

inline bool is_pointwise(const Node& n) { return op_info(n.op).archetype == Archetype::Pointwise; }

class FusionPlanner {
public:
    FusionPlanner(const Graph& g, const std::vector<bool>& live, const std::vector<int32_t>& roots, uint32_t max_inputs,
                  const std::function<bool(int32_t)>& takes_update, const std::function<ProductSplit(int32_t)>& split_of);
    FusionPlan run();

private:
    // Kernels (fusion.cpp).
    void try_read_strided(int32_t id);
    void try_concat_reads_expands(int32_t concat);
    int32_t only_reader(int32_t id) const;
    void index_epilogue_products();
    bool inlinable(int32_t node, int32_t consumer) const;
    void grow(int32_t root);
    size_t pending_leaves(const std::vector<int32_t>& stack, int32_t current) const;
    int32_t kernel_of(int32_t n) const;
    std::set<int32_t> leaves_of(int32_t root) const;
    bool is_named_update(int32_t root) const;
    void try_store_in_reader(int32_t root);
    bool early(int32_t n) const;
    void try_co_root(int32_t r);
    void try_epilogue(int32_t root);
    void try_pair(int32_t product, int32_t root, const std::set<int32_t>& leaves);
    bool read_here_or_later(int32_t n, int32_t root) const;
    bool read_only_by(int32_t n, int32_t reader) const;
    void try_in_place(int32_t assign);
    int32_t emitted_at(int32_t n) const;
    bool old_contents_read_before(int32_t assign, int32_t writer) const;
    void try_batch(int32_t assign);
    // Layouts (fusion_layouts.cpp).
    void try_rope_of_gradient(int32_t id);
    void try_split_heads_in_rope(int32_t id);
    void try_norm_in_products(int32_t id);
    void try_norm_in_sum(int32_t id);
    void try_delta_in_sum(int32_t grad);
    void try_norm_grad_in_sum(int32_t id);
    bool epilogue_fits_sum(int32_t id, int32_t product, bool keeps) const;
    void try_up_xhat_in_norm_grad(int32_t norm);
    void try_store_column_slices(int32_t id);
    bool own_kernel(int32_t root) const;
    void try_prologue(int32_t reduction);
    void try_norm_prologue(int32_t norm);
    void try_leaf_batch(int32_t root, const std::vector<bool>& assigned);
    void try_sum_as_read(int32_t sum);
    std::vector<int32_t> matmuls_storing_alone() const;
    void try_store_heads_split(int32_t stored);
    int32_t merge_of(int32_t id) const;
    void try_merge_heads(int32_t id);
    void try_rows_in_gemv(int32_t product);
    void try_rows_rotated_in_sum(int32_t product);
    void try_write_rows_in_place(int32_t assign);

    // Calls evaluated(n) for every node the kernel rooted at `root` evaluates (root included) and leaf(n) for
    // every input of its tree that it does not evaluate (a leaf read twice is visited twice).
    template <class Evaluated, class Leaf>
    void walk(int32_t root, Evaluated evaluated, Leaf leaf) const {
        std::vector<int32_t> stack{root};
        stack.insert(stack.end(), plan_.co_roots[static_cast<size_t>(root)].begin(), plan_.co_roots[static_cast<size_t>(root)].end());
        while (!stack.empty()) {
            const int32_t n = stack.back();
            stack.pop_back();
            evaluated(n);
            for (int32_t in : g_.node(n).inputs) {
                if (plan_.inlined[static_cast<size_t>(in)] || plan_.stored_in[static_cast<size_t>(in)] == root) {
                    stack.push_back(in);
                } else if (const Node& a = g_.node(in); a.op == Op::Assign && plan_.stored_in[static_cast<size_t>(a.inputs[1])] == root) {
                    stack.push_back(a.inputs[1]);
                } else {
                    leaf(in);
                }
            }
        }
    }

    const Graph& g_;
    const std::vector<bool>& live_;
    const uint32_t max_inputs_;
    const std::function<bool(int32_t)>& takes_update_;
    const std::function<ProductSplit(int32_t)>& split_of_;
    std::vector<std::vector<int32_t>> consumers_;
    std::vector<bool> is_root_;
    std::vector<uint32_t> stored_outputs_;  // per kernel root: the values it stores besides its own
    std::vector<bool> varies_;  // by node: depends on the run's inputs or state (else hoistable: schedule/hoist.cpp)
    // by node: the most products, reductions, convolutions, attentions and data movements on a path from a graph leaf
    // to it, itself included (pointwise ops fuse into them): about how many levels it waits
    std::vector<int32_t> depth_;
    FusionPlan plan_;
};

}  // namespace mn::sched::detail
