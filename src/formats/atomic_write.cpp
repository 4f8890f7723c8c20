#include "formats/atomic_write.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <random>

#include "ferry/error.hpp"

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

std::string unique_suffix() {
    static std::atomic<unsigned> counter{0};
    static const unsigned seed = std::random_device{}();
    char buf[64];
    std::snprintf(buf, sizeof buf, ".tmp-%ld-%08x-%u", static_cast<long>(::getpid()), seed,
                  counter.fetch_add(1));
    return buf;
}

// Removes ".NAME.tmp-*" files next to the target whose writer is gone. Every writer holds
// flock(LOCK_EX) on its temporary file until it commits or gives up, so a file whose lock can
// be taken belongs to a dead writer. (A writer caught between creating its file and locking it
// would lose the file and fail at rename with a clear error; the target is never touched.)
void remove_stale_temporaries(const std::string& dir, const std::string& base) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    const std::string prefix = "." + base + ".tmp-";
    while (const dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        std::string path = dir + "/" + name;
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) continue;
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(path.c_str());
        ::close(fd);
    }
    ::closedir(d);
}

}  // namespace

atomic_write::atomic_write(std::string target) : target_(std::move(target)) {
    if (target_.empty() || target_.back() == '/')
        throw usage_error("cannot write to '" + target_ + "': not a file name");
    dir_ = directory_of(target_);
    struct stat st{};
    bool exists = ::stat(target_.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) throw system_error(EISDIR, "open", {target_, 0, 0});
    mode_t mode = exists ? (st.st_mode & 07777) : 0666;
    remove_stale_temporaries(dir_, base_of(target_));
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
        temp_ = dir_ + "/." + base_of(target_) + unique_suffix();
        fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, exists ? 0600 : mode);
        if (fd < 0 && errno != EEXIST)
            throw system_error(errno, "create temporary file", {temp_, 0, 0});
    }
    if (fd < 0) throw system_error(EEXIST, "create temporary file", {temp_, 0, 0});
    // An existing target keeps its permissions, applied at commit: a read-only mode set now
    // would stop us from opening the temporary file for writing.
    keep_mode_ = exists;
    mode_ = mode;
    ::flock(fd, LOCK_EX | LOCK_NB);  // new and ours alone: cannot be held by anyone else
    lock_fd_ = fd;
    try {
        file_.emplace(temp_, open_mode::write);
    } catch (...) {
        ::unlink(temp_.c_str());
        ::close(lock_fd_);
        throw;
    }
}

atomic_write::~atomic_write() {
    if (!done_) {
        try {
            file_.reset();
        } catch (...) {
        }
        ::unlink(temp_.c_str());
    }
    if (lock_fd_ >= 0) ::close(lock_fd_);
}

void atomic_write::commit() {
    try {
        file_->sync();
        file_->close();
        file_.reset();
    } catch (...) {
        file_.reset();
        ::unlink(temp_.c_str());
        done_ = true;
        throw;
    }
    if (keep_mode_ && ::chmod(temp_.c_str(), mode_) != 0) {
        int e = errno;
        ::unlink(temp_.c_str());
        done_ = true;
        throw system_error(e, "chmod temporary file", {temp_, 0, 0});
    }
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
        int e = errno;
        ::unlink(temp_.c_str());
        done_ = true;
        throw system_error(e, "rename temporary file over the target", {target_, 0, 0});
    }
    done_ = true;
    // The rename is durable only once the directory entry is.
    int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) throw system_error(errno, "open directory to fsync", {dir_, 0, 0});
    int rc = ::fsync(dfd);
    int e = errno;
    ::close(dfd);
    if (rc != 0 && e != EINVAL) throw system_error(e, "fsync directory", {dir_, 0, 0});
}

}  // namespace ferry::formats
