// Small, failure-tolerant readers for /proc, /sys and configuration files, shared by the doctor's
// probes. None of them throws for a missing or odd file: the doctor reports what it finds.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::doctor {

/// Key order follows insertion, so reports read top-down in a stable order.
using json = nlohmann::ordered_json;

/// The contents of a regular (or /proc, /sys) file, at most `limit` bytes; nullopt when it does
/// not exist, is not a regular file (a FIFO would block) or cannot be read. `error` gets why.
std::optional<std::string> read_text(const std::string& path, std::size_t limit = 1 << 20,
                                     std::string* error = nullptr);

/// The first line of read_text, trimmed.
std::optional<std::string> read_line(const std::string& path);

/// read_line parsed as a signed integer (decimal, or hex with 0x).
std::optional<std::int64_t> read_integer(const std::string& path);

bool path_exists(const std::string& path);

std::string trim(std::string_view s);
std::vector<std::string> split(std::string_view s, char sep);

/// "EINVAL: Invalid argument".
std::string errno_text(int code);

/// "8.0 GiB", "512 B".
std::string human_bytes(std::uint64_t bytes);

/// CUDA-style version code (13000, 1150) to "13.0" / "1.15"; nullopt for 0.
json version_string(int code);

/// Sorted entries of a directory matching a name prefix ("" for all), without "." and "..".
std::vector<std::string> list_directory(const std::string& dir, std::string_view prefix = "");

}  // namespace ferry::doctor
