// Level ordering (schedule/levels.cpp): independent chains interleave so they share barriers,
// and the results stay those of the reference.
#include "gpu_check.hpp"

namespace mn::test {
namespace {

class ScheduleTest : public GpuTest {};

TEST_F(ScheduleTest, IndependentChainsShareBarriers) {
    Graph g;
    // Three chains of three reductions each, written one chain after the other.
    for (int c = 0; c < 3; ++c) {
        Tensor x = g.input("x" + std::to_string(c), {4, 33});
        for (int i = 0; i < 3; ++i) x = g.softmax(x * 2.0, -1);
        g.output("y" + std::to_string(c), x);
    }
    const Session s = compile(g, device());
    // Per chain 6 dependent steps (scale, softmax, three times: a reduction does not fuse), the three chains'
    // first scales, of their inputs alone, one batch (FusionPlan::leaf_batch). Interleaved, the chains need the
    // barriers of one chain only: 5 between its steps, one after the input uploads and one before the readbacks
    // (chain after chain would need 17).
    EXPECT_EQ(s.stats().dispatches, 16u);
    EXPECT_EQ(s.stats().barriers, 7u);
    expect_matches_reference(g, random_feeds(g, 5));
}

}  // namespace
}  // namespace mn::test
