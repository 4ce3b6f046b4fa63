// `meganeura devices`: every Vulkan device in selection order, index first, so the index or a piece
// of the name can be passed as MEGANEURA_DEVICE.
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/runtime.hpp"

namespace mn::cli {

namespace {

int run_devices(const Flags& f) {
    if (!f.positional().empty()) throw Error("devices takes no arguments");
    auto devices = rt::Context::enumerate();
    for (size_t i = 0; i < devices.size(); ++i)
        std::printf("%s[%zu] %s", i ? "\n" : "", i, rt::describe(devices[i]).c_str());
    return 0;
}

}  // namespace

const Command devices_command = {
    .name = "devices",
    .summary = "list every Vulkan device with its capabilities",
    .description = "Lists every Vulkan device in selection order with its capabilities (subgroup size, shared\n"
                   "memory, cooperative matrices, memory heaps). MEGANEURA_DEVICE picks one by index or by\n"
                   "part of its name; the first is the default.",
    .run = run_devices,
};

}  // namespace mn::cli
