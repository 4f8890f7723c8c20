#include "formats/atomic_write.hpp"

#include "backend/registry.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <exception>
#include <future>
#include <random>

#include "ferry/error.hpp"
#include "ferry/memory.hpp"
#include "io/engine.hpp"
#include "os/alignment.hpp"
#include "os/posix_io.hpp"
#include "os/sys.hpp"
#include "stop.hpp"

namespace ferry::formats {
namespace {

std::string directory_of(const std::string& path) {
    auto slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
    auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// At load time, not in a function-local static whose guard a fork() could leave taken.
std::atomic<unsigned> suffix_counter{0};
const unsigned suffix_seed = std::random_device{}();

std::string unique_suffix() {
    char buf[64];
    std::snprintf(buf, sizeof buf, ".tmp-%ld-%08x-%u", static_cast<long>(::getpid()), suffix_seed,
                  suffix_counter.fetch_add(1));
    return buf;
}

// Removes ".NAME.tmp-*" files next to the target whose writer is gone. Every writer holds
// flock(LOCK_EX) on its temporary file until it commits or gives up, so a file whose lock can
// be taken belongs to a dead writer. (A writer caught between creating its file and locking it
// would lose the file and fail at rename with a clear error; the target is never touched.)
void remove_stale_temporaries(const std::string& dir, const std::string& base) {
    DIR* d = sys::inject("opendir") ? nullptr : ::opendir(dir.c_str());
    if (!d) return;
    const std::string prefix = "." + base + ".tmp-";
    while (const dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        std::string path = dir + "/" + name;
        int fd = sys::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) continue;
        if (sys::flock(fd, LOCK_EX | LOCK_NB) == 0) sys::unlink(path.c_str());
        sys::close(fd);
    }
    ::closedir(d);
}

// Requests of a save are cut at multiples of this in the file. Each finished one starts the
// writeback of everything below it, so the disk trails the copy into the page cache by a
// stretch or two and the fsync has at most about that much left (0.1 s at 2 GB/s); 16 workers
// split one into tasks of 8 MiB, which a staged write from GPU memory still pipelines.
constexpr std::uint64_t write_stretch = 128ull << 20;

// Host pieces smaller than this that follow one another in the file are copied into one buffer
// of up to gather_bytes and written as one request: a checkpoint shard of 12,500 tensors of
// 1 KiB was 12,500 writes and 3,000 writeback calls, most of a save of many small tensors.
// Larger pieces, and pieces in GPU memory (the engine stages those), go as they are.
constexpr std::size_t small_piece = 64 << 10;
constexpr std::size_t gather_bytes = 4 << 20;

bool gatherable(const write_piece& p) {
    if (p.n >= small_piece) return false;
    const memory_kind k = memory_kind_of(p.data);
    return k == memory_kind::host || k == memory_kind::pinned;
}

/// `parts` (in file order) with each run of small host pieces that touch in the file copied
/// into one buffer of `buffers` and replaced by one piece over it.
std::vector<write_piece> gather_small(const std::vector<write_piece>& parts,
                                     std::vector<std::unique_ptr<char[]>>& buffers) {
    std::vector<write_piece> out;
    out.reserve(parts.size());
    for (std::size_t i = 0; i < parts.size();) {
        std::size_t j = i, bytes = 0;
        while (j < parts.size() && gatherable(parts[j]) && bytes + parts[j].n <= gather_bytes &&
               (j == i || parts[j].offset == parts[j - 1].offset + parts[j - 1].n))
            bytes += parts[j++].n;
        if (j - i < 2) {  // nothing to gather: the piece as it is
            out.push_back(parts[i]);
            i = std::max(j, i + 1);
            continue;
        }
        // Not zeroed first: every byte is copied over (zeroing cost as much as the copy).
        char* buf = buffers.emplace_back(new char[bytes]).get();
        std::size_t at = 0;
        for (std::size_t k = i; k < j; ++k) {
            std::memcpy(buf + at, parts[k].data, parts[k].n);
            at += parts[k].n;
        }
        out.push_back({buf, bytes, parts[i].offset});
        i = j;
    }
    return out;
}

}  // namespace

atomic_write::atomic_write(std::string target) : target_(std::move(target)) {
    if (target_.empty() || target_.back() == '/')
        throw usage_error("cannot write to '" + target_ + "': not a file name");
    if (detail::location(target_).registry_scheme() != "file") {
        // A remote object (s3://): its source is atomic itself. The multipart upload publishes
        // the object whole at sync() and aborts when closed without it.
        remote_ = true;
        file_.emplace(target_, open_mode::write);
        return;
    }
    dir_ = directory_of(target_);
    struct stat st{};
    bool exists = sys::stat(target_.c_str(), &st) == 0;
    // Only a target that is not there counts as new: any other failure to look at it would
    // lose its permissions (or hide a real problem), so it stops the save before anything.
    if (!exists && errno != ENOENT) throw system_error(errno, "stat", {target_, 0, 0});
    if (exists && S_ISDIR(st.st_mode)) throw system_error(EISDIR, "open", {target_, 0, 0});
    mode_t mode = exists ? (st.st_mode & 07777) : 0666;
    remove_stale_temporaries(dir_, base_of(target_));
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
        temp_ = dir_ + "/." + base_of(target_) + unique_suffix();
        fd = sys::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL, exists ? 0600 : mode);
        if (fd < 0 && errno != EEXIST)
            throw system_error(errno, "create temporary file", {temp_, 0, 0});
    }
    if (fd < 0) throw system_error(EEXIST, "create temporary file", {temp_, 0, 0});
    // An existing target keeps its permissions, applied at commit: a read-only mode set now
    // would stop us from opening the temporary file for writing.
    keep_mode_ = exists;
    mode_ = mode;
    // New and ours alone: nobody else can hold it. Where the file system has no locks the save
    // goes on unlocked; a concurrent save may then take the file for stale, and this one fails
    // at rename with a clear error, the target untouched.
    sys::flock(fd, LOCK_EX | LOCK_NB);
    lock_fd_ = fd;
    try {
        file_.emplace(temp_, open_mode::write);
    } catch (...) {
        sys::unlink(temp_.c_str());
        sys::close(lock_fd_);
        throw;
    }
}

atomic_write::~atomic_write() {
    if (remote_) {
        try {
            file_.reset();  // closes without sync(): the upload is aborted
        } catch (...) {
        }
        return;
    }
    if (!done_) {
        // The name goes first: closing a file with hundreds of MiB not yet on disk took 80 ms
        // here (ext4), a time during which an interrupted save still showed its temporary.
        sys::unlink(temp_.c_str());
        try {
            file_.reset();  // cheap: the lock descriptor still holds the file
        } catch (...) {
        }
        if (lock_fd_ >= 0 && detail::stop_requested() && close_in_background(lock_fd_)) lock_fd_ = -1;
    }
    if (lock_fd_ >= 0) sys::close(lock_fd_);
}

bool atomic_write::close_in_background(int fd) noexcept {
    // The last close of the unlinked temporary drops its pages, waiting for any under writeback:
    // 38-74 ms after a stopped 1 GiB save on the 2-core development machine, most of the time
    // from the signal to the exception. A stopped save has nothing left to report, so a worker
    // of the engine's pool (no new thread) closes it while the caller goes on.
    try {
        std::shared_ptr<detail::engine> e = detail::engine::shared(settings::global().resolved());
        e->pool().submit([fd] { sys::close(fd); });
        return true;
    } catch (...) {
        return false;  // closed here, as before
    }
}

void atomic_write::write(const std::vector<write_piece>& pieces) {
    std::vector<write_piece> parts;
    for (const auto& p : pieces) {
        const auto* d = static_cast<const char*>(p.data);
        for (std::size_t at = 0; at < p.n;) {
            const std::uint64_t off = p.offset + at;
            const auto len = static_cast<std::size_t>(
                std::min<std::uint64_t>(p.n - at, write_stretch - off % write_stretch));
            parts.push_back({d + at, len, off});
            at += len;
        }
    }
    std::stable_sort(parts.begin(), parts.end(),
                     [](const write_piece& a, const write_piece& b) { return a.offset < b.offset; });
    std::vector<std::unique_ptr<char[]>> gathered;  // alive until every request below has ended
    parts = gather_small(parts, gathered);
    std::vector<std::future<std::size_t>> pending;
    pending.reserve(parts.size());
    std::exception_ptr first;
    try {
        for (const auto& p : parts) pending.push_back(file_->write_async(p.data, p.n, p.offset));
    } catch (...) {
        first = std::current_exception();
    }
    // Waited for in file order, so when request i is done every byte below its end is written
    // (any gap between pieces is a hole, which has nothing to write back). A remote target has
    // no page cache to push; a file system that refuses the hint gets none after the first.
    static const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    bool hint = !remote_ && lock_fd_ >= 0;
    std::uint64_t pushed = 0;
    for (std::size_t i = 0; i < pending.size(); ++i) {
        try {
            pending[i].get();
        } catch (...) {
            if (!first) first = std::current_exception();
            hint = false;
            continue;
        }
        // A stopped save is removed, not written back: no disk work for it.
        if (!hint || detail::stop_requested()) continue;
        const std::uint64_t end = detail::align_down(parts[i].offset + parts[i].n, page);
        if (end <= pushed) continue;
        hint = detail::start_writeback(lock_fd_, pushed, end - pushed);
        pushed = end;
    }
    if (first) std::rethrow_exception(first);
}

void atomic_write::commit() {
    // A save stopped (Ctrl-C) after its last write still publishes nothing.
    if (remote_) {
        detail::throw_if_stopped("saving " + redact_location(target_));  // the destructor aborts the upload
        file_->sync();  // publishes the object, whole
        file_->close();
        file_.reset();
        done_ = true;
        return;
    }
    try {
        // Not after the fsync alone: a stopped save must not wait for its bytes to reach the disk.
        detail::throw_if_stopped("saving " + redact_location(target_));
        file_->sync();
        file_->close();
        file_.reset();
    } catch (...) {
        file_.reset();
        sys::unlink(temp_.c_str());
        done_ = true;
        throw;
    }
    if (detail::stop_requested()) {
        sys::unlink(temp_.c_str());
        done_ = true;
        detail::throw_if_stopped("saving " + redact_location(target_));
    }
    if (keep_mode_ && sys::chmod(temp_.c_str(), mode_) != 0) {
        int e = errno;
        sys::unlink(temp_.c_str());
        done_ = true;
        throw system_error(e, "chmod temporary file", {temp_, 0, 0});
    }
    if (sys::rename(temp_.c_str(), target_.c_str()) != 0) {
        int e = errno;
        sys::unlink(temp_.c_str());
        done_ = true;
        throw system_error(e, "rename temporary file over the target", {target_, 0, 0});
    }
    done_ = true;
    // The rename is durable only once the directory entry is.
    int dfd = sys::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd < 0)
        throw system_error(errno, "open directory to fsync (the new file is in place; its name may not survive a power loss)",
                           {dir_, 0, 0});
    int rc = sys::fsync(dfd);
    int e = errno;
    sys::close(dfd);
    if (rc != 0 && e != EINVAL)
        throw system_error(e, "fsync directory (the new file is in place; its name may not survive a power loss)",
                           {dir_, 0, 0});
}

system_error about_target(const system_error& e, const std::string& target) {
    const std::string& path = e.where().path;
    const std::string temp_prefix = directory_of(target) + "/." + base_of(target) + ".tmp-";
    if (path.rfind(temp_prefix, 0) != 0) return e;
    // The message is "<what failed>: <strerror> (<path>...)": keep what failed, name the target.
    std::string what = e.what();
    std::string op = what.substr(0, what.find(std::string(": ") + std::strerror(e.code())));
    io_context where = e.where();
    where.path = target;
    return system_error(e.code(), "save: " + op + " [" + path.substr(path.rfind('/') + 1) + "]", where);
}

}  // namespace ferry::formats
