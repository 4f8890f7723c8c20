// Deserialization kernels. Each is a grid-stride loop over 16-byte vectors (so loads and stores
// are full 128-bit transactions, which is what keeps them near copy bandwidth), with the few
// elements before the first aligned address and after the last whole vector handled by scalar
// code in the same launch.
#include "cuda/deserialize_kernels.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cuda/cuda_runtime.hpp"
#include "cuda/float_bits.hpp"
#include "ferry/error.hpp"

namespace ferry::kernels {
namespace {

constexpr int block_threads = 256;
// Enough resident blocks to saturate HBM on current GPUs; the grid-stride loop covers the rest.
constexpr std::size_t max_blocks = 8192;

unsigned grid_for(std::size_t work) {
    std::size_t b = (work + block_threads - 1) / block_threads;
    return static_cast<unsigned>(std::clamp<std::size_t>(b, 1, max_blocks));
}

// Makes `device` current for the launches of one call and restores the caller's device.
class device_scope {
public:
    explicit device_scope(int device) {
        detail::cuda_check(FERRY_CUDA(cudaGetDevice, &previous_), "cudaGetDevice");
        if (previous_ != device) detail::cuda_check(FERRY_CUDA(cudaSetDevice, device), "cudaSetDevice");
        changed_ = previous_ != device;
    }
    ~device_scope() {
        if (changed_) cudaSetDevice(previous_);
    }
    device_scope(const device_scope&) = delete;
    device_scope& operator=(const device_scope&) = delete;

private:
    int previous_ = 0;
    bool changed_ = false;
};

void check_launch(const char* what) { detail::cuda_check(cudaGetLastError(), what); }

// Asked before each launch: the fault-injection seam's stand-in for a launch that fails.
void before_launch(const char* what) { detail::cuda_check(detail::cuda_fault("kernel launch"), what); }

// ---- byte swap ---------------------------------------------------------------------------

__device__ __forceinline__ unsigned bswap32(unsigned w) { return __byte_perm(w, 0, 0x0123); }

template <int Unit>
__device__ __forceinline__ uint4 swap_vector(uint4 v) {
    if constexpr (Unit == 2) {
        return make_uint4(__byte_perm(v.x, 0, 0x2301), __byte_perm(v.y, 0, 0x2301),
                          __byte_perm(v.z, 0, 0x2301), __byte_perm(v.w, 0, 0x2301));
    } else if constexpr (Unit == 4) {
        return make_uint4(bswap32(v.x), bswap32(v.y), bswap32(v.z), bswap32(v.w));
    } else if constexpr (Unit == 8) {
        return make_uint4(bswap32(v.y), bswap32(v.x), bswap32(v.w), bswap32(v.z));
    } else {
        return make_uint4(bswap32(v.w), bswap32(v.z), bswap32(v.y), bswap32(v.x));
    }
}

template <int Unit>
__device__ __forceinline__ void swap_scalar(unsigned char* p) {
#pragma unroll
    for (int i = 0; i < Unit / 2; ++i) {
        unsigned char t = p[i];
        p[i] = p[Unit - 1 - i];
        p[Unit - 1 - i] = t;
    }
}

// Elements [0, head) and [head + vectors * per_vector, count) are scalar; the rest are vectors
// starting at data + head * Unit, which is 16-byte aligned.
template <int Unit>
__global__ void byte_swap_kernel(unsigned char* data, std::size_t count, std::size_t head,
                                 std::size_t vectors) {
    constexpr std::size_t per_vector = 16 / Unit;
    std::size_t tid = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    uint4* v = reinterpret_cast<uint4*>(data + head * Unit);
    for (std::size_t i = tid; i < vectors; i += stride) v[i] = swap_vector<Unit>(v[i]);
    std::size_t tail_begin = head + vectors * per_vector;
    std::size_t scalars = head + (count - tail_begin);
    for (std::size_t i = tid; i < scalars; i += stride) {
        std::size_t e = i < head ? i : tail_begin + (i - head);
        swap_scalar<Unit>(data + e * Unit);
    }
}

template <int Unit>
void launch_byte_swap(unsigned char* data, std::size_t count, stream_t s) {
    auto addr = reinterpret_cast<std::uintptr_t>(data);
    std::size_t head = count, vectors = 0;
    if (addr % Unit == 0) {
        head = std::min<std::size_t>(count, ((16 - addr % 16) % 16) / Unit);
        vectors = (count - head) / (16 / Unit);
    }
    std::size_t scalars = count - vectors * (16 / Unit);
    before_launch("byte swap kernel launch");
    byte_swap_kernel<Unit><<<grid_for(std::max(vectors, scalars)), block_threads, 0, s>>>(
        data, count, head, vectors);
    check_launch("byte swap kernel launch");
}

// ---- dtype conversion --------------------------------------------------------------------

template <dtype T> struct raw;
template <> struct raw<dtype::float16> { using type = std::uint16_t; };
template <> struct raw<dtype::bfloat16> { using type = std::uint16_t; };
template <> struct raw<dtype::float32> { using type = std::uint32_t; };
template <> struct raw<dtype::float64> { using type = std::uint64_t; };

template <dtype From, dtype To>
__device__ __forceinline__ typename raw<To>::type convert_one(typename raw<From>::type x) {
    if constexpr (From == To) {
        return x;
    } else if constexpr (From == dtype::float16 && To == dtype::float32) {
        return bits::f16_to_f32(x);
    } else if constexpr (From == dtype::float32 && To == dtype::float16) {
        return bits::f32_to_f16(x);
    } else if constexpr (From == dtype::bfloat16 && To == dtype::float32) {
        return bits::bf16_to_f32(x);
    } else if constexpr (From == dtype::float32 && To == dtype::bfloat16) {
        return bits::f32_to_bf16(x);
    } else if constexpr (From == dtype::float64 && To == dtype::float32) {
        return bits::f64_to_f32(x);
    } else {
        static_assert(From == dtype::float32 && To == dtype::float64);
        return bits::f32_to_f64(x);
    }
}

// A group is what one thread converts per step: as many elements as fill one 16-byte vector
// on the wider side. Each side then moves with one load or store per thread (16, 8 or 4 bytes),
// so a warp's loads and stores are both contiguous: widening float16 -> float32 with 16-byte
// loads and two 16-byte stores per thread left every store half a sector apart (0.63x the copy
// bandwidth on an H200); 8-byte loads and one 16-byte store run at the copy's speed.
template <std::size_t Bytes> struct word_of;
template <> struct word_of<4> { using type = unsigned; };
template <> struct word_of<8> { using type = uint2; };
template <> struct word_of<16> { using type = uint4; };

template <dtype From, dtype To>
struct group {
    using in_t = typename raw<From>::type;
    using out_t = typename raw<To>::type;
    static constexpr std::size_t elements = 16 / std::max(sizeof(in_t), sizeof(out_t));
    using in_word = typename word_of<elements * sizeof(in_t)>::type;
    using out_word = typename word_of<elements * sizeof(out_t)>::type;
};

template <class T>
__device__ __forceinline__ T load_unaligned(const unsigned char* p) {
    T v;
    memcpy(&v, p, sizeof(T));  // byte loads: p may be misaligned for T
    return v;
}

template <class T>
__device__ __forceinline__ void store_unaligned(unsigned char* p, T v) {
    memcpy(p, &v, sizeof(T));
}

// `aligned`: src and dst are aligned to their element sizes, so scalar elements may be loaded
// as whole words; otherwise byte by byte (third-party safetensors files need not align tensors).
template <dtype From, dtype To>
__global__ void convert_kernel(const unsigned char* src, unsigned char* dst, std::size_t count,
                               std::size_t head, std::size_t groups, bool aligned) {
    using g = group<From, To>;
    using in_t = typename g::in_t;
    using out_t = typename g::out_t;
    std::size_t tid = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    using in_word = typename g::in_word;
    using out_word = typename g::out_word;
    const in_word* in = reinterpret_cast<const in_word*>(src + head * sizeof(in_t));
    out_word* out = reinterpret_cast<out_word*>(dst + head * sizeof(out_t));
    for (std::size_t i = tid; i < groups; i += stride) {
        in_word a = in[i];
        out_word b;
        const in_t* x = reinterpret_cast<const in_t*>(&a);
        out_t* y = reinterpret_cast<out_t*>(&b);
#pragma unroll
        for (std::size_t k = 0; k < g::elements; ++k) y[k] = convert_one<From, To>(x[k]);
        out[i] = b;
    }
    std::size_t tail_begin = head + groups * g::elements;
    std::size_t scalars = head + (count - tail_begin);
    const in_t* xs = reinterpret_cast<const in_t*>(src);
    out_t* ys = reinterpret_cast<out_t*>(dst);
    for (std::size_t i = tid; i < scalars; i += stride) {
        std::size_t e = i < head ? i : tail_begin + (i - head);
        if (aligned)
            ys[e] = convert_one<From, To>(xs[e]);
        else
            store_unaligned<out_t>(dst + e * sizeof(out_t),
                                   convert_one<From, To>(load_unaligned<in_t>(src + e * sizeof(in_t))));
    }
}

template <dtype From, dtype To>
void launch_convert(const void* src, void* dst, std::size_t count, stream_t s) {
    using g = group<From, To>;
    auto in = reinterpret_cast<std::uintptr_t>(src);
    auto out = reinterpret_cast<std::uintptr_t>(dst);
    std::size_t head = count, groups = 0;
    constexpr std::size_t in_size = sizeof(typename g::in_t);
    constexpr std::size_t out_size = sizeof(typename g::out_t);
    const bool aligned = in % in_size == 0 && out % out_size == 0;
    if (aligned) {
        std::size_t h = ((16 - in % 16) % 16) / in_size;
        if (h <= count && (out + h * out_size) % 16 == 0) {
            head = h;
            groups = (count - head) / g::elements;
        }
    }
    std::size_t scalars = count - groups * g::elements;
    before_launch("dtype conversion kernel launch");
    convert_kernel<From, To><<<grid_for(std::max(groups, scalars)), block_threads, 0, s>>>(
        static_cast<const unsigned char*>(src), static_cast<unsigned char*>(dst), count, head,
        groups, aligned);
    check_launch("dtype conversion kernel launch");
}

// ---- Fortran -> C ------------------------------------------------------------------------

template <std::size_t Size>
struct alignas(Size) element {
    unsigned char b[Size];
};

constexpr int tile = 32;
constexpr int tile_rows = 8;

// A Fortran (rows, cols) matrix is the C-order (cols, rows) matrix in memory; its C-order copy
// is a plain transpose. Tiles through shared memory keep both reads and writes coalesced.
template <std::size_t Size>
__global__ void transpose_2d_kernel(const element<Size>* src, element<Size>* dst,
                                    std::size_t rows, std::size_t cols) {
    __shared__ element<Size> t[tile][tile + 1];
    // src is (cols, rows) in C order: index src[c * rows + r].
    for (std::size_t by = blockIdx.y; by * tile < cols; by += gridDim.y) {
        for (std::size_t bx = blockIdx.x; bx * tile < rows; bx += gridDim.x) {
            std::size_t r = bx * tile + threadIdx.x;
            for (int j = threadIdx.y; j < tile; j += tile_rows) {
                std::size_t c = by * tile + j;
                if (r < rows && c < cols) t[j][threadIdx.x] = src[c * rows + r];
            }
            __syncthreads();
            std::size_t c = by * tile + threadIdx.x;
            for (int j = threadIdx.y; j < tile; j += tile_rows) {
                std::size_t rr = bx * tile + j;
                if (rr < rows && c < cols) dst[rr * cols + c] = t[threadIdx.x][j];
            }
            __syncthreads();
        }
    }
}

constexpr int max_dims = 32;
struct dims {
    std::int64_t shape[max_dims];
    int ndim;
};

template <std::size_t Size>
__global__ void transpose_nd_kernel(const element<Size>* src, element<Size>* dst,
                                    std::size_t count, dims d) {
    std::size_t tid = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t o = tid; o < count; o += stride) {
        // o is a C-order index; peel indices from the last axis and accumulate the Fortran
        // offset, in which the first axis is fastest.
        std::size_t rest = o, offset = 0, f_stride_total = 1;
        std::size_t idx[max_dims];
        for (int k = d.ndim - 1; k >= 0; --k) {
            auto n = static_cast<std::size_t>(d.shape[k]);
            idx[k] = rest % n;
            rest /= n;
        }
        for (int k = 0; k < d.ndim; ++k) {
            offset += idx[k] * f_stride_total;
            f_stride_total *= static_cast<std::size_t>(d.shape[k]);
        }
        dst[o] = src[offset];
    }
}

template <std::size_t Size>
void launch_transpose(const void* src, void* dst, const std::vector<std::int64_t>& shape,
                      std::size_t count, stream_t s) {
    auto* in = static_cast<const element<Size>*>(src);
    auto* out = static_cast<element<Size>*>(dst);
    // Size-1 axes do not move anything; drop them so more arrays take the 2-d path.
    std::vector<std::int64_t> kept;
    for (std::int64_t n : shape)
        if (n != 1) kept.push_back(n);
    if (kept.size() <= 1) {
        detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, dst, src, count * Size, cudaMemcpyDefault, s),
                           "cudaMemcpyAsync");
        return;
    }
    if (kept.size() == 2) {
        auto rows = static_cast<std::size_t>(kept[0]);
        auto cols = static_cast<std::size_t>(kept[1]);
        dim3 grid(static_cast<unsigned>(std::min<std::size_t>((rows + tile - 1) / tile, 65535)),
                  static_cast<unsigned>(std::min<std::size_t>((cols + tile - 1) / tile, 65535)));
        before_launch("transpose kernel launch");
        transpose_2d_kernel<Size><<<grid, dim3(tile, tile_rows), 0, s>>>(in, out, rows, cols);
        check_launch("transpose kernel launch");
        return;
    }
    if (kept.size() > max_dims) throw usage_error("Fortran to C order: too many dimensions");
    dims d{};
    d.ndim = static_cast<int>(kept.size());
    for (std::size_t i = 0; i < kept.size(); ++i) d.shape[i] = kept[i];
    before_launch("transpose kernel launch");
    transpose_nd_kernel<Size><<<grid_for(count), block_threads, 0, s>>>(in, out, count, d);
    check_launch("transpose kernel launch");
}

}  // namespace

void copy(void* dst, const void* src, std::size_t n, int device, stream_t s) {
    if (n == 0) return;
    device_scope scope(device);
    detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, dst, src, n, cudaMemcpyDefault, s), "cudaMemcpyAsync");
}

void synchronize(stream_t s, int device) {
    device_scope scope(device);
    detail::cuda_check(FERRY_CUDA(cudaStreamSynchronize, s), "cudaStreamSynchronize");
}

void byte_swap(void* data, std::size_t count, std::size_t unit, int device, stream_t s) {
    if (count == 0 || unit <= 1) return;
    device_scope scope(device);
    auto* p = static_cast<unsigned char*>(data);
    switch (unit) {
    case 2: launch_byte_swap<2>(p, count, s); return;
    case 4: launch_byte_swap<4>(p, count, s); return;
    case 8: launch_byte_swap<8>(p, count, s); return;
    case 16: launch_byte_swap<16>(p, count, s); return;
    default: throw usage_error("byte swap: unsupported unit of " + std::to_string(unit) + " bytes");
    }
}

bool can_convert(dtype from, dtype to) noexcept {
    if (from == to) return true;
    auto other = [](dtype t) {
        return t == dtype::float16 || t == dtype::bfloat16 || t == dtype::float64;
    };
    return (from == dtype::float32 && other(to)) || (to == dtype::float32 && other(from));
}

void convert(const void* src, dtype from, void* dst, dtype to, std::size_t count, int device,
             stream_t s) {
    if (!can_convert(from, to))
        throw usage_error("cannot convert " + std::string(to_string(from)) + " to " +
                          std::string(to_string(to)));
    if (count == 0) return;
    device_scope scope(device);
    if (from == to) {
        detail::cuda_check(
            FERRY_CUDA(cudaMemcpyAsync, dst, src, count * size_of(from), cudaMemcpyDefault, s),
            "cudaMemcpyAsync");
        return;
    }
    using enum dtype;
    if (from == float16) return launch_convert<float16, float32>(src, dst, count, s);
    if (from == bfloat16) return launch_convert<bfloat16, float32>(src, dst, count, s);
    if (from == float64) return launch_convert<float64, float32>(src, dst, count, s);
    if (to == float16) return launch_convert<float32, float16>(src, dst, count, s);
    if (to == bfloat16) return launch_convert<float32, bfloat16>(src, dst, count, s);
    return launch_convert<float32, float64>(src, dst, count, s);
}

void fortran_to_c(const void* src, void* dst, std::size_t itemsize,
                  const std::vector<std::int64_t>& shape, int device, stream_t s) {
    std::size_t count = 1;
    for (std::int64_t n : shape) count *= static_cast<std::size_t>(n);
    if (count == 0) return;
    device_scope scope(device);
    auto misaligned = [&](const void* p) {
        return reinterpret_cast<std::uintptr_t>(p) % itemsize != 0;
    };
    if (itemsize > 1 && (misaligned(src) || misaligned(dst))) {
        // Element-typed loads need aligned pointers; a view into a larger buffer may not be.
        // Rare, so simply stage through aligned scratch and wait before releasing it.
        std::size_t n = count * itemsize;
        device_buffer in(n, device), out(n, device);
        detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, in.data(), src, n, cudaMemcpyDefault, s), "cudaMemcpyAsync");
        fortran_to_c(in.data(), out.data(), itemsize, shape, device, s);
        detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, dst, out.data(), n, cudaMemcpyDefault, s), "cudaMemcpyAsync");
        detail::cuda_check(FERRY_CUDA(cudaStreamSynchronize, s), "cudaStreamSynchronize");
        return;
    }
    switch (itemsize) {
    case 1: return launch_transpose<1>(src, dst, shape, count, s);
    case 2: return launch_transpose<2>(src, dst, shape, count, s);
    case 4: return launch_transpose<4>(src, dst, shape, count, s);
    case 8: return launch_transpose<8>(src, dst, shape, count, s);
    case 16: return launch_transpose<16>(src, dst, shape, count, s);
    default:
        throw usage_error("Fortran to C order: unsupported item size " + std::to_string(itemsize));
    }
}

}  // namespace ferry::kernels
