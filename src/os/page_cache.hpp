// How much of a file is in the page cache, measured with mmap + mincore (the file is never read).
#pragma once

#include <cstdint>

namespace ferry::detail {

/// Fraction in [0, 1] of the file's pages resident in the page cache, from at most
/// `max_samples` evenly spread windows; -1 when it cannot be measured.
double resident_fraction(int fd, std::uint64_t size, int max_samples = 64);

}  // namespace ferry::detail
