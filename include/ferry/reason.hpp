// Reason codes: why a request takes its route, and why an alternative way to read a local file
// cannot serve it. Each code has a stable name (to_string) that plans, `ferry doctor --json`
// and checkpoint plans carry beside their plain-words text, so that programs match on the code
// and people read the text. Names never change once released; new codes are appended.
#pragma once

#include <cstdint>
#include <string_view>

#include "ferry/export.hpp"

namespace ferry {

/// A rule of the route planner, or the cause a probe found. docs/doctor.md lists them all.
enum class reason_code : std::uint16_t {
    none,  ///< no code (a cause that was not found)

    // The planner's rules: which decision led to the route.
    host_memory,           ///< host or pinned memory: parallel pread/pwrite on the workers
    direct_io_on,          ///< FERRY_DIRECT_IO=on
    residency_unknown,     ///< auto: page-cache residency unknown, buffered reads
    residency,             ///< the resident fraction picks O_DIRECT or buffered reads
    direct_unusable,       ///< O_DIRECT wanted but unusable (the cause says why)
    managed_memory,        ///< managed memory: cuFile reads only into device memory
    gds_off,               ///< FERRY_GDS=off
    below_gds_threshold,   ///< the request is below FERRY_GDS_THRESHOLD
    no_nvidia_fs,          ///< auto and no nvidia-fs: compatibility mode would be slower
    cufile_unusable,       ///< cuFile cannot serve the file (the cause says why)
    gds_direct_dma,        ///< cuFile with direct DMA (nvidia-fs loaded)
    cufile_compat_forced,  ///< FERRY_GDS=on without nvidia-fs: cuFile in compatibility mode
    cufile_compat_slower,  ///< auto: cuFile would run in compatibility mode
    no_device_dma,         ///< the source cannot move bytes to the GPU itself
    staging,               ///< the staged mover's threads and buffers
    stream_lanes,          ///< a large read into GPU memory through the stream lanes
    no_gpu,                ///< no GPU: a read into GPU memory is planned for host memory
    registered,            ///< the file is registered (ferry::registered_file), or why not
    no_ranges,             ///< the server serves no byte ranges: one plain GET per read
    io_uring_on,           ///< FERRY_IO_URING=on: reads through io_uring, or why it cannot serve
    io_uring_not_faster,   ///< FERRY_IO_URING=auto: io_uring could serve, but was measured no faster

    // Causes: why an alternative cannot serve this file, as its probe found.
    opened_write_only,          ///< the file is open for writing only
    direct_io_unsupported_fs,   ///< the file system refuses O_DIRECT (EINVAL at open)
    direct_io_open_failed,      ///< opening with O_DIRECT failed otherwise (the text has errno)
    direct_io_refused_at_read,  ///< the file system accepted O_DIRECT at open, refused a read
    not_aligned,                ///< the O_DIRECT alignment does not fit the staging buffers
    cufile_library_missing,     ///< libcufile could not be loaded (FERRY_CUFILE_LIBRARY)
    cufile_driver_failed,       ///< cuFileDriverOpen failed (the text has its status)
    cufile_register_failed,     ///< cuFileHandleRegister refused the file (the text has its status)
    registration_changed,       ///< the registered file changed since its registration
    io_uring_not_built,         ///< this build of ferry has no io_uring (no liburing at build time)
    io_uring_disabled,          ///< the kernel disables io_uring (/proc/sys/kernel/io_uring_disabled)
    io_uring_not_permitted,     ///< io_uring_setup refused: EPERM (a container's seccomp profile)
    io_uring_not_supported,     ///< io_uring_setup is missing: ENOSYS (an old or limited kernel)
    io_uring_setup_failed,      ///< io_uring_setup failed otherwise (the text has errno)
    io_uring_off,               ///< FERRY_IO_URING=off

    // A checkpoint tensor's read route (tensor_plan::code).
    whole_tensor,            ///< the whole tensor: one byte range
    slice_covers_dimension,  ///< a slice that covers its whole dimension: the whole tensor
    outermost_slice,         ///< a slice along the outermost dimension: one byte range
    segments_cheaper,        ///< skipping costs more than a request: each row segment read
    span_cheaper,            ///< a request costs more than the skipped bytes: the span read
    route_forced,            ///< checkpoint_load_options::route forced segments or span
};

/// The code's stable name: the enumerator's name ("cufile_library_missing"); "?" for a value
/// outside the enumeration. Thread safe.
FERRY_EXPORT std::string_view to_string(reason_code c) noexcept;

/// The codes of one decision of a plan: the rule that made it, and the cause a probe found
/// (reason_code::none when there is none). The plain words stand beside it (path_plan::reasons).
struct plan_reason {
    reason_code code = reason_code::none;
    reason_code cause = reason_code::none;
};

}  // namespace ferry
