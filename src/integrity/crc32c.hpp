// CRC-32C (Castagnoli, the iSCSI/ext4/Zarr polynomial): the checksum ferry records with the
// tensors it writes and checks on load. Chosen by measurement (docs/integrity.md): with the
// SSE4.2 crc32 instruction over three interleaved streams it runs near memory speed on one
// core, it is the one hash both the CPU and a GPU compute well, and CRCs of adjacent pieces
// combine into the CRC of the whole, so chunks are checked in parallel and still name a region.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::integrity {

/// The CRC-32C of `n` bytes at `data`, continuing from `crc` (0 for a fresh one): the standard
/// check value (initial ~0, final ~0, reflected polynomial 0x82F63B78). crc32c("123456789") is
/// 0xE3069283. Uses the CPU's crc32 instruction where there is one, a table otherwise.
/// Thread-safe.
std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0) noexcept;

/// The table version alone (the reference the fast path is tested against).
std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc = 0) noexcept;

/// The CRC-32C of A followed by B, from crc32c(A), crc32c(B) and B's length.
std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b) noexcept;

/// a * b modulo the CRC-32C polynomial, both in the reflected bit order of a CRC register.
std::uint32_t crc32c_multiply(std::uint32_t a, std::uint32_t b) noexcept;

/// x^(8 * bytes) modulo the polynomial: multiplying a register by it advances the register
/// over `bytes` zero bytes (how a piece's CRC is shifted past the pieces that follow it).
std::uint32_t crc32c_shift_factor(std::uint64_t bytes) noexcept;

/// Whether crc32c() uses the CPU's instruction (for the doctor and the benchmarks).
bool crc32c_hardware() noexcept;

/// "crc32c:" is what records name; this is its 8 lowercase hex digits.
void crc32c_hex(std::uint32_t crc, char out[8]) noexcept;

}  // namespace ferry::integrity
