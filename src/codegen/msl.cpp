#include "codegen/msl.hpp"

#include <spirv_cross/spirv_cross_c.h>

#include <memory>

#include "meganeura/error.hpp"

namespace mn::codegen {

std::string spirv_to_msl(const std::vector<uint32_t>& spirv) {
    spvc_context raw = nullptr;
    if (spvc_context_create(&raw) != SPVC_SUCCESS) throw Error("SPIRV-Cross: cannot create a context");
    const std::unique_ptr<spvc_context_s, decltype(&spvc_context_destroy)> context(raw, spvc_context_destroy);
    auto check = [&](spvc_result r, const char* step) {
        if (r != SPVC_SUCCESS)
            throw Error(std::string("SPIRV-Cross (") + step + "): " + spvc_context_get_last_error_string(raw));
    };
    spvc_parsed_ir ir = nullptr;
    check(spvc_context_parse_spirv(raw, spirv.data(), spirv.size(), &ir), "parse");
    spvc_compiler compiler = nullptr;
    check(spvc_context_create_compiler(raw, SPVC_BACKEND_MSL, ir, SPVC_CAPTURE_MODE_TAKE_OWNERSHIP, &compiler), "MSL");
    spvc_compiler_options options = nullptr;
    check(spvc_compiler_create_compiler_options(compiler, &options), "options");
    check(spvc_compiler_options_set_uint(options, SPVC_COMPILER_OPTION_MSL_VERSION, SPVC_MAKE_MSL_VERSION(2, 3, 0)),
          "MSL version");
    check(spvc_compiler_options_set_uint(options, SPVC_COMPILER_OPTION_MSL_PLATFORM, SPVC_MSL_PLATFORM_MACOS), "platform");
    check(spvc_compiler_install_compiler_options(compiler, options), "options");
    // Vulkan binding i is Metal buffer i, as MoltenVK lays out a single descriptor set, so a host that
    // binds the .metal kernel directly sets the buffers in the kernel interface's order.
    spvc_resources resources = nullptr;
    check(spvc_compiler_create_shader_resources(compiler, &resources), "resources");
    const spvc_reflected_resource* buffers = nullptr;
    size_t count = 0;
    check(spvc_resources_get_resource_list_for_type(resources, SPVC_RESOURCE_TYPE_STORAGE_BUFFER, &buffers, &count),
          "resources");
    for (size_t i = 0; i < count; ++i) {
        spvc_msl_resource_binding b;
        spvc_msl_resource_binding_init(&b);
        b.stage = SpvExecutionModelGLCompute;
        b.desc_set = spvc_compiler_get_decoration(compiler, buffers[i].id, SpvDecorationDescriptorSet);
        b.binding = spvc_compiler_get_decoration(compiler, buffers[i].id, SpvDecorationBinding);
        b.msl_buffer = b.binding;
        check(spvc_compiler_msl_add_resource_binding(compiler, &b), "buffer binding");
    }
    const char* source = nullptr;
    check(spvc_compiler_compile(compiler, &source), "compile");
    return source;
}

}  // namespace mn::codegen
