// A second descriptor of an open file, for reading. It is opened through /proc/self/fd, so it
// is the same inode as the first even after the path was renamed over or unlinked, and it is
// counted against one process-wide cap, so that ferry's extra descriptors (one per worker of
// each of hundreds of checkpoint shards) never make the user's next open() fail with EMFILE.
#pragma once

#include <cstddef>

namespace ferry::detail {

/// Opens the file of `fd` again, read-only and close-on-exec. Returns the new descriptor, or -1
/// where there is none to have: the cap reached, no /proc, an open refused (EACCES after a
/// chmod, EMFILE), another inode than `fd`'s. Then `why` (when given) says which, and errno
/// holds the code where a call failed (0 otherwise). Never throws. Thread safe.
int reopen_for_reading(int fd, const char** why = nullptr) noexcept;

/// Closes a descriptor from reopen_for_reading and gives its place under the cap back.
void close_reopened(int fd) noexcept;

/// Descriptors from reopen_for_reading open now in the process.
std::size_t reopened_descriptors() noexcept;

/// The most reopen_for_reading keeps open at once: min(1024, RLIMIT_NOFILE's soft limit / 4),
/// the limit as it is now.
std::size_t reopened_descriptor_cap() noexcept;

}  // namespace ferry::detail
