// PCIe link and BAR1 of a GPU as its driver reports them, through NVML loaded at run time
// (libnvidia-ml.so.1 ships with the driver; ferry never links it). In a virtual machine sysfs
// shows the virtual link, NVML the GPU's own.
#pragma once

#include <string>

#include "doctor/probe_util.hpp"

namespace ferry::doctor {

/// For the GPU at PCI bus id `bdf` ("0000:18:00.0"): generation, width, max_generation,
/// max_width, bar1_bytes; nullopt when NVML is absent or does not know the device.
std::optional<json> probe_nvml_device(const std::string& bdf);

}  // namespace ferry::doctor
