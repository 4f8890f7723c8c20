// Logging to stderr, filtered by FERRY_LOG_LEVEL. Thread safe.
#pragma once

#include <string>

#include "ferry/settings.hpp"

namespace ferry::detail {

void log(log_level level, const settings& s, const std::string& message);

inline bool log_enabled(log_level level, const settings& s) { return level <= s.log; }

}  // namespace ferry::detail
