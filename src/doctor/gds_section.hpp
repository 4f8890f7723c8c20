// The report's `gds` section: whether GPUDirect Storage can work on this machine, why not, and
// what to do, from the system-wide probes (CUDA, cuFile, kernel, udev, cufile.json, IOMMU).
#pragma once

#include <string>

#include "doctor/probe_util.hpp"
#include "ferry/settings.hpp"

namespace ferry::doctor {

/// `gds`: available, compat_mode, mode, reasons, actions (system-wide, not per path).
json gds_section(const json& report, const settings& s);

/// Whether GPUDirect Storage can serve file system `type` with direct DMA.
bool gds_filesystem(const std::string& type);

/// What a missing udev record does to cuFile, in words.
const std::string& udev_failure();

}  // namespace ferry::doctor
