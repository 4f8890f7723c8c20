// What the registry offers for http:// and https:// besides their sources: only the doctor's
// description of a location (an HTTP prefix cannot be listed, and its objects are read only).
#pragma once

#include "backend/store.hpp"

namespace ferry::detail {

/// The http:// and https:// schemes' store operations, for their lines in the registry.
store_operations http_store();

}  // namespace ferry::detail
