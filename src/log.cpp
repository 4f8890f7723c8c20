#include "log.hpp"

#include <cstdio>
#include <mutex>

#include "os/fork_safe_mutex.hpp"

namespace ferry::detail {
namespace {
fork_safe_mutex log_mutex;
}  // namespace

void log(log_level level, const settings& s, const std::string& message) {
    if (!log_enabled(level, s)) return;
    std::lock_guard lock(log_mutex);
    std::fprintf(stderr, "ferry %s: %s\n", std::string(to_string(level)).c_str(), message.c_str());
}

}  // namespace ferry::detail
