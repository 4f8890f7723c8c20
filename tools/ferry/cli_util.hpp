// Small helpers shared by the subcommands.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "ferry/stats.hpp"

namespace ferry::cli {

/// "12.3 GB/s" style rate of bytes over seconds (decimal GB, as disks and PCIe are quoted).
inline double gbps(std::uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }

/// "1.50 GiB", "12.0 MiB", "512 B".
std::string human_bytes(std::uint64_t n);

/// Parses "8G", "512M", "4096" (binary units). Throws usage_error naming `what`.
std::uint64_t parse_bytes(const std::string& text, const std::string& what);

/// {"staged": bytes, ...} of the paths that moved bytes (reads and writes added).
nlohmann::json io_json(const io_stats& s);
/// "staged 8.00 GiB, host 1.00 MiB" or "none".
std::string io_text(const io_stats& s);

}  // namespace ferry::cli
