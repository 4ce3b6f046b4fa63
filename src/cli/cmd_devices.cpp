// `meganeura devices`: every Vulkan device in selection order, index first, so the index or a piece
// of the name can be passed as MEGANEURA_DEVICE.
#include <cstdio>

#include "cli/commands.hpp"
#include "meganeura/error.hpp"
#include "runtime/runtime.hpp"

namespace mn::cli {

int cmd_devices(const Args& args) {
    if (!args.empty()) throw Error("devices takes no arguments");
    auto devices = rt::Context::enumerate();
    for (size_t i = 0; i < devices.size(); ++i)
        std::printf("%s[%zu] %s", i ? "\n" : "", i, rt::describe(devices[i]).c_str());
    return 0;
}

}  // namespace mn::cli
