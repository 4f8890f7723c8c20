#include "cli_util.hpp"

#include <cstdio>

#include "ferry/settings.hpp"

namespace ferry::cli {

std::string human_bytes(std::uint64_t n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(n);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
    else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
    return buf;
}

std::string rate_text(std::uint64_t bytes, double seconds) {
    const double rate = seconds > 0 ? bytes / seconds : 0.0;
    char buf[32];
    if (rate >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB/s", rate / 1e9);
    else if (rate >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB/s", rate / 1e6);
    else if (rate >= 1e3) std::snprintf(buf, sizeof buf, "%.2f kB/s", rate / 1e3);
    else std::snprintf(buf, sizeof buf, "%.0f B/s", rate);
    return buf;
}

const CLI::Validator non_negative(
    [](std::string& text) -> std::string {
        std::size_t i = text.find_first_not_of(" \t");
        if (i != std::string::npos && text[i] == '-') return "must be >= 0, not " + text;
        return {};
    },
    "NONNEGATIVE");

std::uint64_t parse_bytes(const std::string& text, const std::string& what) {
    return ferry::parse_size(what, text);
}

nlohmann::json io_json(const io_stats& s) {
    nlohmann::json j = nlohmann::json::object();
    for (int i = 0; i < io_path_count; ++i) {
        std::uint64_t b = s.read[i].bytes + s.write[i].bytes;
        if (b) j[std::string(to_string(static_cast<io_path>(i)))] = b;
    }
    if (!s.fallbacks.empty()) {
        nlohmann::json f = nlohmann::json::object();
        for (const auto& [reason, n] : s.fallbacks) f[reason] = n;
        j["fallbacks"] = f;
    }
    // The same bytes by source and mover: {"posix lanes": bytes, ...}.
    nlohmann::json routes = nlohmann::json::object();
    for (const auto& r : s.routes)
        if (r.read.bytes + r.write.bytes) routes[r.source + " " + r.mover] = r.read.bytes + r.write.bytes;
    if (!routes.empty()) j["routes"] = routes;
    return j;
}

std::string io_text(const io_stats& s) {
    std::string out;
    for (int i = 0; i < io_path_count; ++i) {
        std::uint64_t b = s.read[i].bytes + s.write[i].bytes;
        if (!b) continue;
        if (!out.empty()) out += ", ";
        out += std::string(to_string(static_cast<io_path>(i))) + " " + human_bytes(b);
    }
    return out.empty() ? "none" : out;
}

}  // namespace ferry::cli
