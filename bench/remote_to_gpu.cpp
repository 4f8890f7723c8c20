// ferry_remote_bench URL (remote_to_gpu.cpp; not a *_bench.cpp, which the micro-benchmarks
// glob): reads a remote object (http://, https://, s3://) into GPU memory (or host memory) with
// the planned concurrency and range size, and prints the rate. Two ways, each printed:
//   engine  one ferry::file read of the whole object: the engine's workers, the staged mover
//           streaming each ranged GET through pinned buffers to the GPU (what `ferry load`,
//           fromfile and checkpoint loads do);
//   raw     (--raw) the remote source alone: each thread owns a pinned buffer, a ranged GET
//           lands there, then a copy moves it to its place (no overlap), as in earlier runs.
// Used by bench/remote_bench.sh.
//
//   ferry_remote_bench URL [--device cuda|host] [--threads N] [--range BYTES] [--repeat R] [--raw]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/registry.hpp"
#include "backend/s3/s3_source.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/memory.hpp"
#include "ferry/settings.hpp"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s URL [--device cuda|host] [--threads N] [--range BYTES] [--repeat R]\n", argv[0]);
        return 2;
    }
    std::string url = argv[1], device = ferry::cuda_device_count() > 0 ? "cuda" : "host";
    ferry::settings s = ferry::settings::from_environment();
    int repeat = 3;
    bool raw = false;
    for (int i = 2; i < argc; ++i) {
        std::string k = argv[i];
        if (k == "--raw") {
            raw = true;
            continue;
        }
        if (i + 1 >= argc) break;
        std::string v = argv[++i];
        if (k == "--device") device = v;
        else if (k == "--threads") s.remote_concurrency = s.threads = std::stoul(v);
        else if (k == "--range") s.remote_range_size = ferry::parse_size("--range", v);
        else if (k == "--repeat") repeat = std::stoi(v);
    }
    s = s.resolved();
    try {
        std::unique_ptr<ferry::detail::source> src =
            ferry::detail::open_source(ferry::detail::location(url), ferry::open_mode::read, s);
        const std::uint64_t size = src->size();
        const std::size_t range = s.remote_range_size, threads = s.remote_concurrency;
        bool gpu = device == "cuda";
        ferry::device_buffer dev;
        std::vector<char> host;
        if (gpu) dev = ferry::device_buffer(size);
        else host.resize(size);
        std::vector<ferry::pinned_buffer> staging;
        if (gpu)
            for (std::size_t t = 0; t < threads; ++t) staging.emplace_back(range);
        double best = 0;
        if (!raw) {
            // The engine's way: one request, split and staged by the workers.
            ferry::file f(url, ferry::open_mode::read, s);
            char* into = gpu ? static_cast<char*>(dev.data()) : host.data();
            for (int r = 0; r < repeat; ++r) {
                auto t0 = std::chrono::steady_clock::now();
                f.read(into, size, 0);
                double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                double gbps = static_cast<double>(size) / sec / 1e9;
                best = std::max(best, gbps);
                std::printf("run %d (engine): %.3f s, %.2f GB/s\n", r + 1, sec, gbps);
            }
            std::printf("RESULT mode=engine device=%s bytes=%llu threads=%zu range=%zu staging=%zu best_GBps=%.3f\n",
                        device.c_str(), static_cast<unsigned long long>(size), s.threads, s.remote_range_size,
                        s.staging_buffer_size, best);
            return 0;
        }
        for (int r = 0; r < repeat; ++r) {
            std::atomic<std::uint64_t> next{0};
            std::atomic<bool> failed{false};
            std::string failure;
            auto t0 = std::chrono::steady_clock::now();
            std::vector<std::thread> pool;
            for (std::size_t t = 0; t < threads; ++t)
                pool.emplace_back([&, t] {
                    try {
                        for (std::uint64_t off; !failed && (off = next.fetch_add(range)) < size;) {
                            std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(range, size - off));
                            if (gpu) {
                                char* buf = static_cast<char*>(staging[t].data());
                                src->read(buf, n, off, {});
                                ferry::copy_memory(static_cast<char*>(dev.data()) + off, buf, n);
                            } else {
                                src->read(host.data() + off, n, off, {});
                            }
                        }
                    } catch (const std::exception& e) {
                        if (!failed.exchange(true)) failure = e.what();
                    }
                });
            for (auto& th : pool) th.join();
            if (failed) throw ferry::error(failure);
            double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            double gbps = static_cast<double>(size) / sec / 1e9;
            best = std::max(best, gbps);
            std::printf("run %d: %.3f s, %.2f GB/s\n", r + 1, sec, gbps);
        }
        std::printf("RESULT mode=raw device=%s bytes=%llu threads=%zu range=%zu best_GBps=%.3f\n", device.c_str(),
                    static_cast<unsigned long long>(size), threads, range, best);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ferry_remote_bench: %s\n", e.what());
        return 1;
    }
}
