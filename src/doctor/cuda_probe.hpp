// The CUDA driver and runtime, and every GPU with the PCIe facts that bound its transfers.
#pragma once

#include "doctor/probe_util.hpp"

namespace ferry::doctor {

/// `cuda`: available, reason, driver_version, runtime_version, device_count, devices[].
/// Never throws; on a machine without driver or GPU, available is false and reason says why.
json probe_cuda();

/// PCIe generation from a sysfs link speed ("32.0 GT/s PCIe" -> 5); 0 when unknown.
int pcie_generation(std::string_view link_speed);

/// The PCI facts of one device from /sys/bus/pci/devices/<bdf>: pcie, bar1_bytes, numa_node.
json probe_pci_device(const std::string& bdf);

}  // namespace ferry::doctor
