#include "doctor/system_probe.hpp"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>

namespace ferry::doctor {
namespace {

std::optional<std::uint64_t> meminfo_bytes(const std::string& meminfo, std::string_view key) {
    for (const auto& line : split(meminfo, '\n')) {
        if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() ||
            line[key.size()] != ':')
            continue;
        // "MemTotal:       24731708 kB"
        std::uint64_t kib = std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
        return kib * 1024;
    }
    return std::nullopt;
}

std::string os_name() {
    auto text = read_text("/etc/os-release", 64 * 1024);
    if (!text) return {};
    for (const auto& line : split(*text, '\n')) {
        if (line.rfind("PRETTY_NAME=", 0) != 0) continue;
        std::string v = line.substr(12);
        if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'')) v = v.substr(1, v.size() - 2);
        return v;
    }
    return {};
}

/// Whether a module is loaded, from /proc/modules (names there use '_').
bool module_loaded(const std::string& modules, std::string_view name) {
    for (const auto& line : split(modules, '\n'))
        if (line.compare(0, name.size(), name) == 0 && line.size() > name.size() &&
            line[name.size()] == ' ')
            return true;
    return false;
}

/// CONFIG_PCI_P2PDMA from the running kernel's config: "y", "m", "n", or null when unknown.
json kernel_config_option(const std::string& option) {
    std::string text;
    utsname u{};
    if (::uname(&u) == 0) {
        if (auto t = read_text(std::string("/boot/config-") + u.release, 16 << 20)) text = *t;
    }
    if (text.empty()) return nullptr;  // /proc/config.gz is compressed; not worth a zlib dependency
    for (const auto& line : split(text, '\n')) {
        if (line.rfind(option + "=", 0) == 0) return line.substr(option.size() + 1);
        if (line == "# " + option + " is not set") return "n";
    }
    return "n";
}

}  // namespace

json probe_system() {
    json j;
    utsname u{};
    if (::uname(&u) == 0) {
        j["kernel"] = u.release;
        j["kernel_build"] = u.version;
        j["machine"] = u.machine;
    } else {
        j["kernel"] = nullptr;
    }
    std::string os = os_name();
    j["os"] = os.empty() ? json(nullptr) : json(os);
    long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    j["cpus"] = online > 0 ? json(online) : json(nullptr);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) == 0)
        j["cpus_usable"] = CPU_COUNT(&set);
    else
        j["cpus_usable"] = nullptr;
    auto meminfo = read_text("/proc/meminfo");
    auto total = meminfo ? meminfo_bytes(*meminfo, "MemTotal") : std::nullopt;
    auto avail = meminfo ? meminfo_bytes(*meminfo, "MemAvailable") : std::nullopt;
    j["memory_bytes"] = total ? json(*total) : json(nullptr);
    j["memory_available_bytes"] = avail ? json(*avail) : json(nullptr);
    auto nodes = list_directory("/sys/devices/system/node", "node");
    std::size_t numa = 0;
    for (const auto& n : nodes)
        if (n.size() > 4 && n.find_first_not_of("0123456789", 4) == std::string::npos) ++numa;
    j["numa_nodes"] = numa > 0 ? json(numa) : json(nullptr);
    j["page_size"] = ::sysconf(_SC_PAGESIZE);

    // GPUDirect Storage documentation asks for the IOMMU off or in pass-through mode.
    json iommu;
    auto units = list_directory("/sys/class/iommu");
    iommu["enabled"] = !units.empty();
    auto cmdline = read_line("/proc/cmdline");
    json flags = json::array();
    if (cmdline)
        for (const auto& word : split(*cmdline, ' '))
            if (word.find("iommu") != std::string::npos) flags.push_back(word);
    iommu["kernel_parameters"] = flags;
    j["iommu"] = iommu;
    return j;
}

json probe_kernel_support() {
    json j;
    auto modules = read_text("/proc/modules").value_or("");

    json nvidia;
    nvidia["loaded"] = module_loaded(modules, "nvidia");
    std::string version;
    if (auto v = read_text("/proc/driver/nvidia/version", 4096)) {
        // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."
        auto pos = v->find("Kernel Module");
        if (pos != std::string::npos) {
            auto words = split(trim(std::string_view(*v).substr(pos + 13)), ' ');
            if (!words.empty()) version = words.front();
        }
    }
    if (version.empty())
        if (auto v = read_line("/sys/module/nvidia/version")) version = *v;
    nvidia["version"] = version.empty() ? json(nullptr) : json(version);
    j["nvidia"] = nvidia;

    json nvfs;
    nvfs["loaded"] = module_loaded(modules, "nvidia_fs");
    auto nv = read_line("/sys/module/nvidia_fs/version");
    nvfs["version"] = nv ? json(*nv) : json(nullptr);
    json devices = json::array();
    for (const auto& name : list_directory("/dev", "nvidia-fs")) devices.push_back("/dev/" + name);
    nvfs["devices"] = devices;
    nvfs["stats"] = path_exists("/proc/driver/nvidia-fs/stats");
    j["nvidia_fs"] = nvfs;

    j["nvidia_peermem"] = module_loaded(modules, "nvidia_peermem");

    json p2p;
    p2p["kernel_config"] = kernel_config_option("CONFIG_PCI_P2PDMA");
    json providers = json::array();
    for (const auto& dev : list_directory("/sys/bus/pci/devices"))
        if (path_exists("/sys/bus/pci/devices/" + dev + "/p2pmem")) providers.push_back(dev);
    p2p["providers"] = providers;
    j["p2pdma"] = p2p;
    return j;
}

json probe_udev_database() {
    json j;
    j["path"] = "/run/udev/data";
    j["present"] = path_exists("/run/udev/data");
    j["run_udev_present"] = path_exists("/run/udev");
    return j;
}

}  // namespace ferry::doctor
