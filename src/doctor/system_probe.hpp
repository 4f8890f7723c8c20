// Facts about the machine that do not depend on a path: kernel, CPUs, memory, NUMA, IOMMU, and
// the kernel pieces GPUDirect Storage needs for direct DMA (nvidia-fs, PCI P2PDMA).
#pragma once

#include "doctor/probe_util.hpp"

namespace ferry::doctor {

/// `system`: kernel, os, cpus, cpus_usable, memory_bytes, memory_available_bytes, numa_nodes,
/// page_size, iommu.
json probe_system();

/// `kernel`: nvidia driver module, nvidia_fs (module, devices, stats), nvidia_peermem, p2pdma.
json probe_kernel_support();

/// `udev`: whether the udev database cuFile reads volume attributes from exists.
json probe_udev_database();

}  // namespace ferry::doctor
