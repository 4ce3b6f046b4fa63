// runtime/ on whatever device is present (lavapipe in CI), with the validation layer on (ctest sets
// MEGANEURA_VALIDATE=1): every test ends by asserting that the layer said nothing.
//
// One tiny kernel does everything: y = scale * x + ADD over N elements, with N and ADD as
// specialization constants and scale as a push constant, so the tests see each input channel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "temp_dir.hpp"
#include "codegen/shader_compiler.hpp"
#include "meganeura/error.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/runtime.hpp"

namespace mn::rt {
namespace {

const char* kAffine = R"(#version 450
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint N = 1;
layout(constant_id = 1) const uint ADD = 0;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { float scale; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < N) y[i] = p.scale * x[i] + float(ADD);
}
)";

const std::vector<uint32_t>& affine_spirv() {
    static const std::vector<uint32_t> words = *codegen::compile_glsl(kAffine);
    return words;
}

std::vector<uint8_t> push_float(float f) {
    std::vector<uint8_t> bytes(4);
    std::memcpy(bytes.data(), &f, 4);
    return bytes;
}

BufferRange whole(const Buffer& b) { return {&b, 0, b.size()}; }

class Runtime : public ::testing::Test {
protected:
    void SetUp() override { ctx = Context::open(); }
    void TearDown() override {
        auto messages = ctx->take_validation_messages();
        EXPECT_TRUE(messages.empty()) << messages.front();
    }

    const Pipeline& affine(uint32_t n, uint32_t add) { return ctx->pipeline(affine_spirv(), {n, add}, 2, 4); }

    Dispatch affine_dispatch(const Buffer& x, const Buffer& y, uint32_t n, uint32_t add, float scale,
                             std::string label = "affine") {
        return {&affine(n, add), {{&x, 0, n * 4ull}, {&y, 0, n * 4ull}}, {(n + 63) / 64, 1, 1}, push_float(scale),
                std::move(label)};
    }

    Buffer upload(const std::vector<float>& values, MemoryKind kind = MemoryKind::Upload) {
        Buffer b(ctx, values.size() * 4, kind);
        std::memcpy(b.mapped(), values.data(), values.size() * 4);
        return b;
    }

    static std::vector<float> read(const Buffer& b, size_t n) {
        std::vector<float> v(n);
        std::memcpy(v.data(), b.mapped(), n * 4);
        return v;
    }

    // x (host) -> device x -> affine -> device y -> readback, as one program.
    Program affine_program(const Buffer& host_x, const Buffer& x, const Buffer& y, const Buffer& out, uint32_t n,
                           uint32_t add, float scale) {
        Program p(ctx);
        p.copy(whole(host_x), whole(x));
        p.barrier();
        p.dispatch(affine_dispatch(x, y, n, add, scale));
        p.barrier();
        p.copy(whole(y), whole(out));
        return p;
    }

    std::shared_ptr<Context> ctx;
};

std::vector<float> iota(size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = float(i) - 7.5f;
    return v;
}

TEST(RuntimeDevices, EnumerateFindsADevice) {
    auto devices = Context::enumerate();
    ASSERT_GE(devices.size(), 1u);
    for (const auto& d : devices) {
        EXPECT_FALSE(d.name.empty());
        EXPECT_GE(d.subgroup_size, 1u);
        EXPECT_GT(d.max_buffer_size, 0u);
        EXPECT_FALSE(d.heaps.empty());
        EXPECT_NE(describe(d).find(d.name), std::string::npos);
    }
}

TEST(RuntimeDevices, UnknownSelectorListsDevices) {
    try {
        Context::open("no-such-device-xyz");
        FAIL() << "expected mn::Error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("[0] " + Context::enumerate()[0].name), std::string::npos) << e.what();
    }
    setenv("MEGANEURA_DEVICE", "99", 1);
    EXPECT_THROW(Context::open(), Error);
    setenv("MEGANEURA_DEVICE", "0", 1);
    EXPECT_NO_THROW(Context::open());
    unsetenv("MEGANEURA_DEVICE");
}

// Program::wait polls the fence (GPUs) or sleeps in vkWaitForFences (CPU devices), as MEGANEURA_FENCE_WAIT
// overrides: either way each run's results are there when it returns.
TEST(RuntimeFenceWait, PollsOrBlocksAsAsked) {
    for (const char* wait : {"poll", "block"}) {
        mn::test::ScopedEnv env("MEGANEURA_FENCE_WAIT", wait);
        auto ctx = Context::open();
        const uint32_t n = 64;
        Buffer out(ctx, n * 4, MemoryKind::Readback);
        Program p(ctx);
        p.fill({&out, 0, n * 4}, 0);
        p.finish();
        for (int run = 0; run < 3; ++run) {
            std::memset(out.mapped(), 0xff, n * 4);
            p.run();
            for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<const uint32_t*>(out.mapped())[i], 0u) << wait << " run " << run;
        }
    }
    mn::test::ScopedEnv env("MEGANEURA_FENCE_WAIT", "spin");
    try {
        Context::open();
        FAIL() << "expected mn::Error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("MEGANEURA_FENCE_WAIT must be poll or block, got 'spin'"), std::string::npos)
            << e.what();
    }
}

TEST_F(Runtime, OpensTheFirstDevice) {
    EXPECT_EQ(ctx->caps().name, Context::enumerate()[0].name);
    const char* validate = std::getenv("MEGANEURA_VALIDATE");  // set, and neither empty nor "0"
    EXPECT_EQ(ctx->validation_enabled(), validate && *validate && std::string(validate) != "0");
}

// The loader lists MoltenVK only to an instance that asks for VK_KHR_portability_enumeration (issue
// 19): where the loader offers it (Debian's does), the instance takes it, and the validation layer,
// which checks the flag against the extension, says nothing.
TEST_F(Runtime, InstanceAsksForPortabilityEnumeration) {
    uint32_t count = 0;
    ASSERT_EQ(vkEnumerateInstanceExtensionProperties(nullptr, &count, nullptr), VK_SUCCESS);
    std::vector<VkExtensionProperties> extensions(count);
    ASSERT_EQ(vkEnumerateInstanceExtensionProperties(nullptr, &count, extensions.data()), VK_SUCCESS);
    const bool offered = std::any_of(extensions.begin(), extensions.end(), [](const VkExtensionProperties& e) {
        return std::strcmp(e.extensionName, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME) == 0;
    });
    EXPECT_EQ(ctx->portability_enumeration(), offered);
}

TEST_F(Runtime, UploadDispatchReadback) {
    const uint32_t n = 1000;  // not a multiple of the workgroup size
    auto values = iota(n);
    Buffer host_x = upload(values), x(ctx, n * 4, MemoryKind::DeviceLocal), y(ctx, n * 4, MemoryKind::DeviceLocal);
    Buffer out(ctx, n * 4, MemoryKind::Readback);
    EXPECT_EQ(x.mapped(), nullptr);
    Program p = affine_program(host_x, x, y, out, n, 3, 2.0f);
    p.finish();
    p.run();
    auto result = read(out, n);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(result[i], 2 * values[i] + 3) << i;
    EXPECT_EQ(p.dispatch_count(), 1u);
    EXPECT_EQ(p.barrier_count(), 2u);
}

TEST_F(Runtime, SpecializationConstantsSelectPipelines) {
    const Pipeline& a = affine(16, 1);
    EXPECT_EQ(&a, &affine(16, 1));
    EXPECT_NE(&a, &affine(16, 5));
    EXPECT_NE(&a, &affine(17, 1));
    EXPECT_EQ(a.layout, affine(16, 5).layout);  // layouts are shared

    auto values = iota(16);
    Buffer host_x = upload(values), x(ctx, 64, MemoryKind::DeviceLocal), y(ctx, 64, MemoryKind::DeviceLocal);
    Buffer out1(ctx, 64, MemoryKind::Readback), out5(ctx, 64, MemoryKind::Readback);
    Program p(ctx);
    p.copy(whole(host_x), whole(x));
    p.barrier();
    p.dispatch(affine_dispatch(x, y, 16, 1, 1.0f));
    p.barrier();
    p.copy(whole(y), whole(out1));
    p.barrier();
    p.dispatch(affine_dispatch(x, y, 16, 5, 1.0f));
    p.barrier();
    p.copy(whole(y), whole(out5));
    p.finish();
    p.run();
    auto r1 = read(out1, 16), r5 = read(out5, 16);
    for (int i = 0; i < 16; ++i) {
        EXPECT_EQ(r1[i], values[i] + 1);
        EXPECT_EQ(r5[i], values[i] + 5);
    }
}

// Replays copy the staging buffer again, in either kind the host writes between runs (Inputs: a session's inputs).
TEST_F(Runtime, ReplaySeesNewInputs) {
    const uint32_t n = 100;
    for (const MemoryKind kind : {MemoryKind::Upload, MemoryKind::Inputs}) {
        SCOPED_TRACE(kind == MemoryKind::Upload ? "upload" : "inputs");
        auto values = iota(n);
        Buffer host_x = upload(values, kind), x(ctx, n * 4, MemoryKind::DeviceLocal), y(ctx, n * 4, MemoryKind::DeviceLocal);
        Buffer out(ctx, n * 4, MemoryKind::Readback);
        Program p = affine_program(host_x, x, y, out, n, 0, -1.0f);
        p.finish();
        for (int run = 0; run < 3; ++run) {
            std::memset(out.mapped(), 0xff, n * 4);  // NaN: every element must be written again
            p.run();
            auto result = read(out, n);
            for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(result[i], -values[i]) << "run " << run << " element " << i;
        }
        values[10] = 42;
        std::memcpy(host_x.mapped(), values.data(), n * 4);
        p.run();
        EXPECT_EQ(read(out, n)[10], -42.0f);
    }
}

TEST_F(Runtime, FillWritesWords) {
    Buffer b(ctx, 256, MemoryKind::DeviceLocal), out(ctx, 256, MemoryKind::Readback);
    Program p(ctx);
    p.fill(whole(b), 0);
    p.barrier();
    p.fill({&b, 64, 128}, 0x3f800000);  // 1.0f
    p.barrier();
    p.copy(whole(b), whole(out));
    p.finish();
    p.run();
    auto r = read(out, 64);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(r[i], i >= 16 && i < 48 ? 1.0f : 0.0f) << i;
    EXPECT_THROW(p.fill({&b, 2, 8}, 0), Error);  // misaligned, and after finish()
}

TEST_F(Runtime, BarriersOrderDependentDispatches) {
    // a -> b -> a -> b ..., each step y = 2x + 1; without barriers the steps would race.
    const uint32_t n = 4096, steps = 6;
    auto values = iota(n);
    Buffer host = upload(values), a(ctx, n * 4, MemoryKind::DeviceLocal), b(ctx, n * 4, MemoryKind::DeviceLocal);
    Buffer out(ctx, n * 4, MemoryKind::Readback);
    Program p(ctx);
    p.copy(whole(host), whole(a));
    for (uint32_t s = 0; s < steps; ++s) {
        p.barrier();
        p.dispatch(s % 2 ? affine_dispatch(b, a, n, 1, 2.0f) : affine_dispatch(a, b, n, 1, 2.0f));
    }
    p.barrier();
    p.copy(whole(steps % 2 ? b : a), whole(out));
    p.finish();
    p.run();
    auto result = read(out, n);
    for (uint32_t i = 0; i < n; ++i) {
        float expected = values[i];
        for (uint32_t s = 0; s < steps; ++s) expected = 2 * expected + 1;
        ASSERT_EQ(result[i], expected) << i;
    }
}

TEST_F(Runtime, TimestampsPerDispatch) {
    if (!ctx->caps().timestamps) GTEST_SKIP() << "no timestamp queries";
    const uint32_t n = 256;
    Buffer x(ctx, n * 4, MemoryKind::DeviceLocal), y(ctx, n * 4, MemoryKind::DeviceLocal);
    Program p(ctx);
    p.fill(whole(x), 0);
    p.barrier();
    p.dispatch(affine_dispatch(x, y, n, 0, 1.0f, "first"));
    p.barrier();
    p.dispatch(affine_dispatch(y, x, n, 0, 1.0f, "second"));
    p.finish(true);
    EXPECT_THROW(p.dispatch_times_ms(), Error);  // not run yet
    p.run();
    auto times = p.dispatch_times_ms();
    ASSERT_EQ(times.size(), 2u);
    EXPECT_EQ(times[0].first, "first");
    EXPECT_EQ(times[1].first, "second");
    for (const auto& [label, ms] : times) {
        EXPECT_GE(ms, 0.0) << label;
        EXPECT_LT(ms, 10000.0) << label;
    }
}

TEST_F(Runtime, BadDispatchesNameTheirLabel) {
    Buffer x(ctx, 1024, MemoryKind::DeviceLocal), y(ctx, 1024, MemoryKind::DeviceLocal);
    Program p(ctx);
    auto expect_error = [&](Dispatch d, const char* fragment) {
        try {
            p.dispatch(std::move(d));
            ADD_FAILURE() << "expected an error about " << fragment;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("'bad'"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
        }
    };
    Dispatch d = affine_dispatch(x, y, 16, 0, 1.0f, "bad");
    d.bindings.pop_back();
    expect_error(d, "bindings");
    d = affine_dispatch(x, y, 16, 0, 1.0f, "bad");
    d.push_constants.push_back(0);
    expect_error(d, "push-constant");
    d = affine_dispatch(x, y, 16, 0, 1.0f, "bad");
    d.bindings[1].offset = 1;
    expect_error(d, "multiple");
    d = affine_dispatch(x, y, 16, 0, 1.0f, "bad");
    d.bindings[0] = {&x, 1024 - 32, 64};
    expect_error(d, "outside");
    EXPECT_EQ(p.dispatch_count(), 0u);
}

// The misuse is a buffer with no usage flags (VUID-VkBufferCreateInfo-usage-requiredbitmask), which the layer reports
// and a driver can create and destroy unharmed. A pipeline whose layout lacked its shader's push constants, the misuse
// before, let lavapipe compile the shader against the layout: the sanitizer run crashed there once in CI (session 39).
TEST_F(Runtime, ValidationMessagesAreCollected) {
    if (!ctx->validation_enabled()) GTEST_SKIP() << "MEGANEURA_VALIDATE is not set";
    const VkDevice device = ctx->impl().device;
    VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    info.size = 16;
    info.usage = 0;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    VkBuffer buffer = VK_NULL_HANDLE;
    if (vkCreateBuffer(device, &info, nullptr, &buffer) == VK_SUCCESS) vkDestroyBuffer(device, buffer, nullptr);
    EXPECT_FALSE(ctx->take_validation_messages().empty());
    EXPECT_TRUE(ctx->take_validation_messages().empty());
}

// Dispatches are recorded inside VK_EXT_debug_utils labels wherever the loader offers the extension
// (lavapipe's does); the validation layer checks every label call of every GPU test.
TEST_F(Runtime, DispatchesAreLabelledForDebuggers) {
    if (!ctx->validation_enabled()) GTEST_SKIP() << "MEGANEURA_VALIDATE is not set";
    EXPECT_TRUE(ctx->debug_labels());
    const uint32_t n = 64;
    Buffer x(ctx, n * 4, MemoryKind::DeviceLocal), y(ctx, n * 4, MemoryKind::DeviceLocal);
    Program p(ctx);
    Dispatch d = affine_dispatch(x, y, n, 0, 1.0f);
    d.name = "fc1: matmul";
    p.dispatch(std::move(d));
    p.finish();
    p.run();
}

TEST_F(Runtime, ZeroSizeBufferIsUsable) {
    Buffer b(ctx, 0, MemoryKind::Upload);
    EXPECT_GE(b.size(), 4u);
    EXPECT_NE(b.mapped(), nullptr);
    Buffer moved = std::move(b);
    EXPECT_EQ(b.handle(), VK_NULL_HANDLE);
    EXPECT_NE(moved.handle(), VK_NULL_HANDLE);
}

TEST(RuntimeCache, PipelineCacheIsSavedAndReloaded) {
    namespace fs = std::filesystem;
    mn::test::TempDir tmp("pipeline-cache");
    const fs::path& dir = tmp.dir();
    mn::test::ScopedEnv cache_env("MEGANEURA_CACHE_DIR", dir.string());
    auto list = [&] {
        std::vector<fs::path> files;
        if (fs::exists(dir))
            for (const auto& e : fs::directory_iterator(dir))
                if (e.path().filename().string().rfind("pipelines-", 0) == 0) files.push_back(e.path());
        return files;
    };
    for (int round = 0; round < 3; ++round) {
        auto ctx = Context::open();
        ctx->pipeline(affine_spirv(), {8, 1}, 2, 4);
        EXPECT_TRUE(ctx->take_validation_messages().empty());
        ctx.reset();
        auto files = list();
        ASSERT_EQ(files.size(), 1u) << "round " << round;
        if (round == 1) std::ofstream(files[0], std::ios::binary) << "corrupt";  // must be ignored, rewritten
    }
    EXPECT_GE(fs::file_size(list()[0]), 32u);  // lavapipe keeps only the header; real drivers keep more
}

}  // namespace
}  // namespace mn::rt
