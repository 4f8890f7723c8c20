// Helpers shared by the tests: temporary directories, patterned files, GPU skip.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/dtype.hpp"
#include "ferry/memory.hpp"

namespace ferry {

// gtest prints dtypes by name (test listings, failed EXPECT_EQs), not as raw bytes. Every test
// file that prints a dtype includes this header: one printer for the whole binary.
inline void PrintTo(dtype t, std::ostream* os) { *os << to_string(t); }

}  // namespace ferry

namespace ferry::test {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class temp_dir {
public:
    explicit temp_dir(const std::string& base = "") {
        std::string root = base.empty() ? (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") : base;
        std::string tmpl = root + "/ferry-test-XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed in " + root);
        path_ = buf.data();
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::string& path() const { return path_; }
    std::string operator/(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

/// Threads whose exceptions reach the test: an exception escaping a thread body would
/// terminate the whole test binary. join() joins every thread and rethrows the first exception
/// a body threw; the destructor joins without rethrowing (a failing test unwinding).
class thread_group {
public:
    thread_group() = default;
    thread_group(const thread_group&) = delete;
    thread_group& operator=(const thread_group&) = delete;
    ~thread_group() {
        for (auto& t : threads_)
            if (t.joinable()) t.join();
    }

    template <class Body>
    void run(Body body) {
        threads_.emplace_back([this, body = std::move(body)]() mutable {
            try {
                body();
            } catch (...) {
                std::lock_guard lock(mutex_);
                if (!error_) error_ = std::current_exception();
            }
        });
    }

    void join() {
        for (auto& t : threads_)
            if (t.joinable()) t.join();
        threads_.clear();
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }

private:
    std::vector<std::thread> threads_;
    std::mutex mutex_;
    std::exception_ptr error_;
};

/// Deterministic bytes: byte i of a pattern with `seed`.
inline std::uint8_t pattern_byte(std::uint64_t i, std::uint32_t seed = 1) {
    std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(seed) << 32);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return static_cast<std::uint8_t>(x);
}

inline std::vector<std::uint8_t> pattern(std::size_t n, std::uint64_t from = 0, std::uint32_t seed = 1) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = pattern_byte(from + i, seed);
    return v;
}

inline void write_pattern_file(const std::string& path, std::size_t n, std::uint32_t seed = 1) {
    auto v = pattern(n, 0, seed);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n));
}

inline std::vector<std::uint8_t> read_whole(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

#define FERRY_REQUIRE_GPU()                                                              \
    do {                                                                                 \
        if (::ferry::cuda_device_count() == 0)                                           \
            GTEST_SKIP() << "needs a CUDA GPU: " << ::ferry::cuda_unavailable_reason(); \
    } while (0)

}  // namespace ferry::test
