// Registering a file once, and reading it into GPU memory by DMA from its page-cache pages.
//
// On the H200 machine a hot 8 GiB file registered in 0.23-0.34 s; `ferry bench --paths
// registered` then read it at 55.07 GB/s, the pinned copy ceiling, where the one-shot routes
// reach 0.90-0.95x of it (docs/benchmarks.md).
// Registering costs more than it saves for one load, so it is the caller's choice, for a file
// loaded again and again.
#include "backend/registered/registered_source.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>

#include "cuda/cuda_runtime.hpp"
#include "ferry/file.hpp"
#include "os/fork_safe_mutex.hpp"
#include "os/posix_io.hpp"
#include "os/sys.hpp"

namespace ferry::detail {
namespace {

fork_safe_mutex table_mutex;  // process-wide: a fork never leaves it taken in the child
std::vector<std::weak_ptr<registered_source>>& table() {
    static auto* t = new std::vector<std::weak_ptr<registered_source>>();  // lives to exit
    return *t;
}
std::atomic<std::size_t> live{0};       // registrations alive: lookups skip the table at 0
std::atomic<std::uint64_t> bytes_now{0};
std::atomic<std::uint64_t> limit{0};   // 0: not set, half the machine's memory

std::uint64_t default_limit() {
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 2 : 0;
}

std::string size_text(std::uint64_t n) {
    char b[32];
    if (n >= (1ull << 30)) std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(n) / (1ull << 30));
    else if (n >= (1ull << 20)) std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(n) / (1ull << 20));
    else std::snprintf(b, sizeof b, "%llu bytes", static_cast<unsigned long long>(n));
    return b;
}

bool same_time(const struct timespec& a, const struct timespec& b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

// The stream this thread's copies from registered pages go on: its own, non-blocking, so that
// work the caller queued on the legacy default stream neither waits for them nor holds them.
cudaStream_t thread_stream(int device, const io_context& where) {
    struct streams {
        std::vector<cudaStream_t> by_device;
        ~streams() {
            for (cudaStream_t s : by_device)
                if (s) cudaStreamDestroy(s);
        }
    };
    thread_local streams mine;
    if (static_cast<std::size_t>(device) >= mine.by_device.size()) mine.by_device.resize(device + 1, nullptr);
    cudaStream_t& s = mine.by_device[device];
    if (!s) cuda_check(FERRY_CUDA(cudaStreamCreateWithFlags, &s, cudaStreamNonBlocking), "cudaStreamCreate", where);
    return s;
}

}  // namespace

registered_source::registered_source(std::string path, owned_fd fd, const struct stat& st)
    : path_(std::move(path)), fd_(std::move(fd)), size_(static_cast<std::uint64_t>(st.st_size)), dev_(st.st_dev),
      ino_(st.st_ino), mtime_(st.st_mtim) {}

std::shared_ptr<registered_source> registered_source::create(const std::string& path) {
    if (!cuda_available()) throw cuda_error(cudaErrorNoDevice, "cannot register a file: " + cuda_unavailable_reason(), {path});
    owned_fd fd(sys::open(path.c_str(), O_RDONLY));
    if (!fd) throw system_error(errno, "cannot open the file to register", {path});
    struct stat st {};
    if (sys::fstat(fd.get(), &st) != 0) throw system_error(errno, "fstat failed", {path});
    if (!S_ISREG(st.st_mode)) throw usage_error("only a regular file can be registered: " + path);
    if (st.st_size == 0) throw usage_error("an empty file has nothing to register: " + path);
    {
        std::string changed;
        if (auto same = find_registration(fd.get(), changed)) return same;
    }
    const std::uint64_t n = static_cast<std::uint64_t>(st.st_size);
    const std::uint64_t cap = registration_limit();
    std::uint64_t held = bytes_now.load();
    do {
        if (held + n > cap)
            throw usage_error("registering " + path + " (" + size_text(n) + ") would pass the registration limit of " +
                              size_text(cap) + " (" + size_text(held) +
                              " registered now); set_registration_limit raises it");
    } while (!bytes_now.compare_exchange_weak(held, held + n));
    std::shared_ptr<registered_source> r;
    try {
        r.reset(new registered_source(path, std::move(fd), st));
    } catch (...) {
        bytes_now -= n;
        throw;
    }
    // From here the destructor gives back what was taken.
    int read_only = 0;
    int device = 0;
    cuda_check(FERRY_CUDA(cudaGetDevice, &device), "cudaGetDevice", {path});
    cuda_check(FERRY_CUDA(cudaDeviceGetAttribute, &read_only, cudaDevAttrHostRegisterReadOnlySupported, device),
               "cudaDeviceGetAttribute", {path});
    if (!read_only)
        throw cuda_error(cudaErrorNotSupported,
                         "this GPU or driver cannot register read-only host memory (cudaHostRegisterReadOnly), "
                         "which registering a file's page-cache pages needs",
                         {path});
    const auto t0 = std::chrono::steady_clock::now();
    void* m = sys::mmap_read_only(r->fd_.get(), n);
    if (m == MAP_FAILED) throw system_error(errno, "mmap of the file to register failed", {path});
    r->map_ = static_cast<char*>(m);
    // The registration pins each page, reading into the page cache what is not there yet.
    cuda_check(FERRY_CUDA(cudaHostRegister, r->map_, n, cudaHostRegisterPortable | cudaHostRegisterReadOnly),
               "cudaHostRegister of the file's pages", {path});
    r->registered_ = true;
    ++live;
    r->seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lock(table_mutex);
    auto& t = table();
    t.erase(std::remove_if(t.begin(), t.end(), [](const auto& w) { return w.expired(); }), t.end());
    t.push_back(r);
    return r;
}

registered_source::~registered_source() {
    if (registered_) {
        cudaHostUnregister(map_);
        --live;
    }
    if (map_) ::munmap(map_, size_);
    bytes_now -= size_;
}

source_traits registered_source::traits() const noexcept {
    source_traits t;
    t.device_dma = true;
    return t;
}

bool registered_source::same_file(const struct stat& st) const noexcept {
    return st.st_dev == dev_ && st.st_ino == ino_ && static_cast<std::uint64_t>(st.st_size) == size_ &&
           same_time(st.st_mtim, mtime_);
}

void registered_source::read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) {
    std::size_t got = pread_full(fd_.get(), dst, n, offset, where);
    if (got != n) throw end_of_file_error(where, offset + got);
}

void registered_source::read_device(void* base, std::size_t buffer_offset, std::size_t n, std::uint64_t offset,
                                    const io_context& where) {
    if (offset > size_ || n > size_ - offset) throw end_of_file_error(where, size_);
    int device = 0;
    cuda_check(FERRY_CUDA(cudaGetDevice, &device), "cudaGetDevice", where);
    cudaStream_t s = thread_stream(device, where);
    char* dst = static_cast<char*>(base) + buffer_offset;
    cuda_check(FERRY_CUDA(cudaMemcpyAsync, dst, map_ + offset, n, cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync from the registered file", where);
    cuda_check(FERRY_CUDA(cudaStreamSynchronize, s), "cudaStreamSynchronize", where);
}

std::shared_ptr<registered_source> find_registration(int fd, std::string& changed) {
    if (live.load(std::memory_order_relaxed) == 0) return nullptr;
    struct stat st {};
    if (sys::fstat(fd, &st) != 0) return nullptr;
    std::lock_guard lock(table_mutex);
    for (const auto& w : table()) {
        auto r = w.lock();
        if (!r || r->dev_ != st.st_dev || r->ino_ != st.st_ino) continue;
        if (r->same_file(st)) return r;
        changed = static_cast<std::uint64_t>(st.st_size) != r->size_
                      ? "its size changed since it was registered (" + std::to_string(r->size_) + " -> " +
                            std::to_string(st.st_size) + " bytes)"
                      : "it was modified since it was registered";
    }
    return nullptr;
}

void set_registration_limit(std::uint64_t bytes) { limit = bytes; }
std::uint64_t registration_limit() {
    std::uint64_t l = limit.load();
    return l ? l : default_limit();
}
std::uint64_t registered_bytes() { return bytes_now.load(); }

}  // namespace ferry::detail
