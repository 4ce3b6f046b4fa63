// Sharing a device with a host application: the test plays a renderer that creates its own
// instance, device and graphics+compute queue, hands them to Device::adopt, records a session into
// its own command buffer next to its own work, and keeps using the device after meganeura is gone.
#include "error_of.hpp"
#include "vulkan_host.hpp"

namespace mn::test {
namespace {

// y = softmax(x @ w): one matmul, one row reduction.
struct Model {
    Graph g;
    Tensor y;
    Model() {
        y = g.softmax(g.matmul(g.input("x", {5, 8}), g.parameter("w", {8, 3})), -1);
        g.output("y", y);
    }
};

void expect_output_matches(const Session& s, const Model& m, const ref::Feeds& feeds) {
    const auto want = ref::evaluate(m.g, feeds)[static_cast<size_t>(m.y.id)].data;
    EXPECT_LE(relative_l2(s.get("y"), want), 1e-5);
}

TEST_F(Host, AdoptedDeviceRunsAndRecordsIntoTheHostsCommandBuffer) {
    if (HasFatalFailure()) return;
    {
        const Device shared = Device::adopt(handles());
        EXPECT_EQ(shared.name(), mn::test::device().name());
        Model m;
        Session s = compile(m.g, shared);
        ref::Feeds feeds = random_feeds(m.g, 1);
        set_feeds(s, m.g, feeds);
        s.run();  // on the shared queue
        expect_output_matches(s, m, feeds);

        // New inputs, then the host's own frame: its work and the session in one command buffer.
        feeds["x"] = random_feeds(m.g, 2)["x"];
        set_feeds(s, m.g, feeds);
        submit(1, [&](VkCommandBuffer cmd, size_t) {
            VkMemoryBarrier renderer_barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};  // stands for the host's own work
            vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                                 &renderer_barrier, 0, nullptr, 0, nullptr);
            s.record(cmd);
        });
        expect_output_matches(s, m, feeds);
    }
    // meganeura is gone; the device is still the host's.
    EXPECT_EQ(vkDeviceWaitIdle(device), VK_SUCCESS);
}

TEST_F(Host, AdoptedDeviceUsesOnlyTheEnabledFeatures) {
    if (HasFatalFailure()) return;
    const Device shared = Device::adopt(handles());  // v12 all false: no f16 arithmetic
    EXPECT_FALSE(shared.context()->caps().shader_float16);
    EXPECT_TRUE(shared.context()->caps().coop_nv.empty() && shared.context()->caps().coop_khr.empty());
    Model m;
    CompileOptions options;
    options.precision = Precision::Fast;  // falls back to the f32 kernels
    Session s = compile(m.g, shared, options);
    const ref::Feeds feeds = random_feeds(m.g, 3);
    set_feeds(s, m.g, feeds);
    s.run();
    expect_output_matches(s, m, feeds);
}

TEST_F(Host, AdoptNamesWhatIsMissing) {
    if (HasFatalFailure()) return;
    VulkanHandles h = handles();
    h.queue = VK_NULL_HANDLE;
    EXPECT_EQ(error_of([&] { Device::adopt(h); }),
              "Device::adopt: VulkanHandles needs an instance, a physical device, a device and a queue");
    h = handles();
    h.api_version = VK_API_VERSION_1_1;
    const std::string old_api = error_of([&] { Device::adopt(h); });
    EXPECT_NE(old_api.find("meganeura needs 1.2"), std::string::npos) << old_api;
}

TEST_F(Host, ProfiledSessionsRunOnlyOnTheirOwnCommandBuffer) {
    if (HasFatalFailure()) return;
    const Device shared = Device::adopt(handles());
    if (!shared.context()->caps().timestamps) GTEST_SKIP() << "no timestamp queries";
    Model m;
    CompileOptions options;
    options.profile = true;
    const Session s = compile(m.g, shared, options);
    EXPECT_EQ(error_of([&] { s.record(reinterpret_cast<VkCommandBuffer>(1)); }),
              "Program: a profiled program runs only on its own command buffer");
}

}  // namespace
}  // namespace mn::test
