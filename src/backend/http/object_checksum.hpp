// An object's own checksum, as S3 (and servers that speak its API) reports it when asked with
// "x-amz-checksum-mode: ENABLED": x-amz-checksum-crc32c or x-amz-checksum-crc32, base64 of the
// big-endian value. Only a full-object checksum can be compared with the bytes read: a
// multipart upload's composite checksum (a checksum of the parts' checksums, "-N" after the
// value, or x-amz-checksum-type COMPOSITE) cannot, and is reported as not checked.
//
// checksum_tally checks the reads of one source against it: each read's CRC is kept by its
// offset, and once the reads tile the whole object the CRCs are combined in order and compared,
// once. Reads that overlap or leave gaps leave the object unchecked (a load that skips bytes, a
// header read twice); what the reads of a whole-object fromfile, a checkpoint shard or `ferry
// verify` cover tiles it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace ferry::detail {

struct object_checksum {
    std::string alg;         ///< "crc32c" or "crc32"
    std::uint32_t value = 0;
};

/// The full-object checksum the response headers (lower-case names) carry, or nullopt with
/// `why_not` saying why none is usable ("" when the object has none). `etag` tells a multipart
/// upload ("...-N") where the server does not send x-amz-checksum-type.
std::optional<object_checksum> parse_object_checksum(const std::map<std::string, std::string>& headers,
                                                     const std::string& etag, std::string& why_not);

class checksum_tally {
public:
    checksum_tally(object_checksum c, std::uint64_t size, std::string location);
    /// The algorithm's CRC of `n` bytes continuing `crc` (0 to start).
    std::uint32_t hash(const void* data, std::size_t n, std::uint32_t crc = 0) const;
    /// Bytes [offset, offset + n) were read and hash to `crc`. Throws integrity_error (naming
    /// the object, the whole range and both values) when these reads complete a tiling of the
    /// object and the combined CRC is not the object's.
    void add(std::uint64_t offset, std::uint64_t n, std::uint32_t crc);
    const object_checksum& checksum() const noexcept { return c_; }

private:
    std::uint32_t combine(std::uint32_t a, std::uint32_t b, std::uint64_t len_b) const;

    object_checksum c_;
    std::uint64_t size_;
    std::string location_;
    std::mutex m_;
    std::map<std::uint64_t, std::pair<std::uint64_t, std::uint32_t>> reads_;  ///< offset -> (n, crc)
    bool checked_ = false;
};

}  // namespace ferry::detail
