#include "doctor/probe_util.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ferry::doctor {

std::optional<std::string> read_text(const std::string& path, std::size_t limit,
                                     std::string* error) {
    // O_NONBLOCK: a FIFO or device named where a file is expected must not stall the report.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (error) *error = errno_text(errno);
        return std::nullopt;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (error) *error = "not a regular file";
        ::close(fd);
        return std::nullopt;
    }
    std::string out;
    char buf[8192];
    while (out.size() < limit) {
        ssize_t n = ::read(fd, buf, std::min(sizeof buf, limit - out.size()));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            if (error) *error = errno_text(errno);
            ::close(fd);
            return std::nullopt;
        }
        if (n == 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
}

std::optional<std::string> read_line(const std::string& path) {
    auto text = read_text(path, 4096);
    if (!text) return std::nullopt;
    auto nl = text->find('\n');
    return trim(std::string_view(*text).substr(0, nl));
}

std::optional<std::int64_t> read_integer(const std::string& path) {
    auto line = read_line(path);
    if (!line || line->empty()) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(line->c_str(), &end, 0);
    if (errno != 0 || end == line->c_str()) return std::nullopt;
    return v;
}

bool path_exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

std::string trim(std::string_view s) {
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return std::string(s);
}

std::vector<std::string> split(std::string_view s, char sep) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= s.size()) {
        auto pos = s.find(sep, start);
        if (pos == std::string_view::npos) pos = s.size();
        out.emplace_back(s.substr(start, pos - start));
        start = pos + 1;
    }
    return out;
}

std::string errno_text(int code) {
    std::string name;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    if (const char* n = ::strerrorname_np(code)) name = n;
#endif
    if (name.empty()) name = "errno " + std::to_string(code);
    return name + ": " + std::strerror(code);
}

std::string human_bytes(std::uint64_t bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    if (u == 0)
        std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    else
        std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

json version_string(int code) {
    if (code <= 0) return nullptr;
    return std::to_string(code / 1000) + "." + std::to_string((code % 1000) / 10);
}

std::vector<std::string> list_directory(const std::string& dir, std::string_view prefix) {
    std::vector<std::string> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return out;
    while (dirent* e = ::readdir(d)) {
        std::string_view name = e->d_name;
        if (name == "." || name == "..") continue;
        if (name.substr(0, prefix.size()) == prefix) out.emplace_back(name);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace ferry::doctor
