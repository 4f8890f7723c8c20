// Integrity: CRC-32C checksums written with the data, checked on load, and `verify`.
//
// ferry.save, save_checkpoint and `ferry convert` record a CRC-32C of every 64 MiB chunk of every
// tensor, plus one of the header's tensor table and metadata, in the safetensors metadata
// ("ferry.checksums", compact JSON); the files stay plain safetensors that other readers load
// unchanged. Loads check what they read when checksums are present (verify_mode::automatic),
// on the GPU for GPU loads. Files written by other tools get a sidecar manifest from
// verify_path(..., record = true). docs/integrity.md.
#pragma once

#include "ferry/export.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/error.hpp"
#include "ferry/memory.hpp"

namespace ferry {

/// Whether a load checks the checksums a file carries.
enum class verify_mode : std::uint8_t {
    automatic,  ///< check where checksums are recorded; load files without them unchecked
    always,     ///< check, and refuse a file without checksums (integrity_error)
    never,      ///< do not check
};

/// "auto", "always" or "never"; throws usage_error on anything else.
FERRY_EXPORT verify_mode parse_verify_mode(const std::string& text);

/// Bytes that do not match their recorded checksum, a header that does not match its record,
/// or (verify_mode::always) a file without checksums. file() names the file (a URL redacted),
/// tensor() the tensor ("" for the header or a whole file), begin()/end() the absolute byte
/// range in the file that failed, expected()/actual() the two CRC-32C values ("crc32c:" and 8
/// hex digits; "" when there is none to compare). No tensor of a failed load is returned.
class FERRY_EXPORT integrity_error : public error {
public:
    integrity_error(std::string file, std::string tensor, std::string reason, std::uint64_t begin = 0,
                    std::uint64_t end = 0, std::string expected = {}, std::string actual = {});
    const std::string& file() const noexcept { return file_; }
    const std::string& tensor() const noexcept { return tensor_; }
    const std::string& reason() const noexcept { return reason_; }
    std::uint64_t begin() const noexcept { return begin_; }
    std::uint64_t end() const noexcept { return end_; }
    const std::string& expected() const noexcept { return expected_; }
    const std::string& actual() const noexcept { return actual_; }

private:
    std::string file_, tensor_, reason_;
    std::uint64_t begin_ = 0, end_ = 0;
    std::string expected_, actual_;
};

/// One region that failed verification.
struct FERRY_EXPORT verify_mismatch {
    std::string file;    ///< redacted
    std::string tensor;  ///< "" for a header or a whole-file chunk
    std::uint64_t begin = 0, end = 0;  ///< absolute byte range
    std::string expected, actual;      ///< "crc32c:xxxxxxxx", or "" with reason saying why
    std::string reason;
};

/// What verify_path found.
struct FERRY_EXPORT verify_report {
    std::vector<std::string> files;          ///< files checked (redacted)
    std::vector<std::string> unverifiable;   ///< files with no checksums and no sidecar
    std::vector<std::string> recorded;       ///< sidecars written (record = true)
    std::vector<verify_mismatch> mismatches;
    std::uint64_t bytes = 0;                 ///< bytes hashed
    std::size_t tensors = 0;                 ///< tensors whose chunks were checked
    double seconds = 0;
    /// 0: every checked byte matched and something was checked; 1: mismatches; 2: nothing
    /// verifiable (the exit status of `ferry verify`).
    int status() const noexcept;
};

/// Checks `path`: a safetensors file, an .npy or raw file with a sidecar, a checkpoint folder
/// or index (every shard). Embedded checksums are checked tensor by tensor, sidecars chunk by
/// chunk over the whole file. With `record`, files that have neither get a sidecar
/// (`FILE.ferry-checksums.json`, written atomically) of their chunk CRCs as they are now, and
/// are reported in `recorded`. Reads on `threads` threads (0: one per core). Throws what
/// opening the files throws (system_error, format_error, checkpoint_error).
FERRY_EXPORT verify_report verify_path(const std::string& path, bool record = false, unsigned threads = 0);

/// Bytes in memory to hash: host memory, or GPU memory of `where`'s device.
struct FERRY_EXPORT crc_input {
    const void* data = nullptr;
    std::uint64_t bytes = 0;
    placement where = placement::host();
};

/// The CRC-32C of each `chunk`-byte piece of each input, from its first byte (the last piece
/// may be shorter; an empty input has none), computed where the bytes are: host inputs on up
/// to one thread per core, GPU inputs by one kernel launch per device, queued on `s` after the
/// work already there. The values are the ones records hold (docs/integrity.md). Throws
/// usage_error for a chunk of 0 bytes, cuda_error when a launch fails.
FERRY_EXPORT std::vector<std::vector<std::uint32_t>> crc32c_chunks(const std::vector<crc_input>& inputs,
                                                                   std::uint64_t chunk, stream_t s = nullptr);

/// verify_report as JSON (files, unverifiable, recorded, mismatches, bytes, seconds, status).
FERRY_EXPORT std::string to_json(const verify_report& r);

}  // namespace ferry
