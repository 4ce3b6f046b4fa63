// `meganeura devices`: every Vulkan device in selection order, index first, so the index or a piece
// of the name can be passed as MEGANEURA_DEVICE.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "runtime/runtime.hpp"
#include "schedule/schedule.hpp"

namespace mn::cli {

namespace {

int run_devices(const Flags& f) {
    if (!f.positional().empty()) throw Error("devices takes no arguments");
    const std::vector<rt::DeviceCaps> devices = rt::Context::enumerate();
    std::vector<sched::CoopChoice> coop;  // what precision fast multiplies on, and why (MEGANEURA_COOP included)
    for (const rt::DeviceCaps& caps : devices) coop.push_back(sched::choose_coop(caps));
    for (size_t i = 0; i < devices.size(); ++i) {
        const std::string on = coop[i].path == sched::CoopPath::None
                                   ? std::string("the f32 kernels")
                                   : std::string(sched::coop_path_name(coop[i].path)) +
                                         " cooperative matrices, checked against the f32 kernels at the first fast compile";
        std::printf("%s[%zu] %s  precision fast: %s (%s)\n", i ? "\n" : "", i, rt::describe(devices[i]).c_str(), on.c_str(),
                    coop[i].why);
    }
    return 0;
}

}  // namespace

const Command devices_command = {
    .name = "devices",
    .summary = "list every Vulkan device with its capabilities",
    .description = "Lists every Vulkan device in selection order with its capabilities (subgroup size, shared\n"
                   "memory, cooperative matrices, memory heaps) and what precision fast multiplies on there, and\n"
                   "why. MEGANEURA_DEVICE picks one by index or by part of its name; the first is the default.",
    .run = run_devices,
};

}  // namespace mn::cli
