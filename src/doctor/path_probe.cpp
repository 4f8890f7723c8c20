// Everything about one path, gathered from the probes beside this file, plus its type, mount,
// block device and a cuFile registration attempt.
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

#include "backend/registry.hpp"
#include "doctor/mount_table.hpp"
#include "os/alignment.hpp"
#include "os/posix_io.hpp"
#include "shim/cufile.hpp"
#include "doctor/probe_files.hpp"

namespace ferry::doctor {
namespace {

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
}  // namespace

namespace {

/// The file system holding `path`: its magic and name from statfs, then what mountinfo says
/// of its mount (ext4 apart from ext2/3, options, ext4's data mode).
json probe_filesystem(const std::string& path, const std::optional<mount_entry>& mount) {
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
    return fs;
}

/// The block device under the file system ("block_device", "udev"): the file system's device,
/// or for file systems that report an anonymous device (btrfs), the block device named as the
/// mount's source; its disk, block size, rotation and model from sysfs.
void probe_block_device(const struct stat& st, const std::optional<mount_entry>& mount, json& j) {
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
    if (maj == 0) {
        j["block_device"] = nullptr;
        j["udev"] = nullptr;
        return;
    }
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
}

/// Registration is where cuFile checks the file system and volume (and where a missing udev
/// record fails with 5027); tried where cuFile is up, on the file or a file in the directory.
json probe_cufile_register(const std::string& path, bool is_file, bool is_dir, const std::string& cufile_library) {
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
            const int status = detail::register_probe("cufile", fd);
            reg["attempted"] = true;
            reg["file"] = target;
            reg["ok"] = status == 0;
            reg["status"] = status;
            reg["message"] = shim::cufile_status_string(status);
        }
    }
    return reg;
}

}  // namespace

json probe_path(const std::string& path, const std::string& cufile_library) {
    json j;
    j["path"] = path;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        j["exists"] = false;
        j["error"] = errno_text(errno);
        for (const char* k : {"type", "size_bytes", "filesystem", "block_device", "udev", "direct_io", "page_cache",
                              "cufile_register"})
            j[k] = nullptr;
        return j;
    }
    j["exists"] = true;
    j["error"] = nullptr;
    const bool is_dir = S_ISDIR(st.st_mode);
    const bool is_file = S_ISREG(st.st_mode);
    j["type"] = type_name(st.st_mode);
    j["size_bytes"] = is_file ? json(static_cast<std::uint64_t>(st.st_size)) : json(nullptr);
    auto mount = find_mount(path);
    j["filesystem"] = probe_filesystem(path, mount);
    probe_block_device(st, mount, j);
    j["direct_io"] = is_file || is_dir ? probe_direct_io(path, is_dir) : json(nullptr);
    j["page_cache"] = is_file || is_dir ? probe_page_cache(path, is_dir) : json(nullptr);
    j["cufile_register"] = probe_cufile_register(path, is_file, is_dir, cufile_library);
    return j;
}

}  // namespace ferry::doctor
