// O_DIRECT reads of an arbitrary byte range: the range is widened to the device's alignment,
// read into an aligned buffer, and the wanted bytes are found inside it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ferry/error.hpp"

namespace ferry::detail {

/// Reads [offset, offset + n) through the O_DIRECT descriptor `fd` into `buffer` (aligned to
/// `align`, `capacity` bytes, capacity >= n + 2 * align). Returns where the first wanted byte
/// is inside `buffer`. Throws end_of_file_error, or system_error (EINVAL when the file system
/// refuses O_DIRECT I/O).
const char* direct_read(int fd, std::size_t align, char* buffer, std::size_t capacity, std::size_t n,
                        std::uint64_t offset, const io_context& where);

/// The most payload one buffer of `capacity` bytes carries for any offset.
inline std::size_t direct_payload(std::size_t capacity, std::size_t align) {
    return capacity > 2 * align ? capacity - 2 * align : 0;
}

}  // namespace ferry::detail
