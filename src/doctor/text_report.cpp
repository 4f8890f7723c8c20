#include "doctor/text_report.hpp"

#include <cstdio>

#include "io/planner.hpp"

namespace ferry::doctor {
namespace {

const json& get(const json& j, const char* key) {
    static const json null_value;
    if (!j.is_object()) return null_value;
    auto it = j.find(key);
    return it == j.end() ? null_value : *it;
}

std::string str(const json& j, const std::string& otherwise = "unknown") {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_boolean()) return j.get<bool>() ? "yes" : "no";
    if (j.is_number()) return j.dump();
    return otherwise;
}

std::string bytes(const json& j) {
    return j.is_number_unsigned() || j.is_number_integer() ? human_bytes(j.get<std::uint64_t>()) : "unknown";
}

// A rate in a unit that keeps its digits: a slow link in GB/s would print as 0.00.
std::string rate(const json& gbps) {
    if (!gbps.is_number() || gbps.get<double>() < 0) return "failed";
    const double v = gbps.get<double>();
    char b[32];
    if (v >= 1) std::snprintf(b, sizeof b, "%.2f GB/s", v);
    else if (v >= 1e-3) std::snprintf(b, sizeof b, "%.2f MB/s", v * 1e3);
    else std::snprintf(b, sizeof b, "%.2f kB/s", v * 1e6);
    return b;
}

void line(std::string& out, const std::string& key, const std::string& value) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "  %-17s", key.c_str());
    out += buf;
    out += value;
    out += '\n';
}

std::string join(const json& arr, const char* sep = ", ") {
    std::string s;
    if (!arr.is_array()) return s;
    for (const auto& v : arr) {
        if (!s.empty()) s += sep;
        s += str(v);
    }
    return s;
}

std::string pcie_text(const json& pcie) {
    if (!get(pcie, "generation").is_number()) return "PCIe unknown";
    std::string s = "PCIe gen " + str(get(pcie, "generation")) + " x" + str(get(pcie, "width"), "?");
    if (get(pcie, "max_generation").is_number() &&
        (get(pcie, "max_generation") != get(pcie, "generation") || get(pcie, "max_width") != get(pcie, "width")))
        s += " (max gen " + str(get(pcie, "max_generation")) + " x" + str(get(pcie, "max_width"), "?") + ")";
    return s;
}

void system_section(std::string& out, const json& s) {
    out += "System\n";
    line(out, "kernel", str(get(s, "kernel")) + " (" + str(get(s, "machine")) + ")" +
                            (get(s, "os").is_string() ? ", " + str(get(s, "os")) : ""));
    line(out, "CPUs", str(get(s, "cpus")) + " (" + str(get(s, "cpus_usable")) + " usable)");
    line(out, "memory", bytes(get(s, "memory_bytes")) + " (" + bytes(get(s, "memory_available_bytes")) + " available)");
    line(out, "NUMA nodes", str(get(s, "numa_nodes")));
    line(out, "IOMMU", get(get(s, "iommu"), "enabled") == true ? "on" : "off");
    if (get(s, "error").is_string()) line(out, "error", str(get(s, "error")));
}

void cuda_section(std::string& out, const json& c) {
    out += "\nCUDA\n";
    line(out, "available", get(c, "available") == true ? "yes" : "no: " + str(get(c, "reason"), str(get(c, "error"))));
    line(out, "driver", str(get(c, "driver_version"), "none") + " (runtime " + str(get(c, "runtime_version")) + ")");
    for (const auto& d : get(c, "devices")) {
        std::string v;
        if (get(d, "error").is_string()) {
            v = str(get(d, "error"));
        } else {
            v = str(get(d, "name")) + ", " + bytes(get(d, "memory_bytes")) + ", " + str(get(d, "pci_bus_id")) + ", " +
                pcie_text(get(d, "pcie")) + ", BAR1 " + bytes(get(d, "bar1_bytes")) + ", NUMA node " +
                str(get(d, "numa_node"));
        }
        line(out, "GPU " + str(get(d, "index")), v);
    }
}

void cufile_section(std::string& out, const json& c) {
    out += "\ncuFile\n";
    if (get(c, "available") == true) {
        line(out, "library", str(get(c, "path")) + ", version " + str(get(c, "version")));
        const json& d = get(c, "driver");
        line(out, "driver", get(d, "open") == true        ? "open"
                            : get(d, "status").is_number() ? "failed: " + str(get(d, "status")) + " (" + str(get(d, "message")) + ")"
                                                           : str(get(d, "message")));
        const json& p = get(c, "properties");
        if (p.is_object()) {
            line(out, "nvidia-fs", str(get(p, "nvidia_fs_version")) + (get(p, "nvidia_fs") == true ? "" : " (absent)"));
            line(out, "compat mode", get(p, "allow_compat_mode") == true ? "allowed" : "not allowed");
            line(out, "poll mode", str(get(p, "poll_mode")));
            line(out, "max direct I/O", str(get(p, "max_direct_io_size_kb")) + " KiB");
            std::string targets = join(get(p, "direct_dma_targets"));
            line(out, "DMA targets", targets.empty() ? "none" : targets);
        }
        if (get(c, "std_fds_disturbed") == true)
            line(out, "warning", "opening the driver disturbed fds 0-2 (restored)");
    } else {
        line(out, "library", "not available: " + str(get(c, "error")));
    }
    const json& cfg = get(c, "config");
    if (cfg.is_object()) {
        std::string v = str(get(cfg, "path")) + " (" + str(get(cfg, "source")) + "): ";
        if (get(cfg, "valid") == true) {
            v += "valid";
            for (auto it = get(cfg, "settings").begin(); get(cfg, "settings").is_object() && it != get(cfg, "settings").end(); ++it)
                v += ", " + it.key() + "=" + it.value().dump();
        } else {
            v += str(get(cfg, "error"));
        }
        line(out, "cufile.json", v);
    }
}

void kernel_section(std::string& out, const json& k, const json& udev) {
    out += "\nKernel\n";
    const json& nv = get(k, "nvidia");
    line(out, "nvidia", get(nv, "loaded") == true ? "loaded, " + str(get(nv, "version")) : "not loaded");
    const json& fs = get(k, "nvidia_fs");
    std::string devs = join(get(fs, "devices"));
    line(out, "nvidia-fs", (get(fs, "loaded") == true ? "loaded " + str(get(fs, "version"), "") : std::string("not loaded")) +
                               "; " + (devs.empty() ? "no /dev/nvidia-fs*" : devs));
    const json& p2p = get(k, "p2pdma");
    std::string prov = join(get(p2p, "providers"));
    line(out, "P2PDMA", "CONFIG_PCI_P2PDMA=" + str(get(p2p, "kernel_config")) + "; providers: " +
                            (prov.empty() ? "none" : prov));
    line(out, "udev database", get(udev, "present") == true ? "present" : "absent (/run/udev/data)");
}

void remote_section(std::string& out, const json& p) {
    out += "\nRemote " + str(get(p, "path")) + "\n";
    if (get(p, "endpoint").is_string()) {
        std::string e = str(get(p, "endpoint"));
        if (get(p, "endpoint_source").is_string()) e += " (from " + str(get(p, "endpoint_source")) + ")";
        if (get(p, "addressing").is_string()) e += ", " + str(get(p, "addressing")) + " addressing";
        line(out, "endpoint", e);
    }
    if (get(p, "region").is_string()) line(out, "region", str(get(p, "region")));
    line(out, "credentials", str(get(p, "credentials"), "none"));
    if (get(p, "credentials_expire").is_string())
        line(out, "  temporary", "valid until " + str(get(p, "credentials_expire")) +
                                     (get(p, "credentials_renew_at").is_string()
                                          ? ", renewed from the same link at " + str(get(p, "credentials_renew_at"))
                                          : std::string()));
    for (const auto& c : get(p, "credential_chain")) line(out, "  chain", str(c));
    if (get(p, "exists") != true) {
        line(out, "error", str(get(p, "error")));
    } else {
        if (get(p, "probed_object").is_string()) line(out, "probed", str(get(p, "probed_object")));
        if (get(p, "checkpoint").is_string()) line(out, "checkpoint", str(get(p, "checkpoint")));
        if (get(p, "size_bytes").is_number()) line(out, "size", bytes(get(p, "size_bytes")));
        if (get(p, "latency_ms").is_number()) {
            char b[64];
            std::snprintf(b, sizeof b, "%.2f ms (best one-byte ranged GET)", get(p, "latency_ms").get<double>());
            line(out, "latency", b);
        }
        const json& t = get(p, "throughput");
        if (t.is_object()) {
            line(out, "throughput", rate(get(t, "one_connection_gbps")) + " on one connection, " +
                                        rate(get(t, "planned_gbps")) + " on " + str(get(t, "planned_connections")) +
                                        " (" + bytes(get(t, "bytes")) + " probed)");
        }
        if (get(p, "note").is_string()) line(out, "note", str(get(p, "note")));
    }
    const json& plan = get(p, "plan");
    if (plan.is_object()) line(out, "plan", str(get(plan, "reason")));
    for (const auto& r : get(p, "reasons")) line(out, "why", str(r));
}

void path_section(std::string& out, const json& p) {
    if (get(p, "remote") == true) return remote_section(out, p);
    out += "\nPath " + str(get(p, "path")) + "\n";
    if (get(p, "exists") != true) {
        line(out, "error", str(get(p, "error")));
    } else {
        std::string t = str(get(p, "type"));
        if (get(p, "size_bytes").is_number()) t += ", " + bytes(get(p, "size_bytes"));
        line(out, "type", t);
        const json& fs = get(p, "filesystem");
        if (fs.is_object()) {
            std::string v = str(get(fs, "type")) + " on " + str(get(fs, "mount_point")) + " from " + str(get(fs, "source"));
            if (get(fs, "ext4_data_mode").is_string()) v += ", data=" + str(get(fs, "ext4_data_mode"));
            line(out, "file system", v);
            line(out, "mount options", str(get(fs, "mount_options")) + " | " + str(get(fs, "super_options")));
        }
        const json& b = get(p, "block_device");
        if (b.is_object()) {
            std::string v = str(get(b, "device")) + " " + str(get(b, "name"), "?");
            if (get(b, "disk") != get(b, "name")) v += " on " + str(get(b, "disk"), "?");
            if (get(b, "logical_block_size").is_number()) v += ", logical block " + str(get(b, "logical_block_size")) + " B";
            line(out, "block device", v);
            const json& u = get(p, "udev");
            line(out, "udev record", str(get(u, "record")) + ": " +
                                         (get(u, "exists") == true ? "ID_FS_USAGE=" + str(get(u, "id_fs_usage"), "missing")
                                                                   : std::string("missing")));
        } else {
            line(out, "block device", "none");
        }
        const json& d = get(p, "direct_io");
        if (d.is_object()) {
            std::string v;
            if (get(d, "supported") == true)
                v = "yes, alignment " + str(get(d, "memory_alignment")) + " B memory / " + str(get(d, "offset_alignment")) +
                    " B offset (" + str(get(d, "alignment_source")) + ")";
            else if (get(d, "supported") == false)
                v = "refused: " + str(get(d, "error"));
            else
                v = "unknown: " + str(get(d, "error"));
            line(out, "O_DIRECT", v);
        }
        const json& pc = get(p, "page_cache");
        if (pc.is_object() && !get(pc, "resident_fraction").is_number()) {
            line(out, "page cache", "no data to measure (" + str(get(pc, "files")) + " file(s))");
        } else if (pc.is_object()) {
            char pct[32];
            std::snprintf(pct, sizeof pct, "%.0f%%", 100.0 * get(pc, "resident_fraction").get<double>());
            line(out, "page cache", std::string(pct) + " (" + bytes(get(pc, "resident_bytes")) + " of " +
                                        bytes(get(pc, "bytes")) + " in " + str(get(pc, "files")) + " file(s))");
        }
        // Integrity is the other question about a checkpoint's bytes: where to check it.
        line(out, "integrity", "`ferry verify " + str(get(p, "path")) +
                                   "` checks the CRC-32C checksums written with it (--record: a sidecar "
                                   "for files without; docs/integrity.md)");
        const json& reg = get(p, "cufile_register");
        if (get(reg, "attempted") == true)
            line(out, "cuFile register", get(reg, "ok") == true ? "ok"
                                                                : "error " + str(get(reg, "status")) + " (" + str(get(reg, "message")) + ")");
    }
    line(out, "verdict", str(get(p, "verdict"), "none"));
    for (const auto& r : get(p, "reasons")) out += "    - " + str(r) + "\n";
}

/// The setting, whether io_uring can serve here (its alternative's probe) and what the setting
/// makes of it.
std::string io_uring_line(const std::string& mode, const json& alternatives) {
    const json* alt = nullptr;
    if (alternatives.is_array())
        for (const auto& a : alternatives)
            if (get(a, "kind") == "io_uring") alt = &a;
    if (!alt) return mode + ": not offered by this build";
    if (mode == "off") return "off: never taken (FERRY_IO_URING=off)";
    if (get(*alt, "usable") != true) return mode + ": not usable here: " + str(get(*alt, "reason"));
    if (mode == "on") return "on: reads of local files go through io_uring";
    return mode + ": usable here, not taken: " + std::string(detail::io_uring_not_faster_text);
}

}  // namespace

std::string render_text(const json& r) {
    std::string out = "ferry doctor (ferry " + str(get(r, "ferry_version")) + ")\n\n";
    system_section(out, get(r, "system"));
    cuda_section(out, get(r, "cuda"));
    cufile_section(out, get(r, "cufile"));
    kernel_section(out, get(r, "kernel"), get(r, "udev"));
    const json& s = get(r, "settings");
    out += "\nSettings\n";
    line(out, "GDS", str(get(s, "gds")) + ", threshold " + bytes(get(s, "gds_threshold")));
    line(out, "threads", str(get(s, "threads")));
    line(out, "staging", str(get(s, "staging_buffers")) + " x " + bytes(get(s, "staging_buffer_size")) + " per thread");
    line(out, "O_DIRECT", str(get(s, "direct_io")));
    line(out, "io_uring", io_uring_line(str(get(s, "io_uring")), get(r, "alternatives")));
    if (get(s, "error").is_string()) line(out, "error", str(get(s, "error")));
    for (const auto& p : get(r, "paths")) path_section(out, p);
    if (get(get(r, "std_fds"), "disturbed") == true)
        out += "\nWarning: fds 0-2 were disturbed while probing and have been restored.\n";
    out += "\nVerdict\n" + str(get(r, "summary"), "") + "\n";
    return out;
}

}  // namespace ferry::doctor
