// Whether O_DIRECT works on a path: open, alignment (statx DIOALIGN) and one aligned read.
#include "doctor/path_probe.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "doctor/mount_table.hpp"
#include "os/alignment.hpp"
#include "os/posix_io.hpp"
#include "shim/cufile.hpp"
#include "doctor/probe_files.hpp"

namespace ferry::doctor {
namespace {

/// An aligned buffer for O_DIRECT probes.
struct aligned_buffer {
    void* p = nullptr;
    aligned_buffer(std::size_t align, std::size_t n) {
        if (::posix_memalign(&p, std::max<std::size_t>(align, sizeof(void*)), n) != 0) p = nullptr;
        if (p) std::memset(p, 0, n);
    }
    ~aligned_buffer() { std::free(p); }
};

void fill_alignment(json& j, int fd) {
    detail::direct_alignment a = detail::query_direct_alignment(fd);
    j["memory_alignment"] = a.memory;
    j["offset_alignment"] = a.offset;
    j["alignment_source"] = a.from_statx ? "statx" : "default";
}

/// One aligned O_DIRECT read at offset 0 of an fd opened with O_DIRECT: some file systems
/// accept the open and refuse the I/O. O_DIRECT reads bypass the page cache.
void read_probe(json& j, int fd, std::uint64_t size) {
    std::size_t a = std::max<std::size_t>(j["offset_alignment"].get<std::size_t>(), 4096);
    std::size_t m = j["memory_alignment"].get<std::size_t>();
    if (size == 0) {
        j["read_probe"] = "skipped: empty file";
        return;
    }
    aligned_buffer buf(std::max(m, a), a);
    if (!buf.p) {
        j["read_probe"] = "skipped: no memory";
        return;
    }
    ssize_t r;
    do r = ::pread(fd, buf.p, a, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        j["supported"] = false;
        j["error"] = "O_DIRECT read: " + errno_text(errno);
        j["read_probe"] = "failed";
    } else {
        j["read_probe"] = "ok";
    }
}

}  // namespace

json probe_direct_io(const std::string& path, bool is_directory) {
    json j;
    j["supported"] = nullptr;
    j["probe"] = "none";
    j["error"] = nullptr;
    j["memory_alignment"] = nullptr;
    j["offset_alignment"] = nullptr;
    j["alignment_source"] = nullptr;
    j["read_probe"] = nullptr;
    if (!is_directory) {
        j["probe"] = "file";
        int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0) {
            int e = errno;
            j["supported"] = e == EINVAL ? json(false) : json(nullptr);
            j["error"] = "open with O_DIRECT: " + errno_text(e);
            return j;
        }
        fd_owner owner(fd);
        j["supported"] = true;
        fill_alignment(j, fd);
        struct stat st {};
        if (::fstat(fd, &st) == 0) read_probe(j, fd, static_cast<std::uint64_t>(st.st_size));
        return j;
    }
    // A directory: an unnamed temporary file in it (nothing to clean up), else a named one
    // removed at once, else an existing file (a read-only directory).
    j["probe"] = "temporary file";
    int fd = ::open(path.c_str(), O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
    int tmp_errno = fd < 0 ? errno : 0;
    if (fd < 0 && tmp_errno == EINVAL) {
        // EINVAL may be about O_DIRECT or about O_TMPFILE: ask again without O_DIRECT.
        int plain = ::open(path.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (plain >= 0) {
            ::close(plain);
            j["supported"] = false;
            j["error"] = "open with O_DIRECT: " + errno_text(EINVAL);
            return j;
        }
    }
    if (fd < 0 && (tmp_errno == EOPNOTSUPP || tmp_errno == EISDIR || tmp_errno == ENOENT ||
                   tmp_errno == EINVAL)) {
        std::string name = path + "/.ferry-doctor-XXXXXX";
        std::vector<char> buf(name.begin(), name.end());
        buf.push_back('\0');
        fd = ::mkostemp(buf.data(), O_DIRECT | O_CLOEXEC);
        tmp_errno = fd < 0 ? errno : 0;
        if (fd >= 0) ::unlink(buf.data());
    }
    if (fd >= 0) {
        fd_owner owner(fd);
        j["supported"] = true;
        fill_alignment(j, fd);
        // Write one aligned block and read it back: the I/O must work, not only the open.
        std::size_t a = std::max<std::size_t>(j["offset_alignment"].get<std::size_t>(), 4096);
        aligned_buffer buf(std::max(j["memory_alignment"].get<std::size_t>(), a), a);
        if (buf.p) {
            ssize_t w = ::pwrite(fd, buf.p, a, 0);
            ssize_t r = w == static_cast<ssize_t>(a) ? ::pread(fd, buf.p, a, 0) : -1;
            if (w < 0 || r < 0) {
                j["supported"] = false;
                j["error"] = "O_DIRECT I/O: " + errno_text(errno);
                j["read_probe"] = "failed";
            } else {
                j["read_probe"] = "ok";
            }
        }
        return j;
    }
    if (tmp_errno == EINVAL) {
        j["supported"] = false;
        j["error"] = "open with O_DIRECT: " + errno_text(tmp_errno);
        return j;
    }
    // Not writable (EACCES, EROFS): try an existing file inside.
    DIR* d = ::opendir(path.c_str());
    if (d) {
        int seen = 0;
        while (dirent* e = ::readdir(d)) {
            if (++seen > 256) break;
            std::string child = path + "/" + e->d_name;
            struct stat st {};
            if (::stat(child.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
            ::closedir(d);
            json f = probe_direct_io(child, false);
            f["probe"] = "file in directory: " + child;
            return f;
        }
        ::closedir(d);
    }
    j["error"] = "cannot create a file to probe O_DIRECT: " + errno_text(tmp_errno);
    return j;
}

}  // namespace ferry::doctor
