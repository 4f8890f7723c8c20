// integrity_error and parse_verify_mode: the public face of the checksum checks.
#include <utility>

#include "ferry/integrity.hpp"

namespace ferry {
namespace {

std::string message(const std::string& file, const std::string& tensor, const std::string& reason,
                    std::uint64_t begin, std::uint64_t end, const std::string& expected,
                    const std::string& actual) {
    std::string m = file + ": ";
    if (!tensor.empty()) m += "tensor '" + tensor + "': ";
    if (end > begin) m += "bytes [" + std::to_string(begin) + ", " + std::to_string(end) + "): ";
    m += reason;
    if (!expected.empty()) m += " (recorded " + expected + ", read " + actual + ")";
    return m;
}

}  // namespace

integrity_error::integrity_error(std::string file, std::string tensor, std::string reason, std::uint64_t begin,
                                 std::uint64_t end, std::string expected, std::string actual)
    : error(message(file, tensor, reason, begin, end, expected, actual)), file_(std::move(file)),
      tensor_(std::move(tensor)), reason_(std::move(reason)), begin_(begin), end_(end),
      expected_(std::move(expected)), actual_(std::move(actual)) {}

verify_mode parse_verify_mode(const std::string& text) {
    if (text == "auto") return verify_mode::automatic;
    if (text == "always") return verify_mode::always;
    if (text == "never") return verify_mode::never;
    throw usage_error("verify must be \"auto\", \"always\" or \"never\", not \"" + text + "\"");
}

int verify_report::status() const noexcept {
    if (!mismatches.empty()) return 1;
    return files.empty() ? 2 : 0;
}

}  // namespace ferry
