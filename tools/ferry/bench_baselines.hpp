// ferry bench's reference measurements and their set-up: the page cache emptied or filled, the
// ceilings (parallel pread/pwrite of the bare file), the naive path (what cupy.fromfile does),
// and the generated input file.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry::cli::bench {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t);

/// Writes back and drops `path` from the page cache (a cold read follows).
void evict(const std::string& path);

// Runs body() on n threads and joins every one; the first exception a body threw (or starting
// a thread threw) is rethrown here: an exception escaping a thread would end the process.
template <class Body>
void on_threads(std::size_t n, Body body) {
    std::vector<std::thread> ts;
    std::mutex m;
    std::exception_ptr first;
    auto keep = [&](std::exception_ptr e) {
        std::lock_guard lock(m);
        if (!first) first = e;
    };
    try {
        for (std::size_t t = 0; t < n; ++t)
            ts.emplace_back([&] {
                try {
                    body();
                } catch (...) {
                    keep(std::current_exception());
                }
            });
    } catch (...) {
        keep(std::current_exception());
    }
    for (auto& t : ts) t.join();
    if (first) std::rethrow_exception(first);
}

/// Reads the whole file once so that a hot measurement starts from the page cache.
void warm(const std::string& path, std::uint64_t size, std::size_t threads);

/// The storage / page-cache ceiling: plain parallel pread (or pwrite) of 4 MiB chunks.
double raw_parallel_io(const std::string& path, char* mem, std::uint64_t size, std::size_t threads, bool is_write);

/// What cupy.fromfile does: one thread reads into pageable memory, then one copy to the GPU.
double naive(const std::string& path, void* device_mem, std::uint64_t size);

/// Writes `size` bytes of random-looking data (no two 64 MiB blocks alike) to `path`.
void generate(const std::string& path, std::uint64_t size);

}  // namespace ferry::cli::bench
