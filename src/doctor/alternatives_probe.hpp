// The local file's alternatives as the doctor reports them: the table of
// backend/alternatives.cpp, each entry with its facts and its probe's verdict in this process.
#pragma once

#include "doctor/probe_util.hpp"
#include "ferry/settings.hpp"

namespace ferry::doctor {

/// `alternatives`: [{kind, role, serves: {host_memory, device_memory, writes}, aligned,
/// runtime_library, usable, cause (a stable reason code, null when usable), reason}].
json probe_alternatives(const settings& s);

}  // namespace ferry::doctor
