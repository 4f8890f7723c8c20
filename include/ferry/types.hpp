// The small vocabulary types that the file, statistics and checkpoint headers share: how a file
// is opened, which way bytes move, and the route they took. Kept apart so that code which needs
// only an enum does not include all of ferry/file.hpp.
#pragma once

#include "ferry/export.hpp"

#include <string_view>

namespace ferry {

enum class open_mode {
    read,        ///< existing file, read only
    write,       ///< create or truncate, write only
    read_write,  ///< existing file, or created empty, read and write
    append_write ///< create if missing, keep contents, write only (writes take explicit offsets)
};

/// Which way bytes move: from the file into memory (read) or from memory into the file (write).
enum class direction { read, write };

/// The route bytes took between a file and memory.
enum class io_path {
    gds,            ///< cuFile with direct DMA (nvidia-fs loaded)
    cufile_compat,  ///< cuFile in its own compatibility mode (POSIX I/O plus copies inside cuFile)
    staged,         ///< ferry's pipelined pinned buffers, buffered reads
    staged_direct,  ///< ferry's pipelined pinned buffers, O_DIRECT reads
    host,           ///< parallel pread/pwrite straight into host memory
    direct,         ///< O_DIRECT reads into host memory
    count_
};

inline constexpr int io_path_count = static_cast<int>(io_path::count_);

/// "gds", "cufile-compat", "staged", "staged+direct", "host", "direct".
FERRY_EXPORT std::string_view to_string(io_path p);

}  // namespace ferry
