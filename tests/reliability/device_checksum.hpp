// A checksum computed where the bytes are, on the GPU: for each byte range of a device buffer,
// the sum (mod 2^64) of (byte + 1) * weight(origin + i), where origin is the range's position
// in the data it should hold (its file offset) and weight() a 64-bit mix of the position. A
// byte that is wrong, or right but in the wrong place, changes the sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::test {

struct checked_range {
    std::uint64_t at;      // first byte in the device buffer
    std::uint64_t size;    // bytes
    std::uint64_t origin;  // where those bytes come from (the file offset)
};

/// One checksum per range of the device buffer at `base`, computed by a kernel; throws
/// std::runtime_error when a CUDA call fails.
std::vector<std::uint64_t> device_checksums(const void* base, const std::vector<checked_range>& ranges);

/// The same checksum of `size` host bytes that belong at `origin`.
std::uint64_t host_checksum(const std::uint8_t* p, std::size_t size, std::uint64_t origin);

}  // namespace ferry::test
