// The few lines atop the doctor's report: per path, the route a read takes, in words, and for the
// whole machine what to do to get GPUDirect Storage.
#pragma once

#include <string>
#include <vector>

#include "doctor/probe_util.hpp"
#include "ferry/doctor.hpp"

namespace ferry::doctor {

/// `staging[i]`: the staged mover's threads and buffers for paths[i] ("" when not staged).
std::string summary_for(const json& report, const std::vector<doctor_path_verdict>& paths,
                        const std::vector<std::string>& staging);

}  // namespace ferry::doctor
