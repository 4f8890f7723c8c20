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

#include "backend/cufile/cufile_handle.hpp"
#include "doctor/mount_table.hpp"
#include "os/alignment.hpp"
#include "os/posix_io.hpp"
#include "shim/cufile.hpp"

namespace ferry::doctor {
namespace {

/// Closes an fd on scope exit.
struct fd_owner {
    int fd = -1;
    explicit fd_owner(int f) : fd(f) {}
    fd_owner(const fd_owner&) = delete;
    fd_owner& operator=(const fd_owner&) = delete;
    ~fd_owner() {
        if (fd >= 0) ::close(fd);
    }
};

// A directory holding more files than this is measured on its first files only, and the
// residency scan of one path stops after this many bytes of files (mincore is cheap, not free).
constexpr std::size_t max_files_scanned = 1024;
constexpr std::uint64_t max_bytes_scanned = 16ull << 40;

std::string type_name(mode_t m) {
    if (S_ISREG(m)) return "file";
    if (S_ISDIR(m)) return "directory";
    if (S_ISBLK(m)) return "block device";
    if (S_ISCHR(m)) return "character device";
    if (S_ISFIFO(m)) return "fifo";
    if (S_ISSOCK(m)) return "socket";
    return "other";
}

/// Resident pages of one open file, mapping it a bounded window at a time (mmap + mincore
/// never reads the file or changes what is cached).
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

std::string filesystem_name(unsigned long magic) {
    // f_type values from the kernel's file-system headers (and vendors' for out-of-tree ones).
    switch (static_cast<std::uint32_t>(magic)) {
        case 0xEF53: return "ext2/ext3/ext4";
        case 0x58465342: return "xfs";
        case 0x9123683E: return "btrfs";
        case 0xF2F52010: return "f2fs";
        case 0x01021994: return "tmpfs";
        case 0x858458f6: return "ramfs";
        case 0x958458f6: return "hugetlbfs";
        case 0x794c7630: return "overlay";
        case 0x65735546: return "fuse";
        case 0x6969: return "nfs";
        case 0xFF534D42: return "cifs";
        case 0xFE534D42: return "smb2";
        case 0x00c36400: return "ceph";
        case 0x01021997: return "9p";
        case 0x73717368: return "squashfs";
        case 0x4d44: return "vfat";
        case 0x2011BAB0: return "exfat";
        case 0x5346544e: return "ntfs";
        case 0x2fc12fc1: return "zfs";
        case 0x0BD00BD0: return "lustre";
        case 0x47504653: return "gpfs";
        case 0x19830326: return "beegfs";
        case 0xca451a4e: return "bcachefs";
        case 0x9fa0: return "proc";
        case 0x62656572: return "sysfs";
        case 0x7461636f: return "ocfs2";
        default: return "";
    }
}

json probe_udev_record(unsigned major, unsigned minor) {
    json j;
    std::string rec = "/run/udev/data/b" + std::to_string(major) + ":" + std::to_string(minor);
    j["record"] = rec;
    std::string err;
    auto text = read_text(rec, 1 << 20, &err);
    j["exists"] = text.has_value();
    j["id_fs_usage"] = nullptr;
    j["id_fs_type"] = nullptr;
    if (text)
        for (const auto& line : split(*text, '\n')) {
            if (line.rfind("E:ID_FS_USAGE=", 0) == 0) j["id_fs_usage"] = line.substr(14);
            if (line.rfind("E:ID_FS_TYPE=", 0) == 0) j["id_fs_type"] = line.substr(13);
        }
    return j;
}

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

json probe_path(const std::string& path, const std::string& cufile_library) {
    json j;
    j["path"] = path;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        j["exists"] = false;
        j["error"] = errno_text(errno);
        j["type"] = nullptr;
        j["size_bytes"] = nullptr;
        j["filesystem"] = nullptr;
        j["block_device"] = nullptr;
        j["udev"] = nullptr;
        j["direct_io"] = nullptr;
        j["page_cache"] = nullptr;
        j["cufile_register"] = nullptr;
        return j;
    }
    j["exists"] = true;
    j["error"] = nullptr;
    const bool is_dir = S_ISDIR(st.st_mode);
    const bool is_file = S_ISREG(st.st_mode);
    j["type"] = type_name(st.st_mode);
    j["size_bytes"] = is_file ? json(static_cast<std::uint64_t>(st.st_size)) : json(nullptr);

    json fs;
    struct statfs sfs {};
    if (::statfs(path.c_str(), &sfs) == 0) {
        char magic[16];
        std::snprintf(magic, sizeof magic, "0x%lx", static_cast<unsigned long>(sfs.f_type));
        fs["magic"] = magic;
        std::string name = filesystem_name(static_cast<unsigned long>(sfs.f_type));
        fs["type"] = name.empty() ? json(nullptr) : json(name);
    } else {
        fs["magic"] = nullptr;
        fs["type"] = nullptr;
    }
    auto mount = find_mount(path);
    if (mount) {
        fs["type"] = mount->fs_type;  // mountinfo names ext4 apart from ext2/3
        fs["mount_point"] = mount->mount_point;
        fs["source"] = mount->source;
        fs["mount_options"] = mount->mount_options;
        fs["super_options"] = mount->super_options;
        if (mount->fs_type == "ext4") {
            auto mode = mount_option(mount->super_options, "data");
            // The kernel lists data= only when it differs from the default, ordered.
            fs["ext4_data_mode"] = mode ? *mode : "ordered";
        }
    } else {
        fs["mount_point"] = nullptr;
        fs["source"] = nullptr;
        fs["mount_options"] = nullptr;
        fs["super_options"] = nullptr;
    }
    j["filesystem"] = fs;

    // Block device: the file system's device, or for file systems that report an anonymous
    // device (btrfs), the block device named as the mount's source.
    unsigned maj = ::major(st.st_dev), min = ::minor(st.st_dev);
    std::string from = "st_dev";
    if (maj == 0 && mount && mount->source.rfind("/dev/", 0) == 0) {
        struct stat src {};
        if (::stat(mount->source.c_str(), &src) == 0 && S_ISBLK(src.st_mode)) {
            maj = ::major(src.st_rdev);
            min = ::minor(src.st_rdev);
            from = "mount source";
        }
    }
    if (maj != 0) {
        json b;
        std::string id = std::to_string(maj) + ":" + std::to_string(min);
        b["device"] = id;
        b["from"] = from;
        std::string sys = "/sys/dev/block/" + id;
        char target[4096];
        ssize_t n = ::readlink(sys.c_str(), target, sizeof target - 1);
        std::string name, disk;
        if (n > 0) {
            std::string t(target, static_cast<std::size_t>(n));
            name = t.substr(t.rfind('/') + 1);
            disk = name;
            if (path_exists(sys + "/partition")) {
                std::string parent = t.substr(0, t.rfind('/'));
                disk = parent.substr(parent.rfind('/') + 1);
            }
        }
        b["name"] = name.empty() ? json(nullptr) : json(name);
        b["disk"] = disk.empty() ? json(nullptr) : json(disk);
        std::string q = "/sys/block/" + disk + "/queue/";
        auto lbs = disk.empty() ? std::nullopt : read_integer(q + "logical_block_size");
        auto rot = disk.empty() ? std::nullopt : read_integer(q + "rotational");
        auto model = disk.empty() ? std::nullopt : read_line("/sys/block/" + disk + "/device/model");
        b["logical_block_size"] = lbs ? json(*lbs) : json(nullptr);
        b["rotational"] = rot ? json(*rot != 0) : json(nullptr);
        b["model"] = model && !model->empty() ? json(*model) : json(nullptr);
        j["block_device"] = b;
        j["udev"] = probe_udev_record(maj, min);
    } else {
        j["block_device"] = nullptr;
        j["udev"] = nullptr;
    }

    if (is_file || is_dir) {
        j["direct_io"] = probe_direct_io(path, is_dir);
        j["page_cache"] = probe_page_cache(path, is_dir);
    } else {
        j["direct_io"] = nullptr;
        j["page_cache"] = nullptr;
    }

    // Registration is where cuFile checks the file system and volume (and where a missing udev
    // record fails with 5027); try it where cuFile is up, on the file or a file in the directory.
    json reg;
    reg["attempted"] = false;
    const shim::cufile_state& cf = shim::cufile(cufile_library);
    std::string target = is_file ? path : std::string();
    if (is_dir) {
        if (DIR* d = ::opendir(path.c_str())) {
            while (dirent* e = ::readdir(d)) {
                std::string child = path + "/" + e->d_name;
                struct stat cs {};
                if (::stat(child.c_str(), &cs) == 0 && S_ISREG(cs.st_mode)) {
                    target = child;
                    break;
                }
            }
            ::closedir(d);
        }
    }
    if (!cf.usable()) {
        reg["skipped"] = "cuFile is not usable here";
    } else if (target.empty()) {
        reg["skipped"] = "no regular file to register";
    } else {
        int fd = ::open(target.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0) fd = ::open(target.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0) {
            reg["skipped"] = "cannot open " + target + ": " + errno_text(errno);
        } else {
            fd_owner owner(fd);
            detail::cufile_handle h(fd);
            reg["attempted"] = true;
            reg["file"] = target;
            reg["ok"] = h.ok();
            reg["status"] = h.status();
            reg["message"] = shim::cufile_status_string(h.status());
        }
    }
    j["cufile_register"] = reg;
    return j;
}

}  // namespace ferry::doctor
