// Many small files in one call: ferry::load_many reads a list of .npy, safetensors or raw files
// with several files in flight at once, and says which ones failed and why.
#pragma once

#include "ferry/export.hpp"

#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/formats.hpp"
#include "ferry/memory.hpp"

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

/// One array of a file read whole by read_whole_files: where its elements lie in the file's
/// block and how they are laid out there (as the header says: byte order and layout unchanged).
struct FERRY_EXPORT whole_file_array {
    std::string name;                       ///< "" for a .npy or raw file; the tensor's name
    typed_order type;
    storage_order layout = storage_order::c;
    std::vector<std::int64_t> shape;
    std::uint64_t offset = 0;               ///< of the first element, in the block
    std::uint64_t nbytes = 0;
};

/// What read_whole_files found in one file of the list.
struct FERRY_EXPORT whole_file {
    file_format format = file_format::raw;
    std::size_t block = 0;                  ///< which block holds its bytes
    std::uint64_t offset = 0;               ///< where its first byte lies in that block
    std::uint64_t size = 0;
    std::vector<whole_file_array> arrays;   ///< .npy and raw: one; safetensors: by name
    /// A file this path does not check: a safetensors file with recorded checksums, a file
    /// with a sidecar manifest (FILE.ferry-checksums.json); the single-file loads verify them.
    /// Its bytes are in the block all the same.
    bool needs_load = false;
    std::exception_ptr error;               ///< set when the file could not be read or parsed
};

struct FERRY_EXPORT whole_files_options {
    std::optional<dtype> raw_type;          ///< element type of the raw files (none: they fail)
    std::optional<std::vector<std::int64_t>> raw_shape;  ///< else as many items as a raw file holds
    unsigned threads = 0;                   ///< 0: 16, fewer for a short list
    std::uint64_t block_bytes = 3ull << 20; ///< a block holds files up to this size together
    /// Memory for a block of at least `bytes` (uint8, host or pinned); host memory by default.
    /// Called from the reading threads, one at a time.
    std::function<array(std::uint64_t bytes)> allocate;
    /// Called on the reading thread, one call at a time, once block `b` holds every file the
    /// thread placed in it (`files`: their indices, failed ones left out), before the thread reads more.
    /// `all` is the call's list of files (whole_files::files): the entries of `files` are complete
    /// (parsed, their arrays described) and may be read; others may still be filling on other threads.
    std::function<void(std::size_t b, const std::vector<std::size_t>& files, const std::vector<whole_file>& all)>
        on_block;
    bool stop_at_failure = true;            ///< no new file is started once one failed
};

/// The blocks and what each file of the list holds.
struct FERRY_EXPORT whole_files {
    std::vector<array> blocks;
    std::vector<whole_file> files;          ///< in the order of the list
    /// read_whole_files_to_device: the pinned blocks the call made, and those it took again
    /// once their earlier copy was done (from this call or an earlier one).
    std::uint64_t pinned_made = 0;
    std::uint64_t pinned_reused = 0;
};

/// Reads each file of `paths` whole (one open, fstat, pread and close each; no plan, no
/// engine) into blocks of a few MiB shared by neighbouring files, on a pool of threads, and
/// parses its header (.npy, safetensors, or raw by content) from those bytes, validated as
/// load_any validates them. The path for many small files, where per-file costs decide. Errors
/// stay with their file (whole_file::error); nothing is deserialized: the arrays are described
/// where they lie. A stop_scope around the call stops it (interrupted_error).
FERRY_EXPORT whole_files read_whole_files(const std::vector<std::string>& paths,
                                          const whole_files_options& options = {});

/// Where read_whole_files_to_device puts the files' bytes.
struct FERRY_EXPORT whole_files_device_options {
    int device = 0;
    /// The stream the copies, byte swaps and transposes run on; none: one of ferry's own.
    std::optional<stream_t> stream;
    /// Device memory (uint8, on `device`, usable on `stream`) of at least `bytes` for the files,
    /// from the caller's pool; memory of ferry's own (cudaMalloc) where empty. Called from the
    /// reading threads, one call at a time, once per arena_bytes of files (or a larger block).
    std::function<array(std::uint64_t bytes)> allocate;
    std::uint64_t arena_bytes = 64ull << 20;
    /// Called on a reading thread, one call at a time, once the files of a block (`files`, as
    /// whole_files_options::on_block gives them) have their places in GPU memory: `block` is
    /// that memory, their arrays' offsets count from its start, and each is described native
    /// and C-ordered. Their bytes may still be in flight on `stream` until the call returns.
    std::function<void(const array& block, const std::vector<std::size_t>& files, const std::vector<whole_file>& all)>
        on_block;
};

/// read_whole_files into GPU memory. Each block is read into pinned memory (blocks kept from
/// call to call, taken again once their copy is done) and copied to its place in device memory
/// as soon as it is complete, on its reading thread, while later blocks are read; there its
/// big-endian arrays are swapped and its Fortran-ordered ones transposed in place, so that
/// every array comes back native and C-ordered. Returns once every byte is in place (the
/// stream synchronized): whole_files::blocks are then the device places of the blocks.
/// options.allocate and options.on_block are not used (device's serve). Throws cuda_error
/// where there is no GPU; a block whose copy failed fails its files.
FERRY_EXPORT whole_files read_whole_files_to_device(const std::vector<std::string>& paths,
                                                    const whole_files_options& options,
                                                    const whole_files_device_options& device);

}  // namespace ferry
