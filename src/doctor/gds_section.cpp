#include "doctor/gds_section.hpp"

#include <algorithm>
#include <iterator>

#include "doctor/report_fields.hpp"
#include "shim/cufile.hpp"

namespace ferry::doctor {

// File systems GPUDirect Storage can serve with direct DMA (per NVIDIA's support list).
bool gds_filesystem(const std::string& type) {
    static const char* ok[] = {"ext4", "xfs", "nfs", "nfs4", "lustre", "gpfs", "beegfs", "wekafs",
                               "virtiofs", "panfs", "scatefs"};
    return std::any_of(std::begin(ok), std::end(ok), [&](const char* t) { return type == t; });
}

const std::string& udev_failure() {
    static const std::string text =
        "cuFile cannot read the volume's ID_FS_USAGE, so cuFileHandleRegister fails with error 5027 (" +
        shim::cufile_status_string(5027) + ")";
    return text;
}

json gds_section(const json& r, const settings& s) {
    const json& cuda = field(r, "cuda");
    const json& cf = field(r, "cufile");
    const json& kernel = field(r, "kernel");
    json reasons = json::array();
    json actions = json::array();

    const bool cuda_ok = truthy(cuda, "available");
    if (!cuda_ok) {
        reasons.push_back("no usable GPU: " + text_of(cuda, "reason", text_of(cuda, "error", "unknown")));
        actions.push_back("run on a machine with an NVIDIA data-centre GPU and its driver");
    }
    if (s.gds == gds_mode::off) {
        reasons.push_back("FERRY_GDS=off: ferry never uses cuFile");
        actions.push_back("unset FERRY_GDS or set it to auto");
    }
    const bool loaded = truthy(cf, "available");
    const json& driver = field(cf, "driver");
    const bool open = loaded && truthy(driver, "open");
    const json& props = field(cf, "properties");
    if (!loaded) {
        reasons.push_back("cuFile is not available: " + text_of(cf, "error", "not loaded"));
        actions.push_back("install cuFile (libcufile.so.0 from the CUDA toolkit, or the nvidia-cufile "
                          "Python wheel) where the loader finds it, or set FERRY_CUFILE_LIBRARY to its path");
    } else if (!open) {
        std::string st = field(driver, "status").is_number()
                             ? std::to_string(field(driver, "status").get<int>())
                             : "?";
        reasons.push_back("cuFileDriverOpen failed with error " + st + " (" + text_of(driver, "message") + ")");
        actions.push_back("read cuFile's log (cufile.log, in the directory that logging.dir in cufile.json "
                          "names, else the working directory) for why its driver does not open");
    }

    const json& nvfs = field(kernel, "nvidia_fs");
    const bool module = truthy(nvfs, "loaded");
    const bool dma = truthy(cf, "direct_dma");
    const bool p2p_enabled = field(field(cf, "parameters"), "use_pci_p2pdma") == true;
    if (!dma) {
        std::string why;
        if (props.is_object())
            why = "cuFile reports nvidia-fs " + text_of(props, "nvidia_fs_version", "?") +
                  (module ? "" : " (the kernel module is not loaded)");
        else
            why = module ? "nvidia-fs is loaded, but cuFile is not up to use it"
                         : "the nvidia-fs kernel module is not loaded (no /dev/nvidia-fs*)";
        if (!p2p_enabled) why += ", and PCI P2PDMA is not enabled";
        why += ": there is no direct DMA between storage and GPU memory";
        if (props.is_object())
            why += truthy(props, "allow_compat_mode")
                       ? ", so cuFile can only run in compatibility mode"
                       : ", and cufile.json does not allow compatibility mode";
        reasons.push_back(why);
        if (!module)
            actions.push_back("install and load the nvidia-fs kernel module (NVIDIA's GPUDirect Storage "
                              "packages; modprobe nvidia-fs), or use PCI P2PDMA (properties.use_pci_p2pdma "
                              "in cufile.json, on a kernel built with CONFIG_PCI_P2PDMA)");
    }

    const json& udev = field(r, "udev");
    if (!truthy(udev, "present")) {
        reasons.push_back(std::string("no udev database (/run/udev/data") +
                          (truthy(udev, "run_udev_present") ? " is missing" : ": /run/udev is absent") +
                          "): for files on local block devices " + udev_failure());
        actions.push_back("run udev (systemd-udevd) so that /run/udev/data holds each disk's ID_FS_USAGE; "
                          "in a container, bind-mount the host's /run/udev read-only");
    }

    const json& config = field(cf, "config");
    if (truthy(config, "exists") && !truthy(config, "valid")) {
        reasons.push_back("cufile.json " + text_of(config, "path") + " is not usable: " + text_of(config, "error"));
        actions.push_back("fix or remove " + text_of(config, "path"));
    }

    const json& iommu = field(field(r, "system"), "iommu");
    if (truthy(iommu, "enabled") && field(iommu, "kernel_parameters").is_array()) {
        bool passthrough = false;
        for (const auto& w : field(iommu, "kernel_parameters"))
            if (w.is_string() && (w.get<std::string>().find("pt") != std::string::npos ||
                                  w.get<std::string>().find("off") != std::string::npos))
                passthrough = true;
        if (!passthrough)
            actions.push_back("GPUDirect Storage wants the IOMMU off or in pass-through mode (iommu=pt); "
                              "it is on here");
    }

    json g;
    g["available"] = cuda_ok && loaded && open && dma && s.gds != gds_mode::off;
    g["compat_mode"] = cuda_ok && open && props.is_object() && truthy(props, "allow_compat_mode") &&
                       s.gds != gds_mode::off;
    g["mode"] = std::string(to_string(s.gds));
    g["reasons"] = reasons;
    g["actions"] = actions;
    return g;
}

}  // namespace ferry::doctor
