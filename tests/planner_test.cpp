// The memory planner: unit checks of the packing, and random graphs run with and without
// aliasing must give bit-identical results (a planner bug corrupts results silently).
#include <random>

#include "gpu_check.hpp"
#include "memory/placement.hpp"
#include "memory/planner.hpp"

namespace mn::test {
namespace {

TEST(PlannerTest, DisjointLifetimesShareBytesAndOverlappingOnesDoNot) {
    const std::vector<memory::Request> reqs = {{1000, 0, 1}, {1000, 2, 3}, {500, 1, 2}, {2000, 4, 4}};
    const auto plan = memory::plan_arena(reqs, 256);
    EXPECT_EQ(plan.logical_bytes, 1024u + 1024 + 512 + 2048);
    EXPECT_LT(plan.physical_bytes, plan.logical_bytes);
    for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(plan.offsets[i] % 256, 0u);
        for (size_t j = i + 1; j < reqs.size(); ++j) {
            const bool live_together = reqs[i].first <= reqs[j].last && reqs[j].first <= reqs[i].last;
            const bool share = plan.offsets[i] < plan.offsets[j] + reqs[j].bytes &&
                               plan.offsets[j] < plan.offsets[i] + reqs[i].bytes;
            EXPECT_FALSE(live_together && share) << i << " and " << j;
        }
    }
    const auto flat = memory::plan_arena(reqs, 256, false);
    EXPECT_EQ(flat.physical_bytes, flat.logical_bytes);
}

// A random chain of ops over a few live values, so lifetimes interleave.
Graph random_graph(uint64_t seed) {
    std::mt19937_64 rng(seed);
    Graph g;
    std::vector<Tensor> pool = {g.input("x", {17, 23}), g.input("y", {17, 23})};
    auto pick = [&] { return pool[rng() % pool.size()]; };
    for (int i = 0; i < 24; ++i) {
        Tensor t;
        switch (rng() % 6) {
            case 0: t = g.add(pick(), pick()); break;
            case 1: t = g.mul(pick(), g.tanh(pick())); break;
            case 2: t = g.softmax(pick(), static_cast<int64_t>(rng() % 2)); break;
            case 3: t = g.matmul(pick(), pick(), false, true); t = g.slice(g.matmul(t, pick()), 0, 0, 17); break;
            case 4: t = g.expand(g.mean(pick(), {0}, true), {17, 23}); break;
            default: t = g.transpose(g.reshape(g.transpose(pick(), 0, 1), {23, 17}), 0, 1); break;
        }
        pool.push_back(t);
        if (pool.size() > 5) pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(rng() % pool.size()));
    }
    for (size_t i = 0; i < pool.size(); ++i) g.output("out" + std::to_string(i), pool[i]);
    return g;
}

// place_values on its own, over a lowered schedule: pinned values (inputs, outputs) never share bytes;
// arena values share only when no level touches both; every value in use has a home.
TEST(PlacementTest, ValuesAliveTogetherNeverShareBytes) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
        const Graph g = random_graph(seed);
        std::vector<int32_t> roots;
        for (const auto& [name, id] : g.outputs()) roots.push_back(id);
        sched::Schedule s = sched::lower(g, roots, sched::tune_for(device().context()->caps()));
        sched::order_by_level(s);
        const memory::Placement p = memory::place_values(s, 256, true);
        for (size_t a = 0; a < s.values.size(); ++a) {
            if (s.values[a].view_of >= 0 || p.first[a] < 0) continue;
            EXPECT_EQ(p.offset[a] % 256, 0u);
            for (size_t b = a + 1; b < s.values.size(); ++b) {
                if (s.values[b].view_of >= 0 || p.first[b] < 0 || p.pinned[a] != p.pinned[b]) continue;
                const bool together = p.pinned[a] || (p.first[a] <= p.last[b] && p.first[b] <= p.last[a]);
                const bool share = p.offset[a] < p.offset[b] + s.values[b].bytes() && p.offset[b] < p.offset[a] + s.values[a].bytes();
                EXPECT_FALSE(together && share) << "seed " << seed << ": values " << a << " and " << b;
            }
        }
        EXPECT_LT(p.arena.physical_bytes, p.arena.logical_bytes) << "seed " << seed << ": nothing was shared";
    }
}

using PlannerGpuTest = GpuTest;

TEST_F(PlannerGpuTest, RandomGraphsGiveIdenticalResultsWithAndWithoutAliasing) {
    for (uint64_t seed = 0; seed < 6; ++seed) {
        const Graph g = random_graph(seed);
        const auto feeds = random_feeds(g, seed, {-1, 1});
        CompileOptions planned{.poison_outputs = true};
        CompileOptions unplanned{.plan_memory = false, .poison_outputs = true};
        Session a = compile(g, device(), planned);
        Session b = compile(g, device(), unplanned);
        EXPECT_LT(a.stats().physical_bytes, b.stats().physical_bytes) << "seed " << seed;
        for (Session* s : {&a, &b}) {
            set_feeds(*s, g, feeds);
            s->run();
        }
        for (const auto& [name, id] : g.outputs()) EXPECT_EQ(a.get(name), b.get(name)) << name << " seed " << seed;
        expect_matches_reference(g, feeds, 1e-5);
    }
}

}  // namespace
}  // namespace mn::test
