// The mount a path lives on, from /proc/self/mountinfo.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::doctor {

/// One line of /proc/self/mountinfo.
struct mount_entry {
    std::uint64_t id = 0;
    unsigned major = 0;
    unsigned minor = 0;
    std::string root;           ///< the part of the file system mounted here
    std::string mount_point;
    std::string mount_options;  ///< per-mount ("rw,relatime")
    std::string fs_type;        ///< "ext4", "tmpfs", "fuse.sshfs"
    std::string source;         ///< "/dev/vda", "tmpfs"
    std::string super_options;  ///< per file system ("rw,data=ordered")
};

/// Parses mountinfo text; malformed lines are skipped. Octal escapes (\040) are decoded.
std::vector<mount_entry> parse_mountinfo(const std::string& text);

/// The mount holding `path`: by mount id (statx STATX_MNT_ID) where the kernel reports it, else
/// the deepest mount point above the resolved path on the same device (the last such line, which
/// is the one on top).
std::optional<mount_entry> find_mount(const std::string& path);

/// The value of `name=` in a comma-separated option list, or nullopt.
std::optional<std::string> mount_option(const std::string& options, const std::string& name);

}  // namespace ferry::doctor
