#include "optimize/rules.hpp"

#include <algorithm>

namespace mn::optimize {

bool is_involution(Op op) { return std::find(std::begin(kInvolutions), std::end(kInvolutions), op) != std::end(kInvolutions); }

bool all_equal(const Node& c, double value) {
    return c.op == Op::Constant && std::all_of(c.data.begin(), c.data.end(), [&](double x) { return x == value; });
}

bool has_nan(const Node& n) {
    return std::any_of(n.data.begin(), n.data.end(), [](double x) { return x != x; });
}

bool changes_nothing(const Node& n, const Shape& in, DType in_dtype) {
    if (std::find(std::begin(kNoOpWhenSameShape), std::end(kNoOpWhenSameShape), n.op) == std::end(kNoOpWhenSameShape) ||
        n.shape != in || n.dtype != in_dtype) return false;
    if (n.op == Op::Permute) {
        for (size_t d = 0; d < n.ints.size(); ++d) {
            if (n.ints[d] != static_cast<int64_t>(d)) return false;
        }
    }
    if (n.op == Op::Slice) {
        const size_t rank = n.shape.size();
        for (size_t d = 0; d < rank; ++d) {
            if (n.ints[2 * rank + d] != 1) return false;
        }
    }
    return true;
}

bool moves_no_element(const Node& n, const Shape& in) {
    if (n.op != Op::Permute) return false;
    int64_t last = -1;
    for (int64_t d : n.ints) {
        if (in[static_cast<size_t>(d)] == 1) continue;
        if (d < last) return false;
        last = d;
    }
    return true;
}

bool reduces_nothing(const Node& n, const Shape& in) {
    if (n.op != Op::Sum && n.op != Op::Mean && n.op != Op::Max) return false;
    return std::all_of(n.ints.begin(), n.ints.end(), [&](int64_t d) { return in[static_cast<size_t>(d)] == 1; });
}

void make_reshape(Node& n) {
    n.op = Op::Reshape;
    n.ints.clear();
    n.flag = false;
}

}  // namespace mn::optimize
