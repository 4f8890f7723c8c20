// What a load pays besides the reads: allocations on its critical path and the first copy into
// fresh device memory (docs/benchmarks.md, "Allocation costs"). Not part of the build:
//   nvcc -O2 -arch=sm_90 -o /tmp/alloc_probe bench/probes/alloc_probe.cu && /tmp/alloc_probe
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <sys/mman.h>
#include <thread>
#include <vector>
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static void allocation_costs() {
    cudaFree(0);
    size_t n = 8ull << 30;
    for (int i = 0; i < 3; ++i) {
        void* p; double t0 = now(); cudaMalloc(&p, n); double t1 = now(); cudaFree(p); double t2 = now();
        std::printf("cudaMalloc 8GiB %.2f ms, cudaFree %.2f ms\n", (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    }
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (int i = 0; i < 3; ++i) {
        void* p; double t0 = now(); cudaMallocAsync(&p, n, s); double t1 = now(); cudaStreamSynchronize(s); double t2 = now();
        cudaFreeAsync(p, s); cudaStreamSynchronize(s); double t3 = now();
        std::printf("cudaMallocAsync 8GiB call %.2f ms, +sync %.2f ms, free+sync %.2f ms\n", (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3);
    }
    for (size_t mb : {2, 16, 128}) {
        void* p; double t0 = now(); cudaHostAlloc(&p, mb << 20, cudaHostAllocDefault); double t1 = now(); cudaFreeHost(p); double t2 = now();
        std::printf("cudaHostAlloc %zu MiB %.2f ms, free %.2f ms\n", mb, (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    }
    // Alternatives to cudaHostAlloc for 64 MiB of staging.
    const size_t m = 64ull << 20;
    for (int v = 0; v < 4; ++v) {
        double t0 = now();
        void* p = mmap(nullptr, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (v == 3 ? MAP_POPULATE : 0), -1, 0);
        if (v >= 1) madvise(p, m, MADV_HUGEPAGE);
        if (v == 1 || v == 2) std::memset(p, 0, m);
        double t1 = now();
        cudaError_t e = cudaHostRegister(p, m, cudaHostRegisterPortable);
        double t2 = now();
        cudaHostUnregister(p);
        double t3 = now();
        munmap(p, m);
        const char* names[] = {"mmap+register", "mmap+THP+memset+register", "same again", "mmap POPULATE+THP+register"};
        std::printf("%s 64 MiB: prepare %.2f ms, register %.2f ms (%s), unregister %.2f ms\n", names[v], (t1 - t0) * 1e3,
                    (t2 - t1) * 1e3, cudaGetErrorString(e), (t3 - t2) * 1e3);
    }
    {  // 8 threads, 8 MiB each, cudaHostAlloc in parallel
        std::vector<std::thread> ts; std::vector<void*> ps(8);
        double t0 = now();
        for (int i = 0; i < 8; ++i) ts.emplace_back([&, i] { cudaHostAlloc(&ps[i], 8 << 20, cudaHostAllocPortable); });
        for (auto& t : ts) t.join();
        double t1 = now();
        std::printf("cudaHostAlloc 8 x 8 MiB on 8 threads: %.2f ms\n", (t1 - t0) * 1e3);
        for (void* p : ps) cudaFreeHost(p);
    }
    // memset-touch check: first copy into fresh cudaMalloc memory vs reused
    void* h; cudaHostAlloc(&h, 1ull << 30, 0);
    for (int i = 0; i < 4; ++i) {
        void* p; cudaMalloc(&p, 1ull << 30); double t0 = now(); cudaMemcpy(p, h, 1ull << 30, cudaMemcpyHostToDevice); double t1 = now();
        cudaMemcpy(p, h, 1ull << 30, cudaMemcpyHostToDevice); double t2 = now();
        std::printf("1 GiB H2D into fresh cudaMalloc: first %.1f GB/s, second %.1f GB/s\n", 1.073741824 / (t1 - t0), 1.073741824 / (t2 - t1));
        cudaFree(p);
    }
    }

static void first_touch() {
    cudaFree(0);
    const size_t n = 1ull << 30;
    void* h; cudaHostAlloc(&h, n, 0);
    for (int i = 0; i < 3; ++i) {
        void* p; cudaMalloc(&p, n);
        double t0 = now(); cudaMemset(p, 0, n); cudaDeviceSynchronize(); double t1 = now();
        cudaMemcpy(p, h, n, cudaMemcpyHostToDevice); double t2 = now();
        std::printf("fresh 1 GiB: memset %.2f ms, then copy %.1f GB/s\n", (t1 - t0) * 1e3, n / (t2 - t1) / 1e9);
        cudaFree(p);
        cudaMalloc(&p, n);
        t0 = now(); cudaMemcpy(p, h, n, cudaMemcpyHostToDevice); t1 = now();
        std::printf("fresh 1 GiB: copy without memset %.1f GB/s\n", n / (t1 - t0) / 1e9);
        cudaFree(p);
    }
    // Pool that keeps freed memory: the second allocation reuses mapped pages.
    cudaMemPool_t pool; cudaDeviceGetDefaultMemPool(&pool, 0);
    unsigned long long keep = ~0ull; cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaStream_t s; cudaStreamCreate(&s);
    for (int i = 0; i < 3; ++i) {
        void* p; double t0 = now(); cudaMallocAsync(&p, n, s); cudaStreamSynchronize(s); double t1 = now();
        cudaMemcpyAsync(p, h, n, cudaMemcpyHostToDevice, s); cudaStreamSynchronize(s); double t2 = now();
        std::printf("pool 1 GiB #%d: alloc %.2f ms, copy %.1f GB/s\n", i, (t1 - t0) * 1e3, n / (t2 - t1) / 1e9);
        cudaFreeAsync(p, s); cudaStreamSynchronize(s);
    }
    // 8 MiB chunks: memset right before each chunk's copy, on the same stream.
    void* p; cudaMalloc(&p, n);
    double t0 = now();
    for (size_t off = 0; off < n; off += 8 << 20) {
        cudaMemsetAsync((char*)p + off, 0, 8 << 20, s);
        cudaMemcpyAsync((char*)p + off, (char*)h + off, 8 << 20, cudaMemcpyHostToDevice, s);
    }
    cudaStreamSynchronize(s); double t1 = now();
    std::printf("fresh 1 GiB, memset+copy per 8 MiB chunk: %.1f GB/s\n", n / (t1 - t0) / 1e9);
    cudaFree(p);
    }

int main() {
    allocation_costs();
    first_touch();
    return 0;
}
