// A session recorded as K segments into a host's command buffers, one submit per segment as a
// renderer would spread it over K frames in flight, must compute what one submit does, bit for bit:
// the cut points fall between whole commands and the barriers stay where the compiler put them. A
// hazard left open at a cut is what synchronization validation reports (lavapipe runs submits in
// order, so the bits alone would not show it on CI).
#include <cstring>

#include "error_of.hpp"
#include "vulkan_host.hpp"

namespace mn::test {
namespace {

class RecordSegments : public Host {};

// A two-layer regression with AdamW and weight decay: forward, backward and moment updates, a few
// dozen dispatches on lavapipe.
struct Regression {
    Graph g;
    Tensor loss;
    std::vector<std::string> state;  // every parameter and its moments: what a step writes
    Regression() {
        Tensor h = g.relu(g.linear(g.input("x", {16, 6}), g.parameter("fc1.weight", {12, 6}), g.parameter("fc1.bias", {12})));
        loss = g.mse_loss(g.linear(h, g.parameter("fc2.weight", {3, 12}), g.parameter("fc2.bias", {3})), g.input("y", {16, 3}));
        for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
            state.insert(state.end(), {p, std::string("optimizer.exp_avg.") + p, std::string("optimizer.exp_avg_sq.") + p});
    }
    Session compile_on(const Device& dev) const {
        Session s = compile(g, dev, {.loss = loss, .optimizer = AdamW{.lr = 0.05, .weight_decay = 0.1}, .seed = 7});
        const ref::Feeds feeds = random_feeds(g, 11);
        s.set("x", std::vector<float>(feeds.at("x").data.begin(), feeds.at("x").data.end()));
        s.set("y", std::vector<float>(feeds.at("y").data.begin(), feeds.at("y").data.end()));
        return s;
    }
};

std::vector<uint32_t> bits(const std::vector<float>& v) {
    std::vector<uint32_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * 4);
    return out;
}

TEST_F(RecordSegments, TrainingStepsInKSegmentsAreBitIdenticalToOneSubmit) {
    if (HasFatalFailure()) return;
    const Device shared = Device::adopt(handles());
    const Regression r;
    constexpr int kSteps = 3;
    Session whole = r.compile_on(shared);
    std::vector<std::vector<uint32_t>> losses;
    for (int i = 0; i < kSteps; ++i) losses.push_back(bits({whole.step()}));
    ASSERT_GE(whole.stats().dispatches, 4u);

    for (size_t k : {1, 2, 4}) {
        SCOPED_TRACE("K = " + std::to_string(k));
        Session split = r.compile_on(shared);
        for (int i = 0; i < kSteps; ++i) {
            submit(k, [&](VkCommandBuffer cmd, size_t segment) { split.record_step(cmd, segment, k); });
            EXPECT_EQ(bits(split.get("loss")), losses[static_cast<size_t>(i)]) << "step " << i + 1;
        }
        EXPECT_EQ(split.step_count(), kSteps);
        for (const std::string& name : r.state) EXPECT_EQ(bits(split.get(name)), bits(whole.get(name))) << name;
    }
}

TEST_F(RecordSegments, InferenceInSegmentsMatchesRun) {
    if (HasFatalFailure()) return;
    const Device shared = Device::adopt(handles());
    Graph g;
    g.output("y", g.softmax(g.relu(g.matmul(g.input("x", {5, 8}), g.parameter("w", {8, 3}))), -1));
    Session s = compile(g, shared);
    const ref::Feeds a = random_feeds(g, 2), b = random_feeds(g, 3);
    std::vector<std::vector<uint32_t>> want;
    for (const ref::Feeds* feeds : {&a, &b}) {
        set_feeds(s, g, *feeds);
        s.run();
        want.push_back(bits(s.get("y")));
    }
    const size_t k = s.stats().dispatches;  // one dispatch per segment: a cut at every barrier
    ASSERT_GE(k, 2u);
    set_feeds(s, g, a);
    submit(k, [&](VkCommandBuffer cmd, size_t segment) { s.record(cmd, segment, k); });
    EXPECT_EQ(bits(s.get("y")), want[0]);
    // All k segments in one command buffer too: the validation layer checks hazards within a command
    // buffer, not across submits, so this is where it sees every cut.
    set_feeds(s, g, b);
    submit(1, [&](VkCommandBuffer cmd, size_t) {
        for (size_t segment = 0; segment < k; ++segment) s.record(cmd, segment, k);
    });
    EXPECT_EQ(bits(s.get("y")), want[1]);
}

TEST_F(RecordSegments, BadSegmentsAreNamed) {
    if (HasFatalFailure()) return;
    const Device shared = Device::adopt(handles());
    const Regression r;
    Session s = r.compile_on(shared);
    const size_t d = s.stats().dispatches;
    auto* cmd = reinterpret_cast<VkCommandBuffer>(1);  // never reached: the arguments are checked first
    const std::string range = " dispatches; each segment holds at least one, so 1 to " + std::to_string(d);
    EXPECT_EQ(error_of([&] { s.record(cmd, 0, 0); }), "record: 0 segments of a program of " + std::to_string(d) + range);
    EXPECT_EQ(error_of([&] { s.record(cmd, 0, d + 1); }),
              "record: " + std::to_string(d + 1) + " segments of a program of " + std::to_string(d) + range);
    EXPECT_EQ(error_of([&] { s.record_step(cmd, 4, 4); }), "record: segment 4 of 4; segments are numbered 0 to 3");
    EXPECT_EQ(s.step_count(), 0);

    Graph g;
    g.output("y", g.relu(g.input("x", {4})));
    Session inference = compile(g, shared);
    EXPECT_EQ(error_of([&] { inference.record_step(cmd, 0, 1); }),
              "record_step: this session was compiled without a loss (CompileOptions::loss)");
}

}  // namespace
}  // namespace mn::test
