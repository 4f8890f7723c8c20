#include "doctor/route_verdict.hpp"

#include <algorithm>

#include "doctor/gds_section.hpp"
#include "doctor/report_fields.hpp"
#include "io/file_impl.hpp"

namespace ferry::doctor {
namespace {

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

}  // namespace

json reason_codes_json(const detail::plan_result& plan) {
    json out = json::array();
    for (const auto& r : plan.reasons)
        out.push_back({{"code", std::string(to_string(r.code))},
                       {"cause", r.cause == reason_code::none ? json(nullptr) : json(std::string(to_string(r.cause)))},
                       {"text", r.text}});
    return out;
}

/// The verdict of one probed path: the engine's plan, then what the doctor saw that explains it
/// further (file system, O_DIRECT, udev record, registration, denylist). Adds path-specific
/// remedies to `actions`.

doctor_path_verdict verdict_for(json& p, const json& report, const settings& s, json& actions,
                                std::string& staging) {
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
            v.codes = plan.codes();
            for (const auto& r : plan.reasons)
                if (r.code == detail::reason_code::staging) staging = r.detail;
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
                                "): " + udev_failure());
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
    p["reason_codes"] = reason_codes_json(plan);
    return v;
}

}  // namespace ferry::doctor
