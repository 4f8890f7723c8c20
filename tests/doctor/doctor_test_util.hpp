// Helpers for the doctor's tests: scratch directories on a chosen disk and running the CLI.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace ferry::doctor::testing {

/// A directory made with mkdtemp under `parent`, removed with its contents at scope exit.
class scratch_dir {
public:
    explicit scratch_dir(const std::string& parent) {
        std::string templ = parent + "/ferry-doctor-test-XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        if (::mkdtemp(buf.data())) path_ = buf.data();
    }
    ~scratch_dir() {
        std::error_code ec;
        if (!path_.empty()) std::filesystem::remove_all(path_, ec);
    }
    scratch_dir(const scratch_dir&) = delete;
    scratch_dir& operator=(const scratch_dir&) = delete;
    bool ok() const { return !path_.empty(); }
    const std::string& path() const { return path_; }
    /// Writes `bytes` bytes of a pattern to a new file and returns its path.
    std::string write_file(const std::string& name, std::size_t bytes) const {
        std::string p = path_ + "/" + name;
        int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        std::vector<char> chunk(1 << 16);
        for (std::size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i * 31);
        for (std::size_t done = 0; fd >= 0 && done < bytes;) {
            std::size_t n = std::min(chunk.size(), bytes - done);
            ssize_t w = ::write(fd, chunk.data(), n);
            if (w <= 0) break;
            done += static_cast<std::size_t>(w);
        }
        if (fd >= 0) {
            ::fsync(fd);
            ::close(fd);
        }
        return p;
    }

private:
    std::string path_;
};

/// The directory the build writes to: a real disk, unlike /dev/shm.
inline std::string build_dir() { return std::filesystem::path(FERRY_CLI).parent_path().string(); }

/// Output and exit status of a shell command line.
struct command_result {
    std::string out;
    int status = -1;  ///< exit status, or -1 when it did not exit normally
};

inline command_result run_shell(const std::string& command) {
    command_result r;
    FILE* p = ::popen(command.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int st = ::pclose(p);
    if (st != -1 && WIFEXITED(st)) r.status = WEXITSTATUS(st);
    return r;
}

/// Single-quoted for sh.
inline std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

}  // namespace ferry::doctor::testing
