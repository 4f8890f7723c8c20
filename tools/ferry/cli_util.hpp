// Small helpers shared by the subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "ferry/stats.hpp"

namespace ferry::cli {

/// "12.3 GB/s" style rate of bytes over seconds (decimal GB, as disks and PCIe are quoted).
inline double gbps(std::uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }

/// --device's help: every word parse_placement takes, the aliases included.
inline constexpr const char* device_help =
    "cuda:N, cuda (or gpu: cuda:0) or host (or cpu) (default: cuda:0 when there is a GPU)";

/// "12.34 GB/s", "3.20 MB/s", "512.00 kB/s", "12 B/s": a rate in a unit that keeps its digits
/// (a slow disk or link in GB/s would print as 0.00).
std::string rate_text(std::uint64_t bytes, double seconds);

/// A check that a number is not negative, saying so in words (CLI11's NonNegativeNumber names
/// its range's end, the largest double, in 310 digits).
extern const CLI::Validator non_negative;

/// "1.50 GiB", "12.0 MiB", "512 B".
std::string human_bytes(std::uint64_t n);

/// Parses "8G", "512M", "4096" (binary units). Throws usage_error naming `what`.
std::uint64_t parse_bytes(const std::string& text, const std::string& what);

/// {"staged": bytes, ...} of the paths that moved bytes (reads and writes added).
nlohmann::json io_json(const io_stats& s);
/// "staged 8.00 GiB, host 1.00 MiB" or "none".
std::string io_text(const io_stats& s);

}  // namespace ferry::cli
