// What the registry offers for s3:// besides its sources: listing a prefix (ListObjectsV2),
// removing an object (DeleteObject) and the doctor's description of a location (endpoint,
// region, addressing, the credential chain, and for a prefix what it holds).
#pragma once

#include "backend/store.hpp"

namespace ferry::detail {

/// The s3:// scheme's store operations, for its line in the registry.
store_operations s3_store();

}  // namespace ferry::detail
