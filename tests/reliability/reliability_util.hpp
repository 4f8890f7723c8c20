// Shared by the reliability tests: a fault-injection plan behind ferry::sys::hook, a watchdog
// that turns a hang into a failure, and checks for leaked descriptors, busy workers and stray
// temporary files.
#pragma once

#include <dirent.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "ferry/settings.hpp"
#include "io/engine.hpp"
#include "os/sys.hpp"

namespace ferry::test {

/// Where descriptor `name` of this process points ("" if it cannot be read).
inline std::string fd_target(const std::string& name) {
    char target[512] = {};
    ssize_t n = ::readlink(("/proc/self/fd/" + name).c_str(), target, sizeof target - 1);
    return n > 0 ? std::string(target, static_cast<std::size_t>(n)) : std::string();
}

/// Open descriptors of this process, not counting those on the test executable or under
/// /proc: a sanitizer runtime symbolizing a stack (under TSan, when a suppressed report comes
/// up on a worker) opens /proc/self/maps for a moment and the executable for good. ferry's
/// data paths open neither.
inline int open_fds() {
    char exe[512] = {};
    ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    const std::string self = len > 0 ? std::string(exe, static_cast<std::size_t>(len)) : std::string();
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (dirent* e = ::readdir(d))
            if (e->d_name[0] != '.') {
                std::string t = fd_target(e->d_name);
                if ((self.empty() || t != self) && t.rfind("/proc/", 0) != 0) ++n;
            }
        ::closedir(d);
    }
    return n;  // the directory stream's own descriptor points under /proc: not counted
}

/// What this process's descriptors point at (" 3->/tmp/x ..."), for a leak report.
inline std::string fd_listing() {
    std::string out;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (dirent* e = ::readdir(d))
            if (e->d_name[0] != '.') out += std::string(" ") + e->d_name + "->" + fd_target(e->d_name);
        ::closedir(d);
    }
    return out;
}

/// Names in `dir`, sorted.
inline std::set<std::string> dir_entries(const std::string& dir) {
    std::set<std::string> out;
    if (DIR* d = ::opendir(dir.c_str())) {
        while (dirent* e = ::readdir(d))
            if (std::string_view(e->d_name) != "." && std::string_view(e->d_name) != "..") out.insert(e->d_name);
        ::closedir(d);
    }
    return out;
}

/// Runs `op` on another thread and waits at most `limit`. A hang cannot be recovered from (the
/// thread is stuck inside the library), so it ends the process with a message: the test fails
/// instead of stalling CI until its global timeout.
inline void within(std::chrono::seconds limit, const std::string& what, const std::function<void()>& op) {
    auto f = std::async(std::launch::async, op);
    if (f.wait_for(limit) == std::future_status::timeout) {
        std::fprintf(stderr, "watchdog: '%s' still running after %lld s: a hang\n", what.c_str(),
                     static_cast<long long>(limit.count()));
        std::fflush(stderr);
        std::_Exit(97);
    }
    f.get();  // rethrows what op threw
}

/// Whether the workers of the engine that `s` selects are idle (waits up to a second for the
/// last task to retire after its result was delivered).
inline bool workers_idle(const settings& s) {
    auto e = detail::engine::shared(s.resolved());
    for (int i = 0; i < 1000; ++i) {
        if (e->pending() == 0) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

/// What the fault hook does to the system calls it sees.
enum class fault_kind {
    eintr,      ///< the k-th transfer fails once with EINTR
    eagain,     ///< the k-th transfer fails once with EAGAIN
    short_io,   ///< the k-th transfer moves fewer bytes (a multiple of 4096 when it can)
    persistent, ///< the k-th call of any kind and every call after it fail with `error`
};

inline const char* to_string(fault_kind k) {
    switch (k) {
        case fault_kind::eintr: return "EINTR";
        case fault_kind::eagain: return "EAGAIN";
        case fault_kind::short_io: return "short count";
        case fault_kind::persistent: return "persistent";
    }
    return "?";
}

/// The plan the hook follows; one at a time per process.
struct fault_plan {
    static inline std::atomic<int> k{0};
    static inline std::atomic<int> seen{0};      ///< calls counted so far
    static inline std::atomic<int> injected{0};  ///< faults actually injected
    static inline std::atomic<int> error{EIO};
    static inline std::atomic<fault_kind> kind{fault_kind::eintr};
    static inline std::atomic<bool> whole_blocks{false};  ///< short counts stay 4096-aligned (O_DIRECT)
    static inline std::mutex hit_mutex;
    static inline std::set<std::string> hit;  ///< names of the calls that were failed or shortened

    /// The calls that move data and may legitimately be interrupted or come up short.
    static bool transfer(std::string_view call) {
        return call == "pread" || call == "pwrite" || call == "cuFileRead" || call == "cuFileWrite";
    }
    /// Calls behind the CUDA seam (cuda/cuda_runtime.hpp): runtime calls and kernel launches.
    static bool cuda_call(std::string_view call) {
        return call.substr(0, 4) == "cuda" || call == "kernel launch";
    }

    static void record(const char* call) {
        ++injected;
        std::lock_guard lock(hit_mutex);
        hit.insert(call);
    }
    static bool was_hit(std::string_view call) {
        std::lock_guard lock(hit_mutex);
        return hit.count(std::string(call)) != 0;
    }
    static bool any_hit(bool (*which)(std::string_view)) {
        std::lock_guard lock(hit_mutex);
        for (const auto& c : hit)
            if (which(c)) return true;
        return false;
    }

    static int hook(const char* call, std::size_t* length) {
        fault_kind how = kind.load();
        if (how != fault_kind::persistent && !transfer(call)) return 0;
        int n = ++seen;
        if (how == fault_kind::persistent) {
            if (n < k.load()) return 0;
            record(call);
            errno = error.load();
            return -1;
        }
        if (n != k.load()) return 0;
        switch (how) {
            case fault_kind::eintr: record(call); errno = EINTR; return -1;
            case fault_kind::eagain: record(call); errno = EAGAIN; return -1;
            default: break;
        }
        if (!length || *length < 2) return 0;
        std::size_t shorter = *length / 2;
        if (whole_blocks.load()) shorter = shorter / 4096 * 4096;
        if (shorter == 0) return 0;
        *length = shorter;
        record(call);
        return 0;
    }

    /// Arms the hook for one run; disarm() removes it.
    static void arm(fault_kind how, int at, int err = EIO) {
        kind = how;
        k = at;
        error = err;
        seen = 0;
        injected = 0;
        {
            std::lock_guard lock(hit_mutex);
            hit.clear();
        }
        sys::hook = &hook;
    }
    static void disarm() { sys::hook = nullptr; }
};

/// Disarms the hook when a test leaves its scope, however it leaves.
struct fault_guard {
    ~fault_guard() { fault_plan::disarm(); }
};

}  // namespace ferry::test
