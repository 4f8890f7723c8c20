// run_doctor: gathers the probes into one report (the system-wide gds section in
// gds_section.cpp, one verdict per path in route_verdict.cpp) and writes the summary
// (summary.cpp).
#include "ferry/doctor.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "doctor/alternatives_probe.hpp"
#include "doctor/cuda_probe.hpp"
#include "doctor/cufile_probe.hpp"
#include "doctor/gds_section.hpp"
#include "doctor/path_probe.hpp"
#include "doctor/remote_probe.hpp"
#include "doctor/report_fields.hpp"
#include "doctor/route_verdict.hpp"
#include "doctor/summary.hpp"
#include "backend/location.hpp"
#include "io/file_impl.hpp"
#include "shim/std_fd_guard.hpp"
#include "doctor/system_probe.hpp"
#include "doctor/text_report.hpp"
#include "ferry/version.hpp"
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

// The longest one probe may take. Probes call into the machine (the CUDA driver, cuFile, file
// systems that can hang, such as an unreachable NFS server); the doctor must finish anyway.
constexpr std::chrono::seconds probe_limit{30};

/// guarded(), on a thread of its own, given up after probe_limit: a probe that never returns is
/// left behind, detached. `probe` is taken by value and must own what it uses.
template <class Probe>
json bounded(Probe probe, json fallback) {
    auto result = std::make_shared<std::promise<json>>();
    std::future<json> done = result->get_future();
    try {
        std::thread([result, probe, fallback]() mutable {
            try {
                result->set_value(guarded(probe, fallback));
            } catch (...) {  // set_value cannot fail here; nothing may escape a thread
            }
        }).detach();
    } catch (const std::exception&) {
        return guarded(probe, fallback);  // no thread to be had: run it here
    }
    if (done.wait_for(probe_limit) != std::future_status::ready) {
        fallback["error"] = "did not finish within " + std::to_string(probe_limit.count()) + " s";
        return fallback;
    }
    return done.get();
}

json settings_json(const settings& s, const std::string& error) {
    json j = json::parse(to_json(s));
    j["error"] = error.empty() ? json(nullptr) : json(error);
    return j;
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
    r["system"] = doctor::bounded(doctor::probe_system, json::object());
    r["cuda"] = doctor::bounded(doctor::probe_cuda, {{"available", false}, {"devices", json::array()}});
    r["kernel"] = doctor::bounded(doctor::probe_kernel_support, json::object());
    r["udev"] = doctor::bounded(doctor::probe_udev_database, json::object());
    r["cufile"] = doctor::bounded([library = s.cufile_library] { return doctor::probe_cufile(library); },
                                  {{"available", false}, {"version", nullptr}});
    // After the cufile probe: its library is loaded once per process, and the cufile line here
    // then reports what that load found.
    r["alternatives"] = doctor::bounded([s] { return doctor::probe_alternatives(s); }, json::array());
    r["gds"] = doctor::guarded([&] { return doctor::gds_section(r, s); },
                               {{"available", false}, {"reasons", json::array()}, {"actions", json::array()}});

    json paths = json::array();
    std::vector<std::string> staging;
    for (const auto& path : options.paths) {
        if (doctor::is_remote_location(path)) {
            json p = doctor::bounded([path, s] { return doctor::probe_remote(path, s); },
                                     {{"path", detail::shown_location(path)}, {"remote", true}, {"exists", false}});
            doctor_path_verdict v{p["path"].get<std::string>(), std::nullopt, {}};
            p["reason_codes"] = json::array();
            if (doctor::truthy(p, "exists")) {
                // The engine's own plan, as `ferry load` of the object (a prefix's first object)
                // makes it: into GPU memory, or host memory without a GPU.
                const std::string object = p.contains("probed_object") ? p["probed_object"].get<std::string>() : path;
                settings quick = s;
                quick.remote_retries = std::min<std::size_t>(s.remote_retries, 2);
                try {
                    detail::plan_result plan = detail::plan_read_route(object, quick);
                    v.route = plan.chosen.counted_as;
                    v.reasons = plan.texts();
                    v.codes = plan.codes();
                    p["reason_codes"] = doctor::reason_codes_json(plan);
                } catch (const std::exception& e) {
                    v.reasons.push_back(std::string("no read path: ") + e.what());
                }
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
        json p = doctor::bounded([path, library = s.cufile_library] { return doctor::probe_path(path, library); },
                                 {{"path", path}, {"exists", false}});
        if (!p.contains("exists")) p["exists"] = false;
        staging.emplace_back();
        try {
            out.paths.push_back(doctor::verdict_for(p, r, s, r["gds"]["actions"], staging.back()));
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
    out.summary = doctor::summary_for(r, out.paths, staging);
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
