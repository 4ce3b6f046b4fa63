// Session 41 diagnostic (not committed): cooperative pieces summed in the product against their sum's dispatch.
#include <cmath>
#include <cstdio>
#include <map>

#include "gpu_check.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using DiagTest = GpuTest;

TEST_F(DiagTest, CoopPiecesSummed) {
  {  // the start-up check, before K is forced into pieces
    Graph w;
    w.output("c", w.matmul(w.input("a", {64, 64}), w.input("b", {64, 64})));
    CompileOptions fast;
    fast.precision = Precision::Fast;
    Session s = compile(w, device(), fast);
  }
  for (const bool poison : {false, true}) {
    std::printf("=== poison %d\n", int(poison));
    const ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3");
    Graph g;
    g.output("plain", g.matmul(g.input("a", {64, 96}), g.input("b", {96, 64})));
    g.output("edge", g.matmul(g.input("e", {37, 70}), g.input("f", {70, 41})));
    g.output("tn", g.matmul(g.input("t", {33, 129}), g.input("u", {33, 50}), true, false));
    g.output("conv", g.conv2d(g.input("image", {2, 8, 9, 9}), g.input("filter", {5, 8, 3, 3}), std::nullopt,
                              {.stride = 2, .padding = 1}));
    const ref::Feeds feeds = random_feeds(g, 4900);
    const std::map<std::string, std::pair<int, int>> dims = {{"plain", {64, 64}}, {"edge", {37, 41}}, {"conv", {10, 25}}, {"tn", {129, 50}}};
    CompileOptions fast;
    fast.precision = Precision::Fast;
    fast.poison_outputs = poison;
    const auto want = ref::evaluate(g, feeds);
    std::map<std::string, int32_t> out_id;
    for (const auto& [n, id] : g.outputs()) out_id[n] = id;
    std::map<std::string, std::map<std::string, std::vector<float>>> runs;
    for (const char* where : {"product", "dispatch"}) {
        const ScopedEnv sum("MEGANEURA_SPLIT_SUM", where);
        Session s = compile(g, device(), fast);
        std::printf("%s: %zu dispatches\n", where, static_cast<size_t>(s.stats().dispatches));
        set_feeds(s, g, feeds);
        for (int run = 0; run < 2; ++run) {
            s.run();
            for (const auto& [name, d] : dims) {
                std::vector<float> v = s.get(name);
                if (run == 0) runs[where][name] = v;
                else if (v != runs[where][name]) std::printf("%s %s: run 2 differs from run 1\n", where, name.c_str());
            }
        }
    }
    for (const auto& [name, d] : dims) {
        const std::vector<float>& p = runs["product"][name];
        const std::vector<float>& q = runs["dispatch"][name];
        const int cols = d.second;
        double num = 0, den = 0;
        int bad = 0, shown = 0;
        for (size_t i = 0; i < q.size(); ++i) {
            num += (p[i] - q[i]) * double(p[i] - q[i]);
            den += q[i] * double(q[i]);
            if (std::fabs(p[i] - q[i]) > 1e-4 * (std::fabs(q[i]) + 1e-3)) {
                ++bad;
                if (shown++ < 24) {
                    long found = -1;
                    for (size_t j = 0; j < q.size(); ++j) {
                        if (std::fabs(p[i] - q[j]) <= 1e-5 * std::fabs(q[j]) + 1e-7) { found = long(j); break; }
                    }
                    std::printf("  %s [%zu] (%zu,%zu): product %.6g dispatch %.6g ratio %.4f; equals dispatch[%ld] (%ld,%ld)\n",
                                name.c_str(), i, i / cols, i % cols, p[i], q[i], p[i] / q[i], found,
                                found < 0 ? -1 : found / cols, found < 0 ? -1 : found % cols);
                }
            }
        }
        std::printf("%s: %zu elements, %d differ, relative L2 %.5g; against the reference: product %.5g, dispatch %.5g\n",
                    name.c_str(), q.size(), bad, std::sqrt(num / den),
                    relative_l2(p, want[size_t(out_id.at(name))].data), relative_l2(q, want[size_t(out_id.at(name))].data));
        for (size_t r = 0; r * cols < q.size(); ++r) {
            std::string row;
            bool any = false;
            for (size_t c = 0; c < size_t(cols); ++c) {
                const size_t i = r * cols + c;
                const bool x = std::fabs(p[i] - q[i]) > 1e-4 * (std::fabs(q[i]) + 1e-3);
                row += x ? 'X' : '.';
                any = any || x;
            }
            if (any) std::printf("%4zu %s\n", r, row.c_str());
        }
    }
  }
}

}  // namespace
}  // namespace mn::test
