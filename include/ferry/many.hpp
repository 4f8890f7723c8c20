// Many small files in one call: ferry::load_many reads a list of .npy, safetensors or raw files
// with several files in flight at once, and says which ones failed and why.
#pragma once

#include "ferry/export.hpp"

#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/formats.hpp"

namespace ferry {

/// What a failure in the list does.
enum class on_file_failure {
    raise,  ///< load_many throws file_in_list_error for the first failing file (by index); nothing is returned
    skip,   ///< the other files are returned, the failures listed
};

struct FERRY_EXPORT load_many_options {
    /// How every file is loaded (as load_any); raw_type and shape apply to the raw files of the
    /// list only (a .npy or safetensors header gives its own), unless `format` forces one format.
    any_load_options each;
    unsigned files_in_flight = 0;                   ///< 0: 16, or fewer for a short list
    on_file_failure failures = on_file_failure::raise;
};

/// One file of the list that did not load.
struct FERRY_EXPORT file_failure {
    std::size_t index = 0;     ///< its place in the list
    std::string path;          ///< as given (a URL redacted)
    std::string message;       ///< what load_any said, prefixed with the index and the file
    std::exception_ptr error;  ///< what load_any threw
};

/// The files of a list, in its order: a file that failed is empty (failures say why).
struct FERRY_EXPORT many_files {
    std::vector<std::optional<loaded_file>> files;
    std::vector<file_failure> failures;  ///< by index
    std::uint64_t payload_bytes = 0;     ///< of the files that loaded
};

/// A file of a list failed to load: the message names its index and the file; `cause()` is
/// what the file's own load threw (a format_error, system_error, ...).
class FERRY_EXPORT file_in_list_error : public error {
public:
    file_in_list_error(const file_failure& f);
    std::size_t index() const noexcept { return index_; }
    const std::string& path() const noexcept { return path_; }
    std::exception_ptr cause() const noexcept { return cause_; }

private:
    std::size_t index_;
    std::string path_;
    std::exception_ptr cause_;
};

/// Loads every file of `paths` as load_any(path, options.each) would, up to
/// options.files_in_flight at once (each file still one load with its own plan), into the
/// placement options.each.load names. With on_file_failure::raise the first failing file (by
/// index) is thrown once the files in flight have stopped; files not yet started are not read.
/// A stop_scope around the call stops every file in flight.
FERRY_EXPORT many_files load_many(const std::vector<std::string>& paths, const load_many_options& options = {});

}  // namespace ferry
