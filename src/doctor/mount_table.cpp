#include "doctor/mount_table.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <climits>
#include <cstdlib>

#include "doctor/probe_util.hpp"

namespace ferry::doctor {
namespace {

std::string unescape(const std::string& s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        auto oct = [](char c) { return c >= '0' && c <= '7'; };
        if (s[i] == '\\' && i + 3 < s.size() && oct(s[i + 1]) && oct(s[i + 2]) && oct(s[i + 3])) {
            out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
            continue;
        }
        out += s[i];
    }
    return out;
}

bool is_under(const std::string& path, const std::string& mount_point) {
    if (mount_point == "/") return true;
    return path.compare(0, mount_point.size(), mount_point) == 0 &&
           (path.size() == mount_point.size() || path[mount_point.size()] == '/');
}

}  // namespace

std::vector<mount_entry> parse_mountinfo(const std::string& text) {
    std::vector<mount_entry> out;
    for (const auto& line : split(text, '\n')) {
        auto f = split(line, ' ');
        // id parent major:minor root mount_point options [optional...] - type source super
        std::size_t dash = 0;
        for (std::size_t i = 6; i < f.size(); ++i)
            if (f[i] == "-") {
                dash = i;
                break;
            }
        if (dash == 0 || dash + 2 >= f.size()) continue;
        mount_entry e;
        e.id = std::strtoull(f[0].c_str(), nullptr, 10);
        auto mm = split(f[2], ':');
        if (mm.size() != 2) continue;
        e.major = static_cast<unsigned>(std::strtoul(mm[0].c_str(), nullptr, 10));
        e.minor = static_cast<unsigned>(std::strtoul(mm[1].c_str(), nullptr, 10));
        e.root = unescape(f[3]);
        e.mount_point = unescape(f[4]);
        e.mount_options = f[5];
        e.fs_type = f[dash + 1];
        e.source = unescape(f[dash + 2]);
        e.super_options = dash + 3 < f.size() ? f[dash + 3] : "";
        out.push_back(std::move(e));
    }
    return out;
}

std::optional<mount_entry> find_mount(const std::string& path) {
    auto text = read_text("/proc/self/mountinfo", 16 << 20);
    if (!text) return std::nullopt;
    auto mounts = parse_mountinfo(*text);
#ifdef STATX_MNT_ID
    struct statx sx {};
    if (::statx(AT_FDCWD, path.c_str(), 0, STATX_MNT_ID, &sx) == 0 && (sx.stx_mask & STATX_MNT_ID)) {
        for (const auto& m : mounts)
            if (m.id == sx.stx_mnt_id) return m;
    }
#endif
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    char resolved[PATH_MAX];
    if (!::realpath(path.c_str(), resolved)) return std::nullopt;
    std::string real = resolved;
    const mount_entry* best = nullptr;
    for (const auto& m : mounts) {
        if (!is_under(real, m.mount_point)) continue;
        if (m.major != ::major(st.st_dev) || m.minor != ::minor(st.st_dev)) continue;
        if (!best || m.mount_point.size() >= best->mount_point.size()) best = &m;
    }
    if (best) return *best;
    return std::nullopt;
}

std::optional<std::string> mount_option(const std::string& options, const std::string& name) {
    for (const auto& o : split(options, ','))
        if (o.rfind(name + "=", 0) == 0) return o.substr(name.size() + 1);
    return std::nullopt;
}

}  // namespace ferry::doctor
