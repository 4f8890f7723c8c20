#pragma once

namespace ferry {

/// The library's version, "MAJOR.MINOR.PATCH".
const char* version() noexcept;

}  // namespace ferry
