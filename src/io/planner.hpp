// The planner: a pure function from facts (the memory, the request, the settings, what the
// source offers and what its probes found) to a route (which source, which mover) and the
// reasons that led there, each a code with its text. The engine plans every request with it;
// `ferry doctor` renders the same codes. Probes are asked lazily, only when a rule needs them,
// so planning a read into host memory never loads cuFile; tests answer them from a table.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/alternatives.hpp"
#include "backend/source.hpp"
#include "ferry/file.hpp"
#include "ferry/reason.hpp"
#include "io/movers/mover.hpp"

namespace ferry::detail {

/// The codes are public (include/ferry/reason.hpp): plans, the doctor's JSON and checkpoint plans
/// carry them.
using ferry::reason_code;
using ferry::to_string;

/// Why FERRY_IO_URING=auto does not take io_uring where it could serve: the end of the plan's
/// last reason (io_uring_not_faster) and of the doctor's io_uring line.
inline constexpr std::string_view io_uring_not_faster_text =
    "FERRY_IO_URING=auto keeps the thread pool's preads: where measured (docs/benchmarks.md), io_uring read "
    "hot files no faster than the pool, and one ring reading many small cold files at the pool's depth was "
    "slower; FERRY_IO_URING=on takes it";

struct reason {
    reason_code code;
    std::string text;
    bool fallback = false;  ///< counted and logged as a fallback
    /// For cufile_unusable: cuFile's status (0 when none) and whether the udev database is
    /// missing, so that the doctor adds only what the text does not already say.
    int status = 0;
    bool udev_missing = false;
    /// For staging: the threads and buffers ("16 threads, 2 x 2 MiB pinned buffers each").
    std::string detail;
    /// What a probe found, when the rule is that an alternative cannot serve (direct_unusable,
    /// cufile_unusable, registered): not_aligned, cufile_library_missing...
    reason_code cause = reason_code::none;
};

/// The planner's choice: the source that moves the bytes and the mover between it and memory.
struct route {
    std::string source;  ///< the opened source's kind, or an alternative's (backend/alternatives.cpp)
    mover how = mover::host;
    io_path counted_as = io_path::host;  ///< the public statistics' name of this route
};

/// What the planner knows. Probes are called at most once, only when a rule needs them.
struct plan_facts {
    memory_kind memory = memory_kind::host;
    std::size_t size = 0;
    direction dir = direction::read;
    std::string source_kind = "posix";  ///< the opened source
    bool remote = false;                ///< the source's reads are round trips (HTTP, S3)
    bool ranged = true;                 ///< the source reads a byte range in one request
    std::size_t threads = 1;
    direct_io_mode direct_io = direct_io_mode::off;
    gds_mode gds = gds_mode::auto_;
    io_uring_mode io_uring = io_uring_mode::off;
    std::size_t io_uring_queue_depth = 0;
    std::size_t gds_threshold = 0;
    std::size_t staging_buffers = 0;      ///< per worker
    std::size_t staging_buffer_size = 0;  ///< bytes
    std::size_t lanes = 0;                ///< stream lanes per device (0: none)
    std::size_t lane_buffer_size = 0;     ///< bytes of each of a lane's two buffers
    std::size_t lane_threshold = lanes_off;  ///< reads into device memory from this size take the lanes

    std::function<double()> cached_fraction;                     ///< [0, 1], or -1 when unknown
    std::function<bool()> nvidia_fs_loaded;
    std::function<std::optional<std::pair<int, int>>()> nvfs_version;  ///< set: direct DMA (major, minor)

    /// An alternative the source offers (an entry of backend/alternatives.cpp) and its probe for
    /// this file: nullopt when it can serve, else why (with the cause's code). The rules find
    /// each by its role, never by its name. For registered_pages, a reason without a cause
    /// means no registration; registration_changed, one the file outgrew.
    struct offer {
        const local_alternative* entry = nullptr;
        std::function<std::optional<unavailable_reason>()> usable;
    };
    std::vector<offer> alternatives;
    /// The offer of that role, or null.
    const offer* offered(alternative_role role) const;
};

struct plan_result {
    route chosen;
    std::vector<reason> reasons;
    /// Set when the settings forbid every usable route (FERRY_GDS=on and cuFile unusable): the
    /// text and cuFile's status code; `chosen` is then what would have run otherwise.
    std::optional<unavailable_reason> refusal;

    /// The reasons' texts, in order (the public path_plan).
    std::vector<std::string> texts() const;
    /// The reasons' codes, in the same order (the public path_plan).
    std::vector<plan_reason> codes() const;
};

plan_result plan_route(const plan_facts& facts);

/// "1 GiB", "2 MiB", "4097 bytes": the sizes in reasons.
std::string bytes_text(std::uint64_t n);

}  // namespace ferry::detail
