// The verdict on one probed path: the engine's own planner decides the route (so the doctor and
// a real transfer never disagree), then what the path's probes saw explains it further.
#pragma once

#include <string>

#include "doctor/probe_util.hpp"
#include "ferry/doctor.hpp"
#include "ferry/settings.hpp"
#include "io/planner.hpp"

namespace ferry::doctor {

/// Sets `verdict` and `reasons` in the path's entry `p`, adds path-specific remedies to
/// `actions`, and gives the staged mover's threads and buffers in `staging` ("" when the route
/// is not staged).
/// The plan's reasons as the JSON report carries them: [{"code", "cause" (null when none),
/// "text"}], the codes' stable names.
json reason_codes_json(const detail::plan_result& plan);

doctor_path_verdict verdict_for(json& p, const json& report, const settings& s, json& actions,
                                std::string& staging);

}  // namespace ferry::doctor
