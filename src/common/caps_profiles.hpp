#pragma once
// DeviceCaps of device classes we cannot run here, as plain data: what `meganeura shaders --caps NAME`
// generates kernels for (an Apple GPU's, to read as Metal) and what the caps tests specialize every
// model for, so that a tile choice that overflows wave64, 64 KiB of Intel shared memory or Apple's
// 32 KiB is found on a machine with only lavapipe. The numbers are those the drivers report
// (vulkaninfo), rounded to the class; the comments in caps_profiles.cpp name the device each is from.
#include <string>
#include <vector>

#include "common/device_caps.hpp"

namespace mn::rt {

struct CapsProfile {
    std::string name;     // e.g. "amd-wave64"
    std::string summary;  // one line: the device it stands for
    DeviceCaps caps;
};

const std::vector<CapsProfile>& caps_profiles();
// The profile named `name`; null when there is none.
const CapsProfile* find_caps_profile(const std::string& name);

}  // namespace mn::rt
