// The step every loader shares once the payload has landed: byte order, dtype and layout, as
// load_options asks, on the GPU for device arrays.
#pragma once

#include <string>

#include "ferry/array.hpp"
#include "ferry/load_options.hpp"

namespace ferry::formats {

/// Throws usage_error when `options.as` asks for a conversion of `type` that cannot be done
/// (a floating type with no conversion to the target); names `file`.
void check_conversion(dtype type, const load_options& options, const std::string& file);

/// Applies `options` to `raw`, an array that owns its storage alone (byte swaps happen in
/// place). Returns the array to hand to the user.
array deserialize(array raw, const load_options& options);

}  // namespace ferry::formats
