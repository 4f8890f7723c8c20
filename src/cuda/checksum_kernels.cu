// The CRC-32C kernel. Spans are cut into 1 MiB pieces, one block each, one launch for all.
// Each of a block's 256 threads runs a slicing-by-4 table (in shared memory) over 4 KiB of the
// piece with 16-byte loads; the CRC register is linear in the data, so the piece's register is
// the XOR of each thread's register advanced past the bytes after its part (a multiplication by
// x^(8n) modulo the polynomial), reduced with warp shuffles. The host then joins the pieces of a
// span the same way (a few thousand multiplications for gigabytes) and applies the standard
// initial and final inversions.
#include "cuda/checksum_kernels.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "cuda/cuda_runtime.hpp"
#include "ferry/error.hpp"
#include "integrity/crc32c.hpp"

namespace ferry::kernels {
namespace {

constexpr int block_threads = 256;
constexpr std::uint64_t thread_bytes = 4096;
constexpr std::uint64_t piece_bytes = block_threads * thread_bytes;  // 1 MiB
constexpr std::uint32_t polynomial = 0x82F63B78u;

struct piece_ref {
    const unsigned char* data;
    std::uint64_t bytes;
};

// x^(2^k) modulo the polynomial for k < 24: enough for shifts within one piece.
struct powers_table {
    std::uint32_t p[24];
};

__device__ std::uint32_t multiply(std::uint32_t a, std::uint32_t b) {
    std::uint32_t m = 1u << 31, p = 0;
    for (int i = 0; i < 32; ++i) {
        if (a & m) p ^= b;
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ polynomial : b >> 1;
    }
    return p;
}

__device__ std::uint32_t shift_factor(std::uint64_t bytes, const powers_table& pw) {
    std::uint32_t p = 1u << 31;
    for (unsigned k = 3; bytes != 0 && k < 24; ++k, bytes >>= 1)
        if (bytes & 1) p = multiply(pw.p[k], p);
    return p;
}

__device__ __forceinline__ std::uint32_t word_step(std::uint32_t reg, std::uint32_t w,
                                                   const std::uint32_t (*t)[256]) {
    reg ^= w;
    return t[3][reg & 0xFF] ^ t[2][(reg >> 8) & 0xFF] ^ t[1][(reg >> 16) & 0xFF] ^ t[0][reg >> 24];
}

__device__ __forceinline__ std::uint32_t byte_step(std::uint32_t reg, unsigned char b,
                                                   const std::uint32_t (*t)[256]) {
    return (reg >> 8) ^ t[0][(reg ^ b) & 0xFF];
}

__global__ void crc32c_pieces(const piece_ref* pieces, std::uint32_t* out, powers_table pw) {
    __shared__ std::uint32_t t[4][256];
    __shared__ std::uint32_t warp_xor[block_threads / 32];
    const unsigned tid = threadIdx.x;
    {
        std::uint32_t c = tid;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ polynomial : c >> 1;
        t[0][tid] = c;
    }
    __syncthreads();
    for (int s = 1; s < 4; ++s) {
        t[s][tid] = (t[s - 1][tid] >> 8) ^ t[0][t[s - 1][tid] & 0xFF];
        __syncthreads();
    }
    const piece_ref pc = pieces[blockIdx.x];
    const std::uint64_t begin = std::min<std::uint64_t>(tid * thread_bytes, pc.bytes);
    const std::uint64_t end = std::min<std::uint64_t>(begin + thread_bytes, pc.bytes);
    const unsigned char* p = pc.data + begin;
    const unsigned char* stop = pc.data + end;
    std::uint32_t reg = 0;
    while (p < stop && (reinterpret_cast<std::uintptr_t>(p) & 15) != 0) reg = byte_step(reg, *p++, t);
    while (stop - p >= 16) {
        uint4 v = *reinterpret_cast<const uint4*>(p);
        reg = word_step(reg, v.x, t);
        reg = word_step(reg, v.y, t);
        reg = word_step(reg, v.z, t);
        reg = word_step(reg, v.w, t);
        p += 16;
    }
    while (p < stop) reg = byte_step(reg, *p++, t);
    if (end > begin) reg = multiply(reg, shift_factor(pc.bytes - end, pw));
    for (int o = 16; o > 0; o >>= 1) reg ^= __shfl_xor_sync(0xFFFFFFFFu, reg, o);
    if ((tid & 31) == 0) warp_xor[tid / 32] = reg;
    __syncthreads();
    if (tid == 0) {
        std::uint32_t x = 0;
        for (int w = 0; w < block_threads / 32; ++w) x ^= warp_xor[w];
        out[blockIdx.x] = x;
    }
}

}  // namespace

namespace {

bool has_memory_pools(int device) {
    int yes = 0;
    return cudaDeviceGetAttribute(&yes, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess && yes != 0;
}

}  // namespace

crc_pass::crc_pass(const std::vector<crc_span>& spans, int device, stream_t s) : device_(device), stream_(s) {
    span_bytes_.reserve(spans.size());
    std::vector<piece_ref> pieces;
    for (const auto& sp : spans) {
        span_bytes_.push_back(sp.bytes);
        for (std::uint64_t at = 0; at < sp.bytes; at += piece_bytes)
            pieces.push_back({static_cast<const unsigned char*>(sp.data) + at, std::min(piece_bytes, sp.bytes - at)});
    }
    pieces_ = pieces.size();
    if (pieces.empty()) return;
    detail::set_device(device);
    powers_table pw{};
    for (unsigned k = 0; k < 24; ++k) pw.p[k] = k == 0 ? 1u << 30 : integrity::crc32c_multiply(pw.p[k - 1], pw.p[k - 1]);
    auto cs = static_cast<cudaStream_t>(s);
    try {
        // cudaMalloc and cudaFree would wait for the whole device: for reads still landing too.
        pooled_ = has_memory_pools(device);
        for (void** p : {&refs_, &regs_}) {
            const std::size_t n = pieces.size() * (p == &refs_ ? sizeof(piece_ref) : sizeof(std::uint32_t));
            detail::cuda_check(pooled_ ? FERRY_CUDA(cudaMallocAsync, p, n, cs) : FERRY_CUDA(cudaMalloc, p, n),
                               pooled_ ? "cudaMallocAsync" : "cudaMalloc");
        }
        // From pageable memory: copied to the driver's staging before the call returns.
        detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, refs_, pieces.data(), pieces.size() * sizeof(piece_ref),
                                      cudaMemcpyHostToDevice, cs),
                           "cudaMemcpyAsync");
        detail::cuda_check(detail::cuda_fault("kernel launch"), "crc32c kernel");
        // One block per piece; a grid's x dimension takes 2^31 - 1 blocks (2 PiB of spans).
        crc32c_pieces<<<static_cast<unsigned>(pieces.size()), block_threads, 0, cs>>>(
            static_cast<const piece_ref*>(refs_), static_cast<std::uint32_t*>(regs_), pw);
        detail::cuda_check(cudaGetLastError(), "crc32c kernel");
    } catch (...) {
        waited_ = true;
        cudaStreamSynchronize(cs);
        release();
        throw;
    }
}

crc_pass::crc_pass(crc_pass&& o) noexcept
    : span_bytes_(std::move(o.span_bytes_)), pieces_(o.pieces_), device_(o.device_), stream_(o.stream_),
      refs_(std::exchange(o.refs_, nullptr)), regs_(std::exchange(o.regs_, nullptr)), pooled_(o.pooled_),
      waited_(std::exchange(o.waited_, true)) {}

void crc_pass::release() noexcept {
    for (void** p : {&refs_, &regs_}) {
        if (!*p) continue;
        if (pooled_) cudaFreeAsync(*p, static_cast<cudaStream_t>(stream_));
        else cudaFree(*p);
        *p = nullptr;
    }
}

crc_pass::~crc_pass() {
    // A pass given up on (its load failed) still reads the spans: wait before they may go.
    if (!waited_ && regs_) {
        detail::set_device(device_);
        cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    }
    release();
}

std::vector<std::uint32_t> crc_pass::wait() {
    if (waited_) throw usage_error("crc_pass::wait: the pass was already waited for");
    waited_ = true;
    std::vector<std::uint32_t> result(span_bytes_.size(), 0);
    if (pieces_ == 0) return result;
    detail::set_device(device_);
    std::vector<std::uint32_t> piece_regs(pieces_);
    auto cs = static_cast<cudaStream_t>(stream_);
    try {
        detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, piece_regs.data(), regs_, pieces_ * sizeof(std::uint32_t),
                                      cudaMemcpyDeviceToHost, cs),
                           "cudaMemcpyAsync");
        detail::cuda_check(FERRY_CUDA(cudaStreamSynchronize, cs), "cudaStreamSynchronize");
    } catch (...) {
        cudaStreamSynchronize(cs);
        release();
        throw;
    }
    release();
    const std::uint32_t full_shift = integrity::crc32c_shift_factor(piece_bytes);
    std::size_t k = 0;
    for (std::size_t i = 0; i < span_bytes_.size(); ++i) {
        if (span_bytes_[i] == 0) continue;
        std::uint32_t acc = 0xFFFFFFFFu;  // the standard initial register
        for (std::uint64_t at = 0; at < span_bytes_[i]; at += piece_bytes, ++k) {
            std::uint64_t n = std::min(piece_bytes, span_bytes_[i] - at);
            std::uint32_t f = n == piece_bytes ? full_shift : integrity::crc32c_shift_factor(n);
            acc = integrity::crc32c_multiply(acc, f) ^ piece_regs[k];
        }
        result[i] = ~acc;
    }
    return result;
}

std::vector<std::uint32_t> crc32c_spans(const std::vector<crc_span>& spans, int device, stream_t s) {
    return crc_pass(spans, device, s).wait();
}

}  // namespace ferry::kernels
