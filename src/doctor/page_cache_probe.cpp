// How much of a path's files is in the page cache (mmap + mincore; the files are never read).
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

bool count_resident(int fd, std::uint64_t size, std::uint64_t& resident_bytes) {
    const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const std::uint64_t window = 64ull << 20;
    std::vector<unsigned char> vec(window / page);
    for (std::uint64_t off = 0; off < size; off += window) {
        std::size_t len = static_cast<std::size_t>(std::min(window, size - off));
        void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(off));
        if (p == MAP_FAILED) return false;
        int rc = ::mincore(p, len, vec.data());
        ::munmap(p, len);
        if (rc != 0) return false;
        std::size_t pages = (len + page - 1) / page;
        for (std::size_t i = 0; i < pages; ++i)
            if (vec[i] & 1) resident_bytes += std::min<std::uint64_t>(page, size - off - i * page);
    }
    return true;
}

}  // namespace

json probe_page_cache(const std::string& path, bool is_directory) {
    json j;
    std::uint64_t bytes = 0, resident = 0, files = 0, failed = 0;
    bool complete = true;
    auto measure = [&](const std::string& file) {
        int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0) {
            ++failed;
            return;
        }
        fd_owner owner(fd);
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
        if (bytes + static_cast<std::uint64_t>(st.st_size) > max_bytes_scanned) {
            complete = false;
            return;
        }
        std::uint64_t r = 0;
        if (!count_resident(fd, static_cast<std::uint64_t>(st.st_size), r)) {
            ++failed;
            return;
        }
        ++files;
        bytes += static_cast<std::uint64_t>(st.st_size);
        resident += r;
    };
    if (!is_directory) {
        measure(path);
    } else if (DIR* d = ::opendir(path.c_str())) {
        std::size_t n = 0;
        while (dirent* e = ::readdir(d)) {
            std::string child = path + "/" + e->d_name;
            struct stat st {};
            if (::lstat(child.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
            if (++n > max_files_scanned) {
                complete = false;
                break;
            }
            measure(child);
        }
        ::closedir(d);
    }
    j["files"] = files;
    j["bytes"] = bytes;
    j["resident_bytes"] = resident;
    j["resident_fraction"] = bytes ? json(static_cast<double>(resident) / static_cast<double>(bytes))
                                   : json(nullptr);
    j["complete"] = complete && failed == 0;
    j["unmeasured_files"] = failed;
    return j;
}

}  // namespace ferry::doctor
