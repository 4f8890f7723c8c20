// The hash behind ferry's checksums, chosen by these figures (docs/integrity.md): CRC-32C with
// the crc32 instruction over three streams, its table fallback, and xxHash's XXH3 and XXH64, on
// one core over 64 MiB of host memory (out of the caches, as a load's bytes are); and the GPU
// CRC-32C kernel over 1 GiB of device memory against a device-to-device copy. Run:
// ferry_microbench --benchmark_filter='hash|crc'
#include <benchmark/benchmark.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <vector>

#include "cuda/checksum_kernels.hpp"
#include "cuda/deserialize_kernels.hpp"
#include "ferry/memory.hpp"
#include "integrity/crc32c.hpp"

namespace {

constexpr std::size_t host_bytes = std::size_t{64} << 20;
constexpr std::size_t device_bytes = std::size_t{1} << 30;

const std::vector<unsigned char>& data() {
    static const std::vector<unsigned char> d = [] {
        std::vector<unsigned char> v(host_bytes);
        std::uint64_t x = 88172645463325252ull;
        for (auto& b : v) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b = static_cast<unsigned char>(x);
        }
        return v;
    }();
    return d;
}

template <class Hash>
void run(benchmark::State& state, Hash hash) {
    const auto& d = data();
    for (auto _ : state) benchmark::DoNotOptimize(hash(d.data(), d.size()));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * d.size()));
}

void bm_hash_crc32c(benchmark::State& s) {
    run(s, [](const void* p, std::size_t n) { return ferry::integrity::crc32c(p, n); });
}
void bm_hash_crc32c_table(benchmark::State& s) {
    run(s, [](const void* p, std::size_t n) { return ferry::integrity::crc32c_portable(p, n); });
}
void bm_hash_xxh3(benchmark::State& s) {
    run(s, [](const void* p, std::size_t n) { return XXH3_64bits(p, n); });
}
void bm_hash_xxh64(benchmark::State& s) {
    run(s, [](const void* p, std::size_t n) { return XXH64(p, n, 0); });
}

void bm_crc_gpu(benchmark::State& state) {
    if (ferry::cuda_device_count() == 0) {
        state.SkipWithError("needs a CUDA GPU");
        return;
    }
    ferry::device_buffer a(device_bytes);
    ferry::stream s;
    std::vector<ferry::kernels::crc_span> spans;
    for (std::size_t at = 0; at < device_bytes; at += std::size_t{64} << 20)
        spans.push_back({static_cast<unsigned char*>(a.data()) + at, std::size_t{64} << 20});
    for (auto _ : state) benchmark::DoNotOptimize(ferry::kernels::crc32c_spans(spans, 0, s.get()));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * device_bytes));
}

void bm_crc_gpu_copy(benchmark::State& state) {  // the ceiling: read + write of the same bytes
    if (ferry::cuda_device_count() == 0) {
        state.SkipWithError("needs a CUDA GPU");
        return;
    }
    ferry::device_buffer a(device_bytes), b(device_bytes);
    ferry::stream s;
    for (auto _ : state) {
        ferry::kernels::copy(b.data(), a.data(), device_bytes, 0, s.get());
        s.synchronize();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * device_bytes));
}

}  // namespace

BENCHMARK(bm_hash_crc32c)->UseRealTime();
BENCHMARK(bm_hash_crc32c_table)->UseRealTime();
BENCHMARK(bm_hash_xxh3)->UseRealTime();
BENCHMARK(bm_hash_xxh64)->UseRealTime();
BENCHMARK(bm_crc_gpu)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(bm_crc_gpu_copy)->UseRealTime()->Unit(benchmark::kMillisecond);
