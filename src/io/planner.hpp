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
#include <vector>

#include "backend/source.hpp"
#include "ferry/file.hpp"
#include "io/movers/mover.hpp"

namespace ferry::detail {

enum class reason_code {
    host_memory,            ///< host or pinned memory: parallel pread/pwrite on the workers
    direct_io_on,           ///< FERRY_DIRECT_IO=on
    residency_unknown,      ///< auto: page-cache residency unknown, buffered reads
    residency,              ///< auto: the resident fraction picks O_DIRECT or buffered reads
    direct_unusable,        ///< O_DIRECT wanted but unusable (its reason)
    managed_memory,         ///< managed memory: cuFile reads only into device memory
    gds_off,                ///< FERRY_GDS=off
    below_gds_threshold,    ///< the request is below FERRY_GDS_THRESHOLD
    no_nvidia_fs,           ///< auto and no nvidia-fs: compatibility mode would be slower (fallback)
    cufile_unusable,        ///< cuFile cannot serve the file (its reason; a fallback)
    gds_direct_dma,         ///< cuFile with direct DMA (nvidia-fs loaded)
    cufile_compat_forced,   ///< FERRY_GDS=on without nvidia-fs: cuFile in compatibility mode
    cufile_compat_slower,   ///< auto: cuFile would run in compatibility mode (fallback)
    no_device_dma,          ///< the source cannot move bytes to the GPU itself
    staging,                ///< the staged mover's threads and buffers
    stream_lanes,           ///< a large read into GPU memory: the stream lanes' large copies
    no_gpu,                 ///< no GPU: what a read into GPU memory would do is planned for host memory
    registered,             ///< the file is registered (ferry::registered_file): DMA from its pages, or why not
    no_ranges,              ///< the server serves no byte ranges: one plain GET per read (a fallback)
};

/// A stable name for each code ("host-memory", "gds-off", ...), for JSON and tests.
const char* to_string(reason_code c);

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
};

/// The planner's choice: the source that moves the bytes and the mover between it and memory.
struct route {
    std::string source;  ///< "posix", "direct", "cufile", or the opened source's kind
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
    bool offers_direct = true;          ///< the source has a "direct" alternative
    bool offers_cufile = true;          ///< the source has a "cufile" alternative
    std::size_t threads = 1;
    direct_io_mode direct_io = direct_io_mode::off;
    gds_mode gds = gds_mode::auto_;
    std::size_t gds_threshold = 0;
    std::size_t staging_buffers = 0;      ///< per worker
    std::size_t staging_buffer_size = 0;  ///< bytes
    std::size_t lanes = 0;                ///< stream lanes per device (0: none)
    std::size_t lane_buffer_size = 0;     ///< bytes of each of a lane's two buffers
    std::size_t lane_threshold = lanes_off;  ///< reads into device memory from this size take the lanes

    std::function<double()> cached_fraction;                     ///< [0, 1], or -1 when unknown
    std::function<std::optional<unavailable_reason>()> direct;   ///< nullopt: O_DIRECT usable
    std::function<bool()> nvidia_fs_loaded;
    std::function<std::optional<unavailable_reason>()> cufile;   ///< nullopt: registered
    std::function<std::optional<std::pair<int, int>>()> nvfs_version;  ///< set: direct DMA (major, minor)
    /// True when the file is registered and unchanged; false, with `changed` saying how, when
    /// a registration of it exists but the file changed since (empty `changed`: none).
    std::function<bool(std::string& changed)> registered;
};

struct plan_result {
    route chosen;
    std::vector<reason> reasons;
    /// Set when the settings forbid every usable route (FERRY_GDS=on and cuFile unusable): the
    /// text and cuFile's status code; `chosen` is then what would have run otherwise.
    std::optional<unavailable_reason> refusal;

    /// The reasons' texts, in order (the public path_plan).
    std::vector<std::string> texts() const;
};

plan_result plan_route(const plan_facts& facts);

/// "1 GiB", "2 MiB", "4097 bytes": the sizes in reasons.
std::string bytes_text(std::uint64_t n);

}  // namespace ferry::detail
