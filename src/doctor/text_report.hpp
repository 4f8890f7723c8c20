// The doctor's report for people, rendered from the JSON report so both always say the same.
#pragma once

#include <string>

#include "doctor/probe_util.hpp"

namespace ferry::doctor {

/// Sections (system, CUDA, cuFile, kernel, each path) and the summary last.
std::string render_text(const json& report);

}  // namespace ferry::doctor
