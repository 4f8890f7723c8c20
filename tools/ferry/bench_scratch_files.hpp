// ferry bench's own files: fresh names, removed on every exit path.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/error.hpp"

namespace ferry::cli::bench {

// Files the bench makes (the generated input, the write target) get fresh names, never a
// user's file, and are removed however the run ends: return, exception, or SIGINT, SIGTERM,
// SIGHUP (the handler removes them and dies of the signal as it would have).
class scratch_files {
public:
    scratch_files() = default;
    scratch_files(const scratch_files&) = delete;
    scratch_files& operator=(const scratch_files&) = delete;
    ~scratch_files() {
        for (int i = 0; i < max_files; ++i)
            if (names[i][0]) ::unlink(names[i]);
        for (int i = 0; i < max_files; ++i) names[i][0] = '\0';
    }

    /// Creates `<dir>/ferry-bench-XXXXXX.bin` (O_EXCL); its name is removed at the end.
    std::string create(const std::string& dir) {
        install_handlers();
        std::string name = dir + "/ferry-bench-XXXXXX.bin";
        if (name.size() >= sizeof names[0]) throw usage_error("directory name too long: " + dir);
        for (int i = 0; i < max_files; ++i) {
            if (names[i][0]) continue;
            std::vector<char> t(name.begin(), name.end());
            t.push_back('\0');
            int fd = ::mkstemps(t.data(), 4);
            if (fd < 0) throw system_error(errno, "create a scratch file", {name});
            ::close(fd);
            std::memcpy(names[i], t.data(), t.size());
            return t.data();
        }
        throw usage_error("too many scratch files");
    }

private:
    static constexpr int max_files = 4;
    static inline char names[max_files][4096] = {};

    static void on_signal(int sig) {
        for (int i = 0; i < max_files; ++i)
            if (names[i][0]) ::unlink(names[i]);
        ::signal(sig, SIG_DFL);
        ::raise(sig);
    }
    static void install_handlers() {
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
            struct sigaction old{};
            if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
                struct sigaction sa{};
                sa.sa_handler = on_signal;
                ::sigemptyset(&sa.sa_mask);
                ::sigaction(sig, &sa, nullptr);
            }
        }
    }
};

inline std::string directory_of(const std::string& path) {
    auto slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace ferry::cli::bench
