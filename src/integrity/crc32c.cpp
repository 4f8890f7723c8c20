// CRC-32C on the CPU. The crc32 instruction has a latency of 3 cycles and a throughput of one
// per cycle, so one dependent chain runs at a third of what the unit can do: the fast path
// keeps three independent chains over three thirds of each block and joins them with two
// multiplications by precomputed shift factors (crc32c_combine's algebra), which is the usual
// way to reach ~8 bytes per cycle. Without SSE4.2 (or off x86) a slicing-by-8 table is used.
#include "integrity/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define FERRY_CRC32C_X86 1
#endif

namespace ferry::integrity {
namespace {

constexpr std::uint32_t polynomial = 0x82F63B78u;  // reflected 0x1EDC6F41

using table_set = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr table_set make_tables() {
    table_set t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ polynomial : c >> 1;
        t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
        for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    return t;
}
constexpr table_set tables = make_tables();

// The register (not the final value) advanced over n bytes by the tables.
std::uint32_t table_update(std::uint32_t reg, const unsigned char* p, std::size_t n) noexcept {
    while (n >= 8) {
        std::uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= reg;
        reg = tables[7][lo & 0xFF] ^ tables[6][(lo >> 8) & 0xFF] ^ tables[5][(lo >> 16) & 0xFF] ^
              tables[4][lo >> 24] ^ tables[3][hi & 0xFF] ^ tables[2][(hi >> 8) & 0xFF] ^
              tables[1][(hi >> 16) & 0xFF] ^ tables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) reg = (reg >> 8) ^ tables[0][(reg ^ *p++) & 0xFF];
    return reg;
}

// x^(2^k) mod P for k = 0..63, in register order.
std::array<std::uint32_t, 64> make_powers() noexcept {
    std::array<std::uint32_t, 64> p{};
    std::uint32_t x = 1u << 30;  // x^1
    for (auto& v : p) {
        v = x;
        x = crc32c_multiply(x, x);
    }
    return p;
}

#ifdef FERRY_CRC32C_X86
// Each of the three streams covers this many bytes per block; the shift factors for it are
// computed once. 8 KiB keeps the two multiplications per block below 1% of its time.
constexpr std::size_t stream_bytes = 8192;

__attribute__((target("sse4.2"))) std::uint32_t hw_run(std::uint32_t reg, const unsigned char* p,
                                                        std::size_t n) noexcept {
    std::uint64_t r = reg;
    while (n >= 8) {
        std::uint64_t v;
        std::memcpy(&v, p, 8);
        r = _mm_crc32_u64(r, v);
        p += 8;
        n -= 8;
    }
    std::uint32_t r32 = static_cast<std::uint32_t>(r);
    while (n--) r32 = _mm_crc32_u8(r32, *p++);
    return r32;
}

__attribute__((target("sse4.2"))) std::uint32_t hw_update(std::uint32_t reg, const unsigned char* p,
                                                           std::size_t n) noexcept {
    static const std::uint32_t shift = crc32c_shift_factor(stream_bytes);
    while (n >= 3 * stream_bytes) {
        std::uint64_t a = reg, b = 0, c = 0;
        const unsigned char* pa = p;
        const unsigned char* pb = p + stream_bytes;
        const unsigned char* pc = p + 2 * stream_bytes;
        for (std::size_t i = 0; i < stream_bytes; i += 8) {
            std::uint64_t va, vb, vc;
            std::memcpy(&va, pa + i, 8);
            std::memcpy(&vb, pb + i, 8);
            std::memcpy(&vc, pc + i, 8);
            a = _mm_crc32_u64(a, va);
            b = _mm_crc32_u64(b, vb);
            c = _mm_crc32_u64(c, vc);
        }
        // The register is linear: reg(A|B|C) = shift(shift(a) ^ b) ^ c, b and c run from 0.
        std::uint32_t ab = crc32c_multiply(static_cast<std::uint32_t>(a), shift) ^ static_cast<std::uint32_t>(b);
        reg = crc32c_multiply(ab, shift) ^ static_cast<std::uint32_t>(c);
        p += 3 * stream_bytes;
        n -= 3 * stream_bytes;
    }
    return hw_run(reg, p, n);
}

bool detect_hardware() noexcept { return __builtin_cpu_supports("sse4.2"); }
#else
bool detect_hardware() noexcept { return false; }
#endif

}  // namespace

std::uint32_t crc32c_multiply(std::uint32_t a, std::uint32_t b) noexcept {
    std::uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ polynomial : b >> 1;
    }
    return p;
}

std::uint32_t crc32c_shift_factor(std::uint64_t bytes) noexcept {
    static const std::array<std::uint32_t, 64> powers = make_powers();
    std::uint32_t p = 1u << 31;  // x^0
    std::uint64_t bits = bytes;  // x^(8n) = product of x^(2^(k+3)) over the set bits k of n
    for (unsigned k = 3; bits != 0 && k < 64; ++k, bits >>= 1)
        if (bits & 1) p = crc32c_multiply(powers[k], p);
    return p;
}

std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b) noexcept {
    return crc32c_multiply(crc32c_shift_factor(length_b), crc_a) ^ crc_b;
}

std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc) noexcept {
    return ~table_update(~crc, static_cast<const unsigned char*>(data), n);
}

bool crc32c_hardware() noexcept {
    static const bool yes = detect_hardware();
    return yes;
}

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc) noexcept {
#ifdef FERRY_CRC32C_X86
    if (crc32c_hardware()) return ~hw_update(~crc, static_cast<const unsigned char*>(data), n);
#endif
    return crc32c_portable(data, n, crc);
}

void crc32c_hex(std::uint32_t crc, char out[8]) noexcept {
    static constexpr char digits[] = "0123456789abcdef";
    for (int i = 7; i >= 0; --i, crc >>= 4) out[i] = digits[crc & 0xF];
}

}  // namespace ferry::integrity
