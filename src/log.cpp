#include "log.hpp"

#include <cstdio>
#include <mutex>

namespace ferry::detail {

void log(log_level level, const settings& s, const std::string& message) {
    if (!log_enabled(level, s)) return;
    static std::mutex m;
    std::lock_guard lock(m);
    std::fprintf(stderr, "ferry %s: %s\n", std::string(to_string(level)).c_str(), message.c_str());
}

}  // namespace ferry::detail
