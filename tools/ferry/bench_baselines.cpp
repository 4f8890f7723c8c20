#include "bench_baselines.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>

#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/memory.hpp"

namespace ferry::cli::bench {

double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

void evict(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw system_error(errno, "cannot open", {path});
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

// Reads the whole file once so that a hot measurement starts from the page cache.
void warm(const std::string& path, std::uint64_t size, std::size_t threads) {
    std::atomic<std::uint64_t> next{0};
    on_threads(threads, [&] {
        int fd = ::open(path.c_str(), O_RDONLY);
        if (fd < 0) return;
        std::vector<char> buf(4 << 20);
        for (;;) {
            std::uint64_t off = next.fetch_add(buf.size());
            if (off >= size) break;
            if (::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off)) < 0) break;
        }
        ::close(fd);
    });
}

// The storage / page-cache ceiling: plain parallel pread of 4 MiB chunks into host memory.
double raw_parallel_io(const std::string& path, char* mem, std::uint64_t size, std::size_t threads, bool is_write) {
    int fd = ::open(path.c_str(), is_write ? (O_WRONLY | O_CREAT) : O_RDONLY, 0644);
    if (fd < 0) throw system_error(errno, "cannot open", {path});
    std::atomic<std::uint64_t> next{0};
    std::atomic<int> failed{0};
    const std::uint64_t chunk = 4 << 20;
    auto t0 = clock::now();
    on_threads(threads, [&] {
            for (;;) {
                std::uint64_t off = next.fetch_add(chunk);
                if (off >= size) break;
                std::size_t len = static_cast<std::size_t>(std::min(chunk, size - off));
                std::size_t done = 0;
                while (done < len) {
                    ssize_t r = is_write ? ::pwrite(fd, mem + off + done, len - done, static_cast<off_t>(off + done))
                                         : ::pread(fd, mem + off + done, len - done, static_cast<off_t>(off + done));
                    if (r <= 0) {
                        if (r < 0 && errno == EINTR) continue;
                        failed = errno ? errno : EIO;
                        return;
                    }
                    done += static_cast<std::size_t>(r);
                }
            }
        });
    double s = seconds_since(t0);
    ::close(fd);
    if (failed) throw system_error(failed, is_write ? "pwrite failed" : "pread failed", {path});
    return s;
}

// What cupy.fromfile does: one thread reads into pageable memory, then one copy to the GPU.
double naive(const std::string& path, void* device_mem, std::uint64_t size) {
    auto t0 = clock::now();
    std::unique_ptr<char[]> host(new char[size]);  // uninitialised, as numpy allocates
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw system_error(errno, "cannot open", {path});
    std::uint64_t done = 0;
    while (done < size) {
        ssize_t r = ::read(fd, host.get() + done, std::min<std::uint64_t>(size - done, 1u << 30));
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            ::close(fd);
            throw system_error(r < 0 ? errno : EIO, "read failed", {path});
        }
        done += static_cast<std::uint64_t>(r);
    }
    ::close(fd);
    if (device_mem) copy_memory(device_mem, host.get(), size);
    return seconds_since(t0);
}

void generate(const std::string& path, std::uint64_t size) {
    std::vector<std::uint64_t> block((64u << 20) / 8);
    std::mt19937_64 rng(42);
    for (auto& v : block) v = rng();
    ferry::file f(path, open_mode::write);
    for (std::uint64_t off = 0; off < size; off += block.size() * 8) {
        std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(block.size() * 8, size - off));
        block[0] = off;  // no two blocks alike
        f.write(block.data(), len, off);
    }
    f.close();
}

}  // namespace ferry::cli::bench
