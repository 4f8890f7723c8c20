#include "doctor/cufile_probe.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

#include "escape_text.hpp"
#include "shim/cufile.hpp"

extern char** environ;

namespace ferry::doctor {
namespace {

// Bit positions of cuFile's driver status flags (CUfileDriverStatusFlags): storage it can reach
// with direct DMA. Numbered here, not by enum name, so older cufile.h headers still compile.
constexpr std::pair<int, const char*> status_flag_names[] = {
    {0, "lustre"},  {1, "wekafs"}, {2, "nfs"},    {3, "gpfs"},          {4, "nvme"},
    {5, "nvmeof"},  {6, "scsi"},   {7, "scaleflux_csd"}, {8, "nvmesh"}, {9, "beegfs"},
    {11, "nvme_p2p"}, {12, "scatefs"}, {13, "virtiofs"}, {14, "panfs"},
};
// CUfileFeatureFlags.
constexpr std::pair<int, const char*> feature_flag_names[] = {
    {0, "dynamic_routing"}, {1, "batch_io"}, {2, "streams"}, {3, "parallel_io"}, {4, "p2pdma"},
};

json flag_list(unsigned bits, const std::pair<int, const char*>* names, std::size_t n) {
    json out = json::array();
    for (std::size_t i = 0; i < n; ++i)
        if (bits & (1u << names[i].first)) out.push_back(names[i].second);
    return out;
}

json bool_parameter(const shim::cufile_api& api, CUFileBoolConfigParameter_t p) {
    if (!api.get_parameter_bool) return nullptr;
    bool v = false;
    if (api.get_parameter_bool(p, &v).err != CU_FILE_SUCCESS) return nullptr;
    return v;
}

/// Follows a dotted key ("properties.allow_compat_mode") through nested objects.
const nlohmann::json* lookup(const nlohmann::json& root, std::string_view dotted) {
    const nlohmann::json* cur = &root;
    for (const auto& part : split(dotted, '.')) {
        if (!cur->is_object()) return nullptr;
        auto it = cur->find(part);
        if (it == cur->end()) return nullptr;
        cur = &*it;
    }
    return cur;
}

}  // namespace

json probe_cufile(const std::string& library) {
    json j;
    const shim::cufile_state& s = shim::cufile(library);
    j["available"] = s.loaded;
    j["library"] = library;
    j["path"] = s.loaded ? json(s.library_path) : json(nullptr);
    j["error"] = s.loaded ? json(nullptr) : json(s.load_error);
    j["version"] = version_string(s.version);
    j["version_code"] = s.version > 0 ? json(s.version) : json(nullptr);

    json driver;
    driver["open"] = s.driver_open;
    if (s.loaded && !s.driver_skipped.empty()) {
        driver["status"] = nullptr;
        driver["message"] = "not opened: " + s.driver_skipped;
        driver["cuda_error"] = nullptr;
    } else if (s.loaded) {
        driver["status"] = s.driver_open_status;
        driver["message"] = shim::cufile_status_string(s.driver_open_status);
        driver["cuda_error"] = s.driver_open_cuda != 0 ? json(s.driver_open_cuda) : json(nullptr);
    } else {
        driver["status"] = nullptr;
        driver["message"] = "cuFile is not loaded";
        driver["cuda_error"] = nullptr;
    }
    j["driver"] = driver;

    if (s.have_properties) {
        const CUfileDrvProps_t& p = s.properties;
        json props;
        props["nvidia_fs_version"] =
            std::to_string(p.nvfs.major_version) + "." + std::to_string(p.nvfs.minor_version);
        props["nvidia_fs"] = s.nvfs_present();
        props["allow_compat_mode"] = (p.nvfs.dcontrolflags & (1u << CU_FILE_ALLOW_COMPAT_MODE)) != 0;
        props["poll_mode"] = (p.nvfs.dcontrolflags & (1u << CU_FILE_USE_POLL_MODE)) != 0;
        props["poll_threshold_kb"] = static_cast<std::uint64_t>(p.nvfs.poll_thresh_size);
        props["max_direct_io_size_kb"] = static_cast<std::uint64_t>(p.nvfs.max_direct_io_size);
        props["max_device_cache_size_kb"] = p.max_device_cache_size;
        props["per_buffer_cache_size_kb"] = p.per_buffer_cache_size;
        props["max_device_pinned_mem_size_kb"] = p.max_device_pinned_mem_size;
        props["max_batch_io_size"] = p.max_batch_io_size;
        props["direct_dma_targets"] = flag_list(p.nvfs.dstatusflags, status_flag_names,
                                                std::size(status_flag_names));
        props["features"] = flag_list(p.fflags, feature_flag_names, std::size(feature_flag_names));
        j["properties"] = props;
    } else {
        j["properties"] = nullptr;
    }
    j["direct_dma"] = s.direct_dma();

    json params;
    if (s.loaded) {
        const auto& api = shim::cufile_functions();
        params["allow_compat_mode"] = bool_parameter(api, CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE);
        params["force_compat_mode"] = bool_parameter(api, CUFILE_PARAM_FORCE_COMPAT_MODE);
        params["use_pci_p2pdma"] = bool_parameter(api, CUFILE_PARAM_USE_PCIP2PDMA);
        params["use_poll_mode"] = bool_parameter(api, CUFILE_PARAM_PROPERTIES_USE_POLL_MODE);
        params["parallel_io"] = bool_parameter(api, CUFILE_PARAM_EXECUTION_PARALLEL_IO);
    }
    j["parameters"] = s.loaded ? params : json(nullptr);
    j["std_fds_disturbed"] = s.std_fds_disturbed;
    j["config"] = probe_cufile_config();
    j["environment"] = cufile_environment();
    return j;
}

json read_cufile_config(const std::string& path, const std::string& source) {
    json j;
    j["path"] = path;
    j["source"] = source;
    struct stat st {};
    j["exists"] = ::stat(path.c_str(), &st) == 0;
    j["valid"] = false;
    j["error"] = nullptr;
    if (!j["exists"].get<bool>()) {
        j["error"] = "no such file";
        return j;
    }
    std::string err;
    auto text = read_text(path, 16 << 20, &err);
    if (!text) {
        j["error"] = "cannot read: " + err;
        return j;
    }
    // cuFile's own parser accepts // and /* */ comments; the shipped file uses them.
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(*text, nullptr, true, /*ignore_comments=*/true);
    } catch (const nlohmann::json::exception& e) {
        j["error"] = "does not parse: " + detail::escape_text(e.what());
        return j;
    }
    if (!doc.is_object()) {
        j["error"] = "not a JSON object";
        return j;
    }
    j["valid"] = true;
    // The settings that decide the path and its speed; absent ones take cuFile's defaults.
    static const char* keys[] = {
        "properties.allow_compat_mode",   "properties.use_pci_p2pdma",
        "properties.use_poll_mode",       "properties.max_direct_io_size_kb",
        "properties.max_device_cache_size_kb", "properties.max_device_pinned_mem_size_kb",
        "execution.parallel_io",          "execution.max_io_threads",
        "fs.generic.posix_unaligned_writes", "logging.dir", "logging.level",
    };
    json settings_found = json::object();
    for (const char* k : keys)
        if (const auto* v = lookup(doc, k)) settings_found[k] = *v;
    j["settings"] = settings_found;
    json deny = json::object();
    for (const char* k : {"drivers", "devices", "mounts", "filesystems"}) {
        const auto* v = lookup(doc, std::string("denylist.") + k);
        deny[k] = v && v->is_array() ? json(*v) : json::array();
    }
    j["denylist"] = deny;
    return j;
}

json probe_cufile_config() {
    const char* env = std::getenv("CUFILE_ENV_PATH_JSON");
    if (env && *env) return read_cufile_config(env, "CUFILE_ENV_PATH_JSON");
    return read_cufile_config("/etc/cufile.json", "default");
}

json cufile_environment() {
    json j = json::object();
    for (char** e = environ; e && *e; ++e) {
        std::string_view kv = *e;
        if (kv.rfind("CUFILE_", 0) != 0) continue;
        auto eq = kv.find('=');
        if (eq == std::string_view::npos) continue;
        j[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
    }
    return j;
}

}  // namespace ferry::doctor
