// GPU deserialization kernels against a device-to-device copy of the same bytes on the same GPU:
// the bar is >= 70% of the copy's bandwidth. Bandwidth counts bytes read plus bytes written, as
// for the copy. Run: ferry_microbench --benchmark_filter=deserialize
#include <benchmark/benchmark.h>

#include "cuda/deserialize_kernels.hpp"
#include "ferry/memory.hpp"

namespace {

constexpr std::size_t bytes = std::size_t{1} << 30;  // 1 GiB of input

bool have_gpu(benchmark::State& state) {
    if (ferry::cuda_device_count() > 0) return true;
    state.SkipWithError("needs a CUDA GPU");
    return false;
}

void bm_copy(benchmark::State& state) {
    if (!have_gpu(state)) return;
    ferry::device_buffer a(bytes), b(bytes);
    ferry::stream s;
    for (auto _ : state) {
        ferry::kernels::copy(b.data(), a.data(), bytes, 0, s.get());
        s.synchronize();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes * 2));
}

void bm_byte_swap(benchmark::State& state) {
    if (!have_gpu(state)) return;
    auto unit = static_cast<std::size_t>(state.range(0));
    ferry::device_buffer a(bytes);
    ferry::stream s;
    for (auto _ : state) {
        ferry::kernels::byte_swap(a.data(), bytes / unit, unit, 0, s.get());
        s.synchronize();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes * 2));
}

void bm_convert(benchmark::State& state) {
    if (!have_gpu(state)) return;
    auto from = static_cast<ferry::dtype>(state.range(0));
    auto to = static_cast<ferry::dtype>(state.range(1));
    std::size_t count = bytes / ferry::size_of(from);
    ferry::device_buffer a(bytes), b(count * ferry::size_of(to));
    ferry::stream s;
    for (auto _ : state) {
        ferry::kernels::convert(a.data(), from, b.data(), to, count, 0, s.get());
        s.synchronize();
    }
    state.SetBytesProcessed(
        static_cast<std::int64_t>(state.iterations() * (bytes + count * ferry::size_of(to))));
    state.SetLabel(std::string(ferry::to_string(from)) + "->" + std::string(ferry::to_string(to)));
}

void bm_fortran_to_c(benchmark::State& state) {
    if (!have_gpu(state)) return;
    std::int64_t side = 16384;  // 16384 x 16384 float32 = 1 GiB
    ferry::device_buffer a(bytes), b(bytes);
    ferry::stream s;
    for (auto _ : state) {
        ferry::kernels::fortran_to_c(a.data(), b.data(), 4, {side, side}, 0, s.get());
        s.synchronize();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes * 2));
}

using ferry::dtype;
BENCHMARK(bm_copy)->Name("deserialize/d2d_copy")->UseRealTime();
BENCHMARK(bm_byte_swap)->Name("deserialize/byte_swap")->Arg(2)->Arg(4)->Arg(8)->UseRealTime();
BENCHMARK(bm_convert)
    ->Name("deserialize/convert")
    ->Args({static_cast<int>(dtype::float16), static_cast<int>(dtype::float32)})
    ->Args({static_cast<int>(dtype::bfloat16), static_cast<int>(dtype::float32)})
    ->Args({static_cast<int>(dtype::float64), static_cast<int>(dtype::float32)})
    ->Args({static_cast<int>(dtype::float32), static_cast<int>(dtype::float16)})
    ->Args({static_cast<int>(dtype::float32), static_cast<int>(dtype::bfloat16)})
    ->Args({static_cast<int>(dtype::float32), static_cast<int>(dtype::float64)})
    ->UseRealTime();
BENCHMARK(bm_fortran_to_c)->Name("deserialize/fortran_to_c_2d")->UseRealTime();

}  // namespace
