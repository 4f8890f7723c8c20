#include "formats/deserialize.hpp"

#include "ferry/convert.hpp"
#include "ferry/error.hpp"

namespace ferry::formats {

void check_conversion(dtype type, const load_options& options, const std::string& file) {
    if (!options.as || type == *options.as) return;
    // Integers, booleans and complex numbers are not floating point: `as` leaves them alone.
    if (!is_floating(type)) return;
    if (!can_astype(type, *options.as))
        throw usage_error(file + ": cannot convert " + std::string(to_string(type)) + " to " +
                          std::string(to_string(*options.as)) +
                          " (supported: float16, bfloat16, float64 to and from float32)");
}

array deserialize(array raw, const load_options& options) {
    array a = std::move(raw);
    bool convert = options.as && is_floating(a.type()) && a.type() != *options.as;
    if (convert) {
        // The storage is ours alone: swap in place rather than into a temporary copy.
        a = astype(to_native_in_place(a, options.stream), *options.as, options.stream);
    } else if (!options.keep_byte_order) {
        a = to_native_in_place(a, options.stream);
    }
    if (options.c_order) a = to_c_order(a, options.stream);
    return a;
}

}  // namespace ferry::formats
