#include "device_checksum.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ferry::test {
namespace {

__host__ __device__ inline std::uint64_t weight(std::uint64_t position) {
    std::uint64_t x = position + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (x ^ (x >> 31)) | 1;  // odd: never zero
}

// blockIdx.y picks the range; the blocks along x share its bytes.
__global__ void checksum_kernel(const unsigned char* base, const checked_range* ranges, unsigned long long* sums) {
    const checked_range r = ranges[blockIdx.y];
    std::uint64_t sum = 0;
    for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < r.size;
         i += std::uint64_t{gridDim.x} * blockDim.x)
        sum += (base[r.at + i] + 1ull) * weight(r.origin + i);
    for (int d = 16; d > 0; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);
    if ((threadIdx.x & 31) == 0) atomicAdd(&sums[blockIdx.y], static_cast<unsigned long long>(sum));
}

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

std::vector<std::uint64_t> device_checksums(const void* base, const std::vector<checked_range>& ranges) {
    std::vector<std::uint64_t> out(ranges.size());
    if (ranges.empty()) return out;
    checked_range* d_ranges = nullptr;
    unsigned long long* d_sums = nullptr;
    auto release = [&] {
        cudaFree(d_ranges);
        cudaFree(d_sums);
    };
    try {
        check(cudaMalloc(&d_ranges, ranges.size() * sizeof(checked_range)), "cudaMalloc");
        check(cudaMalloc(&d_sums, ranges.size() * sizeof(unsigned long long)), "cudaMalloc");
        check(cudaMemcpy(d_ranges, ranges.data(), ranges.size() * sizeof(checked_range), cudaMemcpyHostToDevice),
              "cudaMemcpy");
        check(cudaMemset(d_sums, 0, ranges.size() * sizeof(unsigned long long)), "cudaMemset");
        checksum_kernel<<<dim3(32, static_cast<unsigned>(ranges.size())), 256>>>(
            static_cast<const unsigned char*>(base), d_ranges, d_sums);
        check(cudaGetLastError(), "checksum kernel launch");
        check(cudaMemcpy(out.data(), d_sums, out.size() * sizeof(std::uint64_t), cudaMemcpyDeviceToHost),
              "cudaMemcpy");
    } catch (...) {
        release();
        throw;
    }
    release();
    return out;
}

std::uint64_t host_checksum(const std::uint8_t* p, std::size_t size, std::uint64_t origin) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < size; ++i) sum += (p[i] + 1ull) * weight(origin + i);
    return sum;
}

}  // namespace ferry::test
