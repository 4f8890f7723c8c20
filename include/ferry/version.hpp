#pragma once

#include "ferry/export.hpp"

namespace ferry {

/// The library's version, "MAJOR.MINOR.PATCH".
FERRY_EXPORT const char* version() noexcept;

}  // namespace ferry
