// Bandwidth of the deserialization kernels against a device-to-device copy of the same bytes on
// the same GPU, in one run. Bytes moved = bytes read + bytes written, for the copy too.
//   ferry_kernel_bandwidth [MiB per buffer, default 1024] [--json]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/deserialize_kernels.hpp"
#include "ferry/memory.hpp"

namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

// Median time in ms of `reps` runs of `fn` on `s`, after two warm-up runs.
double time_ms(cudaStream_t s, const std::function<void()>& fn, int reps = 15) {
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "event");
    check(cudaEventCreate(&b), "event");
    fn();
    fn();
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
        check(cudaEventRecord(a, s), "record");
        fn();
        check(cudaEventRecord(b, s), "record");
        check(cudaEventSynchronize(b), "sync");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, a, b), "elapsed");
        t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    if (ferry::cuda_device_count() == 0) {
        std::printf("no GPU: %s\n", ferry::cuda_unavailable_reason().c_str());
        return 0;
    }
    std::size_t mib = 1024;
    bool json = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--json") == 0) json = true;
        else mib = std::stoul(argv[i]);
    }
    const std::size_t bytes = mib << 20;
    ferry::device_buffer a(bytes), b(bytes);
    check(cudaMemset(a.data(), 0x3c, bytes), "memset");  // finite float16/32/64 bit patterns
    check(cudaMemset(b.data(), 0x3c, bytes), "memset");
    ferry::stream st;
    cudaStream_t s = st.get();

    struct result {
        std::string name;
        double gbps;
    };
    std::vector<result> rs;
    auto add = [&](const std::string& name, std::size_t moved, double ms) { rs.push_back({name, moved / ms / 1e6}); };

    add("copy device->device", 2 * bytes,
        time_ms(s, [&] { check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s), "copy"); }));
    for (std::size_t unit : {2, 4, 8}) {
        add("byte swap " + std::to_string(unit) + "-byte (in place)", 2 * bytes,
            time_ms(s, [&] { ferry::kernels::byte_swap(a.data(), bytes / unit, unit, 0, st.get()); }));
    }
    struct conv {
        ferry::dtype from, to;
        const char* name;
    };
    const conv convs[] = {{ferry::dtype::float16, ferry::dtype::float32, "float16 -> float32"},
                          {ferry::dtype::bfloat16, ferry::dtype::float32, "bfloat16 -> float32"},
                          {ferry::dtype::float64, ferry::dtype::float32, "float64 -> float32"},
                          {ferry::dtype::float32, ferry::dtype::float16, "float32 -> float16"},
                          {ferry::dtype::float32, ferry::dtype::bfloat16, "float32 -> bfloat16"}};
    for (const auto& c : convs) {
        std::size_t in = ferry::size_of(c.from), out = ferry::size_of(c.to);
        std::size_t count = bytes / std::max(in, out);
        add(std::string("convert ") + c.name, count * (in + out),
            time_ms(s, [&] { ferry::kernels::convert(a.data(), c.from, b.data(), c.to, count, 0, st.get()); }));
    }
    double copy = rs.front().gbps;
    if (json) {
        std::printf("{\"buffer_bytes\": %zu, \"results\": [", bytes);
        for (std::size_t i = 0; i < rs.size(); ++i)
            std::printf("%s{\"name\": \"%s\", \"gbps\": %.1f, \"vs_copy\": %.3f}", i ? ", " : "", rs[i].name.c_str(),
                        rs[i].gbps, rs[i].gbps / copy);
        std::printf("]}\n");
        return 0;
    }
    std::printf("%-36s %10s %8s   (%zu MiB buffers; bytes read + written)\n", "kernel", "GB/s", "vs copy", mib);
    for (const auto& r : rs) std::printf("%-36s %10.1f %7.2fx\n", r.name.c_str(), r.gbps, r.gbps / copy);
    return 0;
}
