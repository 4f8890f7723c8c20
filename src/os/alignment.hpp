// Alignment: rounding helpers and the O_DIRECT alignment of an open file.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::detail {

/// O_DIRECT alignment of an open file.
struct direct_alignment {
    std::size_t memory = 4096;  ///< buffer address alignment
    std::size_t offset = 4096;  ///< file offset and length alignment
    bool from_statx = false;    ///< reported by statx(STATX_DIOALIGN), else the 4096 fallback
};
/// statx(STATX_DIOALIGN) of `fd`, else the 4096 fallback.
direct_alignment query_direct_alignment(int fd);

inline std::uint64_t align_down(std::uint64_t v, std::uint64_t a) { return v / a * a; }
inline std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace ferry::detail
