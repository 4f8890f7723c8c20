// run_doctor: gathers the probes into one report, decides the verdicts through the engine's own
// planner (so the doctor and a real transfer never disagree), and writes the summary.
#include "ferry/doctor.hpp"

#include <algorithm>
#include <exception>
#include <mutex>

#include "doctor/cuda_probe.hpp"
#include "doctor/cufile_probe.hpp"
#include "doctor/path_probe.hpp"
#include "doctor/remote_probe.hpp"
#include "backend/http/url.hpp"
#include "shim/std_fd_guard.hpp"
#include "doctor/system_probe.hpp"
#include "doctor/text_report.hpp"
#include "ferry/version.hpp"
// plan_read_route: the engine's choice of route, shared with every transfer.
#include "io/file_impl.hpp"
#include "shim/cufile.hpp"

namespace ferry {
namespace doctor {
namespace {

/// Runs one probe; an exception becomes `error` over the section's fallback value, so one
/// broken probe never loses the rest of the report.
template <class Probe>
json guarded(Probe&& probe, json fallback) {
    try {
        return probe();
    } catch (const std::exception& e) {
        fallback["error"] = e.what();
    } catch (...) {
        fallback["error"] = "unknown failure";
    }
    return fallback;
}

json settings_json(const settings& s, const std::string& error) {
    json j = json::parse(to_json(s));
    j["error"] = error.empty() ? json(nullptr) : json(error);
    return j;
}

/// j[key], or null when j is not an object or has no such key (const operator[] would assert).
const json& field(const json& j, const char* key) {
    static const json null_value;
    if (!j.is_object()) return null_value;
    auto it = j.find(key);
    return it == j.end() ? null_value : *it;
}

bool truthy(const json& j, const char* key) {
    if (!j.is_object()) return false;
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::string text_of(const json& j, const char* key, const std::string& otherwise = "") {
    if (!j.is_object()) return otherwise;
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : otherwise;
}

// File systems GPUDirect Storage can serve with direct DMA (per NVIDIA's support list).
bool gds_filesystem(const std::string& type) {
    static const char* ok[] = {"ext4", "xfs", "nfs", "nfs4", "lustre", "gpfs", "beegfs", "wekafs",
                               "virtiofs", "panfs", "scatefs"};
    return std::any_of(std::begin(ok), std::end(ok), [&](const char* t) { return type == t; });
}

const std::string udev_failure =
    "cuFile cannot read the volume's ID_FS_USAGE, so cuFileHandleRegister fails with error 5027 (" +
    shim::cufile_status_string(5027) + ")";

/// `gds`: available, compat_mode, mode, reasons, actions (system-wide, not per path).
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
                          "): for files on local block devices " + udev_failure);
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

/// Whether the planner already gave a reason that `matches` (by its code and fields, never by
/// its words).
template <class Match>
bool said(const detail::plan_result& plan, Match matches) {
    return std::any_of(plan.reasons.begin(), plan.reasons.end(), matches);
}

void add_action(json& actions, const std::string& a) {
    for (const auto& x : actions)
        if (x == a) return;
    actions.push_back(a);
}

/// The verdict of one probed path: the engine's plan, then what the doctor saw that explains it
/// further (file system, O_DIRECT, udev record, registration, denylist). Adds path-specific
/// remedies to `actions`.

doctor_path_verdict verdict_for(json& p, const json& report, const settings& s, json& actions) {
    doctor_path_verdict v;
    detail::plan_result plan;
    v.path = p["path"].get<std::string>();
    const std::string type = text_of(p, "type");
    if (!truthy(p, "exists")) {
        v.reasons.push_back("cannot read " + v.path + ": " + text_of(p, "error"));
    } else if (type != "file" && type != "directory") {
        // Opening a FIFO or a device to plan a read could block or have effects: no verdict.
        v.reasons.push_back(v.path + " is a " + type + ", not a regular file or directory");
    } else {
        try {
            plan = detail::plan_read_route(v.path, s);
            v.route = plan.chosen.counted_as;
            v.reasons = plan.texts();
        } catch (const std::exception& e) {
            v.reasons.push_back(std::string("no read path: ") + e.what());
        }
    }
    const bool gds = v.route == io_path::gds;
    if (v.route && !gds && s.gds != gds_mode::off) {
        const json& fs = p["filesystem"];
        std::string fs_type = fs.is_object() ? text_of(fs, "type") : "";
        if (!fs_type.empty() && !gds_filesystem(fs_type))
        {
            v.reasons.push_back(fs_type + " is not a file system GPUDirect Storage serves with direct DMA "
                                          "(ext4, XFS and some network and parallel file systems are)");
            add_action(actions, "keep the data on ext4 (data=ordered), XFS or another file system cuFile "
                                "supports; " + fs_type + " is not one");
        }
        if (fs.is_object() && fs.contains("ext4_data_mode") && fs["ext4_data_mode"] != "ordered")
        {
            v.reasons.push_back("ext4 is mounted with data=" + text_of(fs, "ext4_data_mode") +
                                "; GPUDirect Storage needs data=ordered");
            add_action(actions, "mount " + text_of(fs, "mount_point") + " with data=ordered (the ext4 default)");
        }
        const json& dio = p["direct_io"];
        if (dio.is_object() && dio["supported"] == false)
            v.reasons.push_back("O_DIRECT is refused here (" + text_of(dio, "error") + ")");
        const json& udev = p["udev"];
        if (udev.is_object() && (!truthy(udev, "exists") || udev["id_fs_usage"].is_null()) &&
            !said(plan, [](const detail::reason& r) { return r.udev_missing; }))
            v.reasons.push_back("no udev record with ID_FS_USAGE for block device " +
                                text_of(p["block_device"], "device") + " (" + text_of(udev, "record") +
                                "): " + udev_failure);
        const json& reg = p["cufile_register"];
        if (reg.is_object() && truthy(reg, "attempted") && !truthy(reg, "ok") &&
            !said(plan, [&](const detail::reason& r) {
                return r.code == detail::reason_code::cufile_unusable && r.status == reg["status"].get<int>();
            }))
            v.reasons.push_back("cuFileHandleRegister of " + text_of(reg, "file") + " fails with error " +
                                std::to_string(reg["status"].get<int>()) + " (" + text_of(reg, "message") + ")");
        const json& deny = field(field(field(report, "cufile"), "config"), "denylist");
        if (deny.is_object() && fs.is_object()) {
            for (const auto& f : field(deny, "filesystems"))
                if (f.is_string() && f.get<std::string>() == fs_type)
                    v.reasons.push_back("cufile.json denylists file system " + fs_type);
            for (const auto& m : field(deny, "mounts"))
                if (m.is_string() && fs["mount_point"].is_string() && m == fs["mount_point"])
                    v.reasons.push_back("cufile.json denylists mount " + m.get<std::string>());
        }
    }
    p["verdict"] = v.route ? json(std::string(to_string(*v.route))) : json(nullptr);
    p["reasons"] = v.reasons;
    return v;
}

std::string describe(io_path p) {
    switch (p) {
        case io_path::gds: return "cuFile with direct DMA (GPUDirect Storage)";
        case io_path::cufile_compat:
            return "cuFile in compatibility mode (POSIX reads and copies inside cuFile; not GPUDirect Storage)";
        case io_path::staged: return "ferry's staged path (parallel reads into pinned buffers, then copies to the GPU)";
        case io_path::staged_direct:
            return "ferry's staged path with O_DIRECT reads (pinned buffers, then copies to the GPU)";
        case io_path::host: return "parallel reads into host memory";
        case io_path::direct: return "O_DIRECT reads into host memory";
        case io_path::count_: break;
    }
    return "?";
}

/// The planner's own account of the staging it uses ("staged: 16 threads, 2 x 8 MiB ..."), if any.
std::string staging_detail(const doctor_path_verdict& p) {
    for (const auto& r : p.reasons)
        if (r.rfind("staged: ", 0) == 0) return " (" + r.substr(8) + ")";
    return "";
}

std::string summary_for(const json& r, const std::vector<doctor_path_verdict>& paths) {
    const json& g = field(r, "gds");
    const bool cuda = truthy(field(r, "cuda"), "available");
    std::string out;
    if (truthy(g, "available")) {
        out = "GPUDirect Storage: available (cuFile " + text_of(field(r, "cufile"), "version", "?") + ", nvidia-fs " +
              text_of(field(field(r, "cufile"), "properties"), "nvidia_fs_version", "?") + ").";
    } else {
        out = "GPUDirect Storage: not available here.";
        for (const auto& reason : field(g, "reasons")) out += "\n- " + reason.get<std::string>();
        if (truthy(g, "compat_mode"))
            out += "\ncuFile itself works, in compatibility mode only (FERRY_GDS=on would use it).";
    }
    if (!paths.empty()) out += "\n";
    for (const auto& p : paths) {
        out += "\n" + p.path + ": ";
        if (!p.route) {
            out += "cannot be read (" + (p.reasons.empty() ? std::string("unknown") : p.reasons.front()) + ").";
            continue;
        }
        std::string tag = " [" + std::string(to_string(*p.route)) + "]";
        if (*p.route == io_path::gds)
            out += "GPUDirect Storage is used: " + describe(*p.route) + tag + ".";
        else if (!cuda && (*p.route == io_path::host || *p.route == io_path::direct))
            out += "no GPU here, so reads go to host memory: " + describe(*p.route) + tag + ".";
        else
            out += "GPUDirect Storage is not used; reads into GPU memory take " + describe(*p.route) +
                   staging_detail(p) + tag + ".";
    }
    if (!truthy(g, "available") && field(g, "actions").is_array() && !field(g, "actions").empty()) {
        out += "\n\nTo get GPUDirect Storage:";
        for (const auto& a : field(g, "actions")) out += "\n- " + a.get<std::string>();
    }
    return out;
}

}  // namespace
}  // namespace doctor

bool doctor_report::gds_used() const {
    if (paths.empty()) return gds_available;
    return std::all_of(paths.begin(), paths.end(),
                       [](const doctor_path_verdict& p) { return p.route == io_path::gds; });
}

doctor_report run_doctor(const doctor_options& options) {
    using doctor::json;
    // One run at a time: two fd guards interleaving could each undo the other's placeholders.
    static std::mutex run_mutex;
    std::lock_guard lock(run_mutex);
    shim::std_fd_guard guard;
    doctor_report out;

    settings s;
    std::string settings_error;
    if (options.config) {
        s = *options.config;
    } else {
        try {
            s = settings::from_environment();
        } catch (const std::exception& e) {
            settings_error = std::string(e.what()) + " (using the defaults)";
        }
    }
    try {
        s = s.resolved();
    } catch (const std::exception& e) {
        if (settings_error.empty()) settings_error = e.what();
    }

    json r;
    r["ferry_version"] = version();
    r["settings"] = doctor::settings_json(s, settings_error);
    r["system"] = doctor::guarded(doctor::probe_system, json::object());
    r["cuda"] = doctor::guarded(doctor::probe_cuda, {{"available", false}, {"devices", json::array()}});
    r["kernel"] = doctor::guarded(doctor::probe_kernel_support, json::object());
    r["udev"] = doctor::guarded(doctor::probe_udev_database, json::object());
    r["cufile"] = doctor::guarded([&] { return doctor::probe_cufile(s.cufile_library); },
                                  {{"available", false}, {"version", nullptr}});
    r["gds"] = doctor::guarded([&] { return doctor::gds_section(r, s); },
                               {{"available", false}, {"reasons", json::array()}, {"actions", json::array()}});

    json paths = json::array();
    for (const auto& path : options.paths) {
        if (doctor::is_remote_location(path)) {
            json p = doctor::guarded([&] { return doctor::probe_remote(path, s); },
                                     {{"path", detail::redact_url(path)}, {"remote", true}, {"exists", false}});
            doctor_path_verdict v{p["path"].get<std::string>(), std::nullopt, {}};
            if (doctor::truthy(p, "exists")) {
                // Remote bytes land in pinned staging buffers and move to the GPU pipelined.
                v.route = io_path::staged;
                v.reasons.push_back("a remote object: ranged GETs into pinned staging buffers, copied to the GPU "
                                    "while the next ranges arrive");
                v.reasons.push_back(p["plan"]["reason"].get<std::string>());
            } else {
                v.reasons.push_back(p.contains("error") ? p["error"].get<std::string>() : "unreachable");
            }
            p["verdict"] = v.route ? json(std::string(to_string(*v.route))) : json(nullptr);
            p["reasons"] = v.reasons;
            out.paths.push_back(std::move(v));
            paths.push_back(std::move(p));
            continue;
        }
        json p = doctor::guarded([&] { return doctor::probe_path(path, s.cufile_library); },
                                 {{"path", path}, {"exists", false}});
        if (!p.contains("exists")) p["exists"] = false;
        try {
            out.paths.push_back(doctor::verdict_for(p, r, s, r["gds"]["actions"]));
        } catch (const std::exception& e) {
            doctor_path_verdict v{path, std::nullopt, {std::string("doctor failed: ") + e.what()}};
            p["verdict"] = nullptr;
            p["reasons"] = v.reasons;
            out.paths.push_back(std::move(v));
        }
        paths.push_back(std::move(p));
    }
    r["paths"] = std::move(paths);

    out.cuda_available = doctor::truthy(r["cuda"], "available");
    out.gds_available = doctor::truthy(r["gds"], "available");
    out.summary = doctor::summary_for(r, out.paths);
    r["summary"] = out.summary;

    auto disturbed = guard.restore();
    json fds;
    fds["disturbed"] = !disturbed.empty();
    fds["details"] = disturbed;
    r["std_fds"] = fds;

    out.json = r.dump(2, ' ', false, json::error_handler_t::replace);
    out.text = doctor::render_text(r);
    return out;
}

}  // namespace ferry
