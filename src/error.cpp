// The one place ferry's exceptions get their messages.
#include "ferry/error.hpp"

#include <cstring>
#include <string>

#include "escape_text.hpp"

namespace ferry {
namespace {

std::string describe(const io_context& w) {
    if (w.path.empty()) return {};
    std::string s = " (" + w.path;
    if (w.length != 0 || w.offset != 0)
        s += ", bytes [" + std::to_string(w.offset) + ", " + std::to_string(w.offset + w.length) + ")";
    return s + ")";
}

}  // namespace

settings_error::settings_error(std::string variable, std::string value, std::string reason)
    : usage_error(variable + "=\"" + detail::escape_text(value, 200) + "\": " + reason), variable_(std::move(variable)) {}

system_error::system_error(int code, std::string what_failed, io_context where)
    : error(what_failed + ": " + std::strerror(code) + describe(where)),
      code_(code),
      where_(std::move(where)) {}

end_of_file_error::end_of_file_error(io_context where, std::uint64_t file_size)
    : error("unexpected end of file: " + where.path + " has " + std::to_string(file_size) +
            " bytes, the request needs [" + std::to_string(where.offset) + ", " +
            std::to_string(where.offset + where.length) + ")"),
      where_(std::move(where)),
      file_size_(file_size) {}

cuda_error::cuda_error(int code, std::string what_failed, io_context where)
    : error(what_failed + " (CUDA error " + std::to_string(code) + ")" + describe(where)),
      code_(code),
      where_(std::move(where)) {}

cufile_error::cufile_error(int code, std::string what_failed, io_context where)
    : error(what_failed + " (cuFile error " + std::to_string(code) + ")" + describe(where)),
      code_(code),
      where_(std::move(where)) {}

// Fields and reasons quote the file's own bytes (keys, dtype strings, the JSON parser's
// excerpt), and paths are whatever bytes name the file: escaped, the message stays printable UTF-8.
format_error::format_error(std::string file, std::string field, std::string reason)
    : error(detail::escape_text(file) + ": " + detail::escape_text(field) + ": " + detail::escape_text(reason)),
      file_(std::move(file)),
      field_(detail::escape_text(field)),
      reason_(detail::escape_text(reason)) {}

namespace {

std::string describe_remote(int status, const std::string& url, const std::string& what_failed,
                            const std::string& credentials, const io_context& w) {
    std::string s = what_failed + ": " + url;
    if (w.length != 0 || w.offset != 0)
        s += ", bytes [" + std::to_string(w.offset) + ", " + std::to_string(w.offset + w.length) + ")";
    s += status ? " (HTTP " + std::to_string(status) + ")" : " (no HTTP response)";
    if (!credentials.empty()) s += " [credentials: " + credentials + "]";
    return s;
}

}  // namespace

remote_error::remote_error(int status, std::string url, std::string what_failed, std::string credentials,
                           io_context where)
    : error(describe_remote(status, url, what_failed, credentials, where)),
      status_(status),
      url_(std::move(url)),
      credentials_(std::move(credentials)),
      where_(std::move(where)) {
    if (where_.path.empty()) where_.path = url_;
}

}  // namespace ferry
