// S3 full-object checksums: parsing the response headers and checking a source's reads.
#include "backend/http/object_checksum.hpp"

#include <array>

#include "ferry/integrity.hpp"
#include "integrity/crc32c.hpp"
#ifdef FERRY_HAVE_ZLIB
#include <zlib.h>
#endif

namespace ferry::detail {
namespace {

// Base64 of exactly four bytes ("AAAAAA=="), big-endian, as S3 sends a CRC.
std::optional<std::uint32_t> decode_crc(const std::string& text) {
    if (text.size() != 8 || text.compare(6, 2, "==") != 0) return std::nullopt;
    auto digit = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    std::uint64_t bits = 0;
    for (int i = 0; i < 6; ++i) {
        int d = digit(text[static_cast<std::size_t>(i)]);
        if (d < 0) return std::nullopt;
        bits = (bits << 6) | static_cast<std::uint64_t>(d);
    }
    return static_cast<std::uint32_t>(bits >> 4);  // 36 bits: 32 of value, 4 of padding
}

std::string hex(const std::string& alg, std::uint32_t v) {
    char h[8];
    integrity::crc32c_hex(v, h);
    return alg + ":" + std::string(h, 8);
}

}  // namespace

std::optional<object_checksum> parse_object_checksum(const std::map<std::string, std::string>& headers,
                                                     const std::string& etag, std::string& why_not) {
    why_not.clear();
    auto get = [&](const std::string& name) {
        auto it = headers.find(name);
        return it == headers.end() ? std::string() : it->second;
    };
    for (const char* alg : {"crc32c", "crc32"}) {
        std::string value = get(std::string("x-amz-checksum-") + alg);
        if (value.empty()) continue;
        std::string type = get("x-amz-checksum-type");
        const bool multipart = etag.find('-') != std::string::npos;
        if (type == "COMPOSITE" || value.find('-') != std::string::npos || (type.empty() && multipart)) {
            why_not = std::string("its x-amz-checksum-") + alg +
                      " is a multipart upload's checksum of its parts' checksums, which the bytes alone do not give";
            return std::nullopt;
        }
#ifndef FERRY_HAVE_ZLIB
        if (std::string(alg) == "crc32") {
            why_not = "its x-amz-checksum-crc32 needs zlib, which this build of ferry lacks";
            return std::nullopt;
        }
#endif
        auto v = decode_crc(value);
        if (!v) {
            why_not = std::string("its x-amz-checksum-") + alg + " (" + value.substr(0, 16) + ") is not base64 of 4 bytes";
            return std::nullopt;
        }
        return object_checksum{alg, *v};
    }
    for (const char* other : {"sha256", "sha1", "crc64nvme"})
        if (!get(std::string("x-amz-checksum-") + other).empty()) {
            why_not = std::string("its checksum is x-amz-checksum-") + other + ", which ferry does not compute";
            return std::nullopt;
        }
    return std::nullopt;
}

checksum_tally::checksum_tally(object_checksum c, std::uint64_t size, std::string location)
    : c_(std::move(c)), size_(size), location_(std::move(location)) {}

std::uint32_t checksum_tally::hash(const void* data, std::size_t n, std::uint32_t crc) const {
    if (c_.alg == "crc32c") return integrity::crc32c(data, n, crc);
#ifdef FERRY_HAVE_ZLIB
    return static_cast<std::uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
#else
    return crc;
#endif
}

std::uint32_t checksum_tally::combine(std::uint32_t a, std::uint32_t b, std::uint64_t len_b) const {
    if (c_.alg == "crc32c") return integrity::crc32c_combine(a, b, len_b);
#ifdef FERRY_HAVE_ZLIB
    return static_cast<std::uint32_t>(crc32_combine64(a, b, static_cast<z_off64_t>(len_b)));
#else
    return a ^ b;
#endif
}

void checksum_tally::add(std::uint64_t offset, std::uint64_t n, std::uint32_t crc) {
    std::uint32_t got = 0;
    {
        std::lock_guard lock(m_);
        if (checked_ || n == 0) return;
        reads_.try_emplace(offset, n, crc);  // the same range read again hashes the same
        std::uint64_t at = 0;
        for (auto it = reads_.find(0); it != reads_.end(); it = reads_.find(at)) {
            got = at == 0 ? it->second.second : combine(got, it->second.second, it->second.first);
            at += it->second.first;
            if (at == size_) break;
        }
        if (at != size_) return;
        checked_ = true;
        reads_.clear();
    }
    if (got != c_.value)
        throw integrity_error(location_, "",
                              "the bytes read do not match the object's x-amz-checksum-" + c_.alg +
                                  " (the object is corrupt, or changed without a new ETag)",
                              0, size_, hex(c_.alg, c_.value), hex(c_.alg, got));
}

}  // namespace ferry::detail
