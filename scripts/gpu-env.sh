# Sourced at the start of every command on the GPU machine (see ../shared/DEVICE.md): installs the
# Vulkan loader carried in .gl/ and points it at the NVIDIA driver.
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
