// Exceptions thrown at ferry's public API.
//
// Every failure ferry reports is one of these types; all derive from ferry::error, which derives
// from std::runtime_error. Inside the library, system, CUDA and cuFile calls return raw codes and
// one boundary (src/error.cpp) turns them into these exceptions.
#pragma once

#include "ferry/export.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ferry {

/// Base of every exception ferry throws.
class FERRY_EXPORT error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A misuse of the API: bad argument, wrong mode, closed file, unknown setting value.
class FERRY_EXPORT usage_error : public error {
public:
    using error::error;
};

/// A settings value that does not parse; names the variable (e.g. FERRY_THREADS).
class FERRY_EXPORT settings_error : public usage_error {
public:
    settings_error(std::string variable, std::string value, std::string reason);
    const std::string& variable() const noexcept { return variable_; }

private:
    std::string variable_;
};

/// Where an I/O failure happened: the path and the byte range of the request, when known.
struct FERRY_EXPORT io_context {
    std::string path;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
};

/// A system call failed; carries errno.
class FERRY_EXPORT system_error : public error {
public:
    system_error(int code, std::string what_failed, io_context where = {});
    int code() const noexcept { return code_; }
    const io_context& where() const noexcept { return where_; }

private:
    int code_;
    io_context where_;
};

/// A file ended before the requested range did (reads are never silently short).
class FERRY_EXPORT end_of_file_error : public error {
public:
    end_of_file_error(io_context where, std::uint64_t file_size);
    const io_context& where() const noexcept { return where_; }
    std::uint64_t file_size() const noexcept { return file_size_; }

private:
    io_context where_;
    std::uint64_t file_size_;
};

/// A CUDA runtime call failed; carries the cudaError_t value.
class FERRY_EXPORT cuda_error : public error {
public:
    cuda_error(int code, std::string what_failed, io_context where = {});
    int code() const noexcept { return code_; }
    const io_context& where() const noexcept { return where_; }

private:
    int code_;
    io_context where_;
};

/// A cuFile call failed; carries the cuFile status code (CU_FILE_*), never a generic failure.
class FERRY_EXPORT cufile_error : public error {
public:
    cufile_error(int code, std::string what_failed, io_context where = {});
    int code() const noexcept { return code_; }
    const io_context& where() const noexcept { return where_; }

private:
    int code_;
    io_context where_;
};

/// Invalid file content: names the file, the field and the reason.
class FERRY_EXPORT format_error : public error {
public:
    format_error(std::string file, std::string field, std::string reason);
    const std::string& file() const noexcept { return file_; }
    const std::string& field() const noexcept { return field_; }
    const std::string& reason() const noexcept { return reason_; }

private:
    std::string file_;
    std::string field_;
    std::string reason_;
};

/// A call stopped before its end because a stop_source under which it ran asked it to (Ctrl-C in
/// Python or the CLI). Whatever it was writing is not left behind; a read's destination holds
/// unspecified bytes.
class FERRY_EXPORT interrupted_error : public error {
public:
    using error::error;
};

/// A remote object (http://, https://, s3://) could not be read or written: the HTTP status (0
/// when no response came: refused connection, timeout, TLS failure), the URL with any
/// credentials redacted, and which credentials were used ("none", "environment", "profile dev",
/// "instance metadata (IMDSv2)"...), never a secret.
class FERRY_EXPORT remote_error : public error {
public:
    remote_error(int status, std::string url, std::string what_failed, std::string credentials = {},
                 io_context where = {});
    int status() const noexcept { return status_; }
    const std::string& url() const noexcept { return url_; }
    const std::string& credentials() const noexcept { return credentials_; }
    const io_context& where() const noexcept { return where_; }

private:
    int status_;
    std::string url_;
    std::string credentials_;
    io_context where_;
};

}  // namespace ferry
