#include "doctor/cuda_probe.hpp"

#include "doctor/nvml_probe.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace ferry::doctor {
namespace {

std::string cuda_error_text(cudaError_t e) {
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::string uuid_text(const cudaUUID_t& u) {
    // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi prints it.
    std::string s = "GPU-";
    char buf[3];
    for (int i = 0; i < 16; ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
        std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned char>(u.bytes[i]));
        s += buf;
    }
    return s;
}

}  // namespace

int pcie_generation(std::string_view link_speed) {
    double gts = std::strtod(std::string(link_speed).c_str(), nullptr);
    // Transfer rate per lane of each generation.
    if (gts >= 120) return 7;
    if (gts >= 60) return 6;
    if (gts >= 30) return 5;
    if (gts >= 15) return 4;
    if (gts >= 7.5) return 3;
    if (gts >= 4.5) return 2;
    if (gts >= 2.0) return 1;
    return 0;
}

json probe_pci_device(const std::string& bdf) {
    const std::string dir = "/sys/bus/pci/devices/" + bdf;
    json j;
    json pcie;
    auto speed = read_line(dir + "/current_link_speed");
    auto width = read_integer(dir + "/current_link_width");
    auto max_speed = read_line(dir + "/max_link_speed");
    auto max_width = read_integer(dir + "/max_link_width");
    int gen = speed ? pcie_generation(*speed) : 0;
    int max_gen = max_speed ? pcie_generation(*max_speed) : 0;
    pcie["generation"] = gen ? json(gen) : json(nullptr);
    pcie["width"] = width && *width > 0 ? json(*width) : json(nullptr);
    pcie["max_generation"] = max_gen ? json(max_gen) : json(nullptr);
    pcie["max_width"] = max_width && *max_width > 0 ? json(*max_width) : json(nullptr);
    pcie["link_speed"] = speed ? json(*speed) : json(nullptr);
    j["pcie"] = pcie;

    // BAR1 (the window through which peers and nvidia-fs reach GPU memory) is the second line
    // of the resource table: "start end flags".
    json bar1 = nullptr;
    if (auto res = read_text(dir + "/resource", 16 * 1024)) {
        auto lines = split(*res, '\n');
        if (lines.size() > 1) {
            auto f = split(trim(lines[1]), ' ');
            if (f.size() >= 2) {
                unsigned long long start = std::strtoull(f[0].c_str(), nullptr, 16);
                unsigned long long end = std::strtoull(f[1].c_str(), nullptr, 16);
                if (end > start) bar1 = end - start + 1;
            }
        }
    }
    j["bar1_bytes"] = bar1;
    auto numa = read_integer(dir + "/numa_node");
    j["numa_node"] = numa && *numa >= 0 ? json(*numa) : json(nullptr);
    return j;
}

json probe_cuda() {
    json j;
    j["available"] = false;
    j["reason"] = nullptr;
    int driver = 0;
    int runtime = 0;
    cudaDriverGetVersion(&driver);  // 0 when no driver is installed
    cudaRuntimeGetVersion(&runtime);
    j["driver_version"] = version_string(driver);
    j["runtime_version"] = version_string(runtime);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    json devices = json::array();
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free error so later calls start clean
        // Without any driver the runtime says "insufficient driver": say what is true.
        j["reason"] = driver == 0 ? std::string("no CUDA driver is installed (libcuda.so.1 is not found)")
                                  : cuda_error_text(e);
        count = 0;
    } else if (count == 0) {
        j["reason"] = "no CUDA device";
    }
    j["device_count"] = count;
    for (int i = 0; i < count; ++i) {
        json d;
        d["index"] = i;
        cudaDeviceProp p{};
        cudaError_t pe = cudaGetDeviceProperties(&p, i);
        if (pe != cudaSuccess) {
            cudaGetLastError();
            d["error"] = cuda_error_text(pe);
            devices.push_back(d);
            continue;
        }
        d["name"] = p.name;
        d["uuid"] = uuid_text(p.uuid);
        d["memory_bytes"] = static_cast<std::uint64_t>(p.totalGlobalMem);
        d["compute_capability"] = std::to_string(p.major) + "." + std::to_string(p.minor);
        char bdf[32];
        std::snprintf(bdf, sizeof bdf, "%04x:%02x:%02x.0", p.pciDomainID, p.pciBusID,
                      p.pciDeviceID);
        d["pci_bus_id"] = bdf;
        json pci = probe_pci_device(bdf);
        json pcie = pci["pcie"];
        json bar1 = pci["bar1_bytes"];
        pcie["source"] = "sysfs";
        // The driver's view wins where it has one: in a virtual machine sysfs describes the
        // virtual link, not the GPU's.
        if (auto nv = probe_nvml_device(bdf)) {
            for (const char* k : {"generation", "width", "max_generation", "max_width"})
                if (!(*nv)[k].is_null()) pcie[k] = (*nv)[k];
            if (!(*nv)["generation"].is_null()) pcie["source"] = "nvml";
            if (!(*nv)["bar1_bytes"].is_null()) bar1 = (*nv)["bar1_bytes"];
        }
        d["pcie"] = pcie;
        d["bar1_bytes"] = bar1;
        d["numa_node"] = pci["numa_node"];
        int rdma = 0;
        if (cudaDeviceGetAttribute(&rdma, cudaDevAttrGPUDirectRDMASupported, i) == cudaSuccess)
            d["gpudirect_rdma"] = rdma != 0;
        else {
            cudaGetLastError();
            d["gpudirect_rdma"] = nullptr;
        }
        devices.push_back(d);
    }
    j["devices"] = devices;
    j["available"] = count > 0;
    return j;
}

}  // namespace ferry::doctor
