// The file system of a path by its statfs magic, and the udev record of its block device.
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

}  // namespace ferry::doctor
