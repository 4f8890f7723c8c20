// Replacing a file atomically: write a temporary file in the target's directory, fsync it,
// rename it over the target, fsync the directory. Readers see the old file or the new one,
// never a mix; a failure (or a crash) before the rename leaves the old file intact. An s3://
// target is written by multipart upload instead, which is atomic in the same sense.
//
// The contents go in as parallel requests in file order, and the kernel is asked to start
// writing back each stretch once it is written: the disk works while the rest is still being
// copied into the page cache, instead of idling until the fsync of commit(). On the
// development machine's ext4 disk, the fsync of a 1 GiB save fell from 0.37-0.41 s to
// 0.025-0.031 s (strace -T, four runs each); docs/benchmarks.md has the side-by-side figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/file.hpp"

namespace ferry::formats {

/// One piece of a file's new contents: `n` bytes at `data` (host or device memory) that go at
/// `offset`. The memory must stay valid until atomic_write::write returns.
struct write_piece {
    const void* data = nullptr;
    std::size_t n = 0;
    std::uint64_t offset = 0;
};

/// One pending replacement of `target`; neither copyable nor movable (it lives on one frame).
///
/// Write the new contents through file(), then commit(). If commit() is never reached (an
/// exception unwinds), the destructor removes the temporary file and the target is untouched.
/// Saving over a file that was just loaded from is safe: the old inode stays readable by anyone
/// who still has it open, and the new contents never overwrite it in place.
class atomic_write {
public:
    /// Creates the temporary file (same directory, same permissions as an existing target).
    /// First removes the temporary files of writers of the same target that died (killed
    /// mid-save): a live writer holds a lock on its own. Throws system_error naming the path.
    explicit atomic_write(std::string target);
    atomic_write(const atomic_write&) = delete;
    atomic_write& operator=(const atomic_write&) = delete;
    /// Removes the temporary file unless committed. Never throws. When this thread's stop flag
    /// asks (a stopped save), the name goes at once and the last descriptor is closed by a
    /// worker of the engine's pool, so the caller does not wait for the kernel to drop the
    /// file's pages.
    ~atomic_write();

    /// The temporary file, open for writing at explicit offsets.
    ferry::file& file() { return *file_; }

    /// Writes `pieces` (which must not overlap) into the temporary file: all at once as
    /// parallel requests of at most 128 MiB in file order, starting the writeback of each
    /// stretch of whole pages below the last request finished. Returns once every request has;
    /// on an error, after the others finished, it throws the first one. Not durable before
    /// commit(). Call it from one thread.
    void write(const std::vector<write_piece>& pieces);
    const std::string& temp_path() const noexcept { return temp_; }
    const std::string& target() const noexcept { return target_; }
    /// Whether the target is an object store's (s3://): its pieces are uploaded in file order.
    bool remote() const noexcept { return remote_; }

    /// fsync, close, rename over the target, fsync the directory. Throws system_error; on
    /// failure before the rename the temporary file is removed and the target is unchanged. A
    /// failure of the directory fsync comes after the rename: the new file is in place but its
    /// name may not survive a power loss, and the error says so. If removing the temporary
    /// file fails too, the next save of the same target removes it.
    void commit();

private:
    /// Hands `fd` to a worker to close; false (nothing done) where that cannot be arranged.
    static bool close_in_background(int fd) noexcept;

    std::string target_;
    std::string temp_;
    std::string dir_;
    std::optional<ferry::file> file_;
    unsigned mode_ = 0;
    int lock_fd_ = -1;  ///< holds flock(LOCK_EX) on the temporary file while this writer lives
    bool keep_mode_ = false;
    bool done_ = false;
    bool remote_ = false;  ///< an s3:// target: the source's own commit (multipart upload)
};

/// A system_error about `target`'s temporary file, restated about `target` (errno, byte range
/// kept; the temporary file's name only as detail): users know the file they save, not the
/// hidden one. Any other error is returned unchanged.
system_error about_target(const system_error& e, const std::string& target);

/// Saves `target` atomically: `write(w)` fills the temporary file of atomic_write `w` (with
/// w.write, or through w.file()), then commit(). Errors name `target` (see about_target).
template <class Write>
void save_atomically(const std::string& target, Write&& write) {
    try {
        atomic_write w(target);
        write(w);
        w.commit();
    } catch (const system_error& e) {
        throw about_target(e, target);
    }
}

}  // namespace ferry::formats
