// The checksum record ferry writes into a safetensors file's __metadata__ ("ferry.checksums"):
// a CRC-32C per 64 MiB chunk of every tensor and one of the header's tensor table and other
// metadata, as compact JSON; computing chunk CRCs where the bytes are (host threads, or one GPU
// launch); and checking loaded bytes against a record. docs/integrity.md gives the format.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/checksum_kernels.hpp"
#include "ferry/array.hpp"
#include "ferry/integrity.hpp"
#include "ferry/safetensors.hpp"
#include "formats/safetensors_header.hpp"

namespace ferry::formats {

inline constexpr std::string_view checksum_key = "ferry.checksums";
/// Chunks small enough that a mismatch names a useful region and that the chunks of one large
/// tensor are checked in parallel, large enough that a 4 GiB checkpoint records ~64 values.
inline constexpr std::uint64_t checksum_chunk = 64ull << 20;

struct checksum_record {
    std::uint64_t chunk = checksum_chunk;
    std::uint32_t header = 0;  ///< header_digest of the file as written
    std::map<std::string, std::vector<std::uint32_t>, std::less<>> tensors;  ///< per chunk
};

/// Compact JSON: {"v":1,"alg":"crc32c","chunk":C,"header":"8 hex","tensors":{"name":"8 hex per chunk"}}.
std::string to_json(const checksum_record& r);
/// Parses a record; throws format_error naming `file`, the field and the reason.
checksum_record parse_checksum_record(std::string_view text, const std::string& file);

/// The CRC-32C of the tensor table (name, dtype, shape, offsets, sorted by name) and of the
/// metadata other than the record itself: a bit flip in the header that still parses (a dtype
/// of the same size, say) changes it.
std::uint32_t header_digest(const std::vector<safetensors_tensor_info>& tensors,
                            const std::map<std::string, std::string>& metadata);

/// Bytes in memory to hash, host or device (`where`).
struct byte_view {
    const void* data = nullptr;
    std::uint64_t bytes = 0;
    placement where = placement::host();
};

/// The CRC-32C of each chunk of each view (chunks of `chunk` bytes from the view's start):
/// host views on up to one thread per core, device views by one kernel launch per device.
std::vector<std::vector<std::uint32_t>> chunk_crcs(const std::vector<byte_view>& views, std::uint64_t chunk,
                                                   stream_t s = nullptr);

/// chunk_crcs in two steps: the constructor queues the device views' kernels (one per device,
/// on `s`) and returns, so the caller reads on while they run; wait() hashes the host views
/// and returns what chunk_crcs would. The views must stay valid until then.
class queued_chunk_crcs {
public:
    queued_chunk_crcs(const std::vector<byte_view>& views, std::uint64_t chunk, stream_t s);
    std::vector<std::vector<std::uint32_t>> wait();

private:
    std::vector<std::vector<std::uint32_t>> out_;
    std::vector<std::pair<const void*, std::uint64_t>> host_;
    std::vector<std::pair<std::size_t, std::size_t>> host_at_;  // (view, chunk)
    std::vector<std::vector<std::pair<std::size_t, std::size_t>>> device_at_;
    std::vector<kernels::crc_pass> passes_;  // one per device, in device_at_'s order
};

/// CRC-32C of each {data, bytes} host span on up to `threads` threads (0: one per core).
std::vector<std::uint32_t> host_crcs(const std::vector<std::pair<const void*, std::uint64_t>>& spans,
                                     unsigned threads = 0);

/// The record of `info`, when its metadata has one (format_error when it does not parse).
std::optional<checksum_record> find_record(const safetensors_info& info, const std::string& file);

/// A loaded tensor to check: its header entry and where its bytes (as read) are.
struct loaded_view {
    const safetensors_tensor_info* tensor = nullptr;
    byte_view bytes;
};

/// Checks loaded tensors against the file's record under `mode`: the header digest, then every
/// chunk of every view. Throws integrity_error for the first mismatch (the message counts the
/// others), or under verify_mode::always for a file without a record. `file` is shown (redacted).
void verify_loaded(const safetensors_info& info, const std::string& file, const std::vector<loaded_view>& views,
                   verify_mode mode, stream_t s);

/// The record of a file about to be written, `entries` at `offsets` in the data buffer with
/// `metadata`: the header digest set, every chunk's CRC still 0. Its JSON already has its final
/// length (8 hex digits a chunk), so the header's size and the data's offsets are fixed before
/// the data is hashed, and a writer can write the data first and hash it while the disk writes.
checksum_record blank_checksum_record(const std::vector<safetensors_entry>& entries,
                                      const std::vector<std::uint64_t>& offsets,
                                      const std::map<std::string, std::string>& metadata);
/// Fills the chunk CRCs of `r` (from blank_checksum_record over the same entries) from the
/// tensors' bytes: data[i] holds entries[i] (C order, little-endian, host or device).
void fill_checksum_record(checksum_record& r, const std::vector<safetensors_entry>& entries,
                          const std::vector<array>& data);

/// "crc32c:" and 8 hex digits.
std::string crc_text(std::uint32_t crc);

}  // namespace ferry::formats
