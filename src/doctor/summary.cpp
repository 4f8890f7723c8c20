#include "doctor/summary.hpp"

#include "doctor/report_fields.hpp"

namespace ferry::doctor {
namespace {

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

}  // namespace

std::string summary_for(const json& r, const std::vector<doctor_path_verdict>& paths,
                        const std::vector<std::string>& staging) {
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
    for (std::size_t i = 0; i < paths.size(); ++i) {
        const doctor_path_verdict& p = paths[i];
        const std::string staged = i < staging.size() && !staging[i].empty() ? " (" + staging[i] + ")" : "";
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
                   staged + tag + ".";
    }
    if (!truthy(g, "available") && field(g, "actions").is_array() && !field(g, "actions").empty()) {
        out += "\n\nTo get GPUDirect Storage:";
        for (const auto& a : field(g, "actions")) out += "\n- " + a.get<std::string>();
    }
    return out;
}

}  // namespace ferry::doctor
