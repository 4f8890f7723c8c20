// A hot file to GPU memory through one ring of pinned buffers driven by a plain thread, against
// the pinned copy ceiling: whether a staging pipeline whose copies are issued the moment their
// reads end, with reads running as far ahead as the ring allows, gets closer to the ceiling than
// the stream lanes (whose reads are started and waited for by CUDA host functions, which CUDA
// runs one at a time).
//
// The ring has B buffers of S bytes. T workers read each chunk in pieces of P bytes (pread into
// the chunk's buffer); the driver waits for chunk c's pieces, queues its cudaMemcpyAsync on one
// stream, records an event, and starts the reads of chunk c + B - 1 into the buffer of chunk
// c - 1 once that chunk's copy is done. So up to B - 1 chunks are read while one or two copies
// are queued.
//
//     ferry_ring_probe FILE [BxS:P ...] [--copy pread|map|map-nt]   e.g. 8x8M:1M 16x1M:256K (FILE hot)
//
// --copy says how a piece gets from the page cache into the ring: pread (the kernel's copy, as in
// the engine), map (memcpy out of a read-only mapping of the file made inside each timed run,
// each piece populated with MADV_POPULATE_READ first), or map-nt (the same with non-temporal
// AVX2 stores, which write the ring without reading its lines into the CPU caches first). Each
// run's mapping is made and removed inside the timed run.
//
// Prints GB/s per ring, best of --repeat (3) after one warm pass, and the ceiling: one copy of
// the file's size from one pinned allocation into the same device memory.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "ring_probe: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

std::size_t parse_size(const std::string& s) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    switch (*end) {
        case 'K': return static_cast<std::size_t>(v * 1024);
        case 'M': return static_cast<std::size_t>(v * 1024 * 1024);
        case 'G': return static_cast<std::size_t>(v * 1024 * 1024 * 1024);
        default: return static_cast<std::size_t>(v);
    }
}

class pool {
public:
    explicit pool(int n) {
        for (int i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
    }
    ~pool() {
        {
            std::lock_guard l(m_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }
    void submit(std::function<void()> f) {
        {
            std::lock_guard l(m_);
            q_.push_back(std::move(f));
        }
        cv_.notify_one();
    }

private:
    void loop() {
        for (;;) {
            std::function<void()> f;
            {
                std::unique_lock l(m_);
                cv_.wait(l, [&] { return stop_ || !q_.empty(); });
                if (q_.empty()) return;
                f = std::move(q_.front());
                q_.pop_front();
            }
            f();
        }
    }
    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> q_;
    std::vector<std::thread> threads_;
    bool stop_ = false;
};

enum class copy_mode { pread, map, map_nt };

// Non-temporal copy of n bytes to a 32-byte aligned dst.
__attribute__((target("avx2"))) void copy_nt(char* dst, const char* src, std::size_t n) {
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
        __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
        __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
        __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
        _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
    }
    _mm_sfence();
    if (i < n) std::memcpy(dst + i, src + i, n - i);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

struct ring_shape {
    std::size_t buffers, size, piece;
    std::string text;
};

double run_ring(int fd, std::size_t n, char* dst, char* ring, const ring_shape& r, pool& workers,
                cudaStream_t stream, std::vector<cudaEvent_t>& events, bool& ok, copy_mode mode) {
    auto t0 = std::chrono::steady_clock::now();
    const char* map = nullptr;
    if (mode != copy_mode::pread) {
        void* m = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            std::perror("ring_probe: mmap");
            std::exit(1);
        }
        map = static_cast<const char*>(m);
    }
    const std::size_t chunks = (n + r.size - 1) / r.size;
    std::vector<std::atomic<int>> left(chunks);
    std::atomic<bool> failed{false};
    std::atomic<std::size_t> running{0};  // tasks not yet past their last touch of this frame
    auto start_chunk = [&](std::size_t c) {
        char* buf = ring + (c % r.buffers) * r.size;
        std::size_t off = c * r.size, len = std::min(r.size, n - off);
        int pieces = static_cast<int>((len + r.piece - 1) / r.piece);
        left[c].store(pieces);
        running += static_cast<std::size_t>(pieces);
        for (int p = 0; p < pieces; ++p) {
            workers.submit([&, c, buf, off, len, p] {
                std::size_t at = static_cast<std::size_t>(p) * r.piece, m = std::min(r.piece, len - at);
                if (mode != copy_mode::pread) {
                    const char* src = map + off + at;
                    // madvise takes a page-aligned start: round the piece's start down.
                    std::size_t lead = (off + at) % static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
                    if (::madvise(const_cast<char*>(src - lead), m + lead, MADV_POPULATE_READ) != 0) failed = true;
                    if (mode == copy_mode::map_nt) copy_nt(buf + at, src, m);
                    else std::memcpy(buf + at, src, m);
                    m = 0;
                }
                while (m > 0) {
                    ssize_t got = ::pread(fd, buf + at, m, static_cast<off_t>(off + at));
                    if (got <= 0) {
                        failed = true;
                        break;
                    }
                    at += static_cast<std::size_t>(got);
                    m -= static_cast<std::size_t>(got);
                }
                if (left[c].fetch_sub(1) == 1) left[c].notify_one();
                running.fetch_sub(1);
            });
        }
    };
    for (std::size_t c = 0; c + 1 < r.buffers && c < chunks; ++c) start_chunk(c);
    for (std::size_t c = 0; c < chunks; ++c) {
        for (int v = left[c].load(); v != 0; v = left[c].load()) left[c].wait(v);
        std::size_t off = c * r.size, len = std::min(r.size, n - off);
        check(cudaMemcpyAsync(dst + off, ring + (c % r.buffers) * r.size, len, cudaMemcpyHostToDevice, stream), "copy");
        check(cudaEventRecord(events[c % r.buffers], stream), "record");
        std::size_t k = c + r.buffers - 1;
        if (k < chunks) {
            if (c > 0) check(cudaEventSynchronize(events[(c - 1) % r.buffers]), "event");
            start_chunk(k);
        }
    }
    check(cudaStreamSynchronize(stream), "sync");
    while (running.load() != 0) std::this_thread::yield();
    if (map != nullptr) ::munmap(const_cast<char*>(map), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ok = !failed;
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: ferry_ring_probe FILE [BxS:P ...] [--threads T] [--repeat R] [--copy pread|map|map-nt]\n");
        return 2;
    }
    const char* path = argv[1];
    std::vector<ring_shape> shapes;
    int threads = 16, repeat = 3;
    copy_mode mode = copy_mode::pread;
    std::string mode_text = "pread";
    for (int i = 2; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (a == "--repeat" && i + 1 < argc) repeat = std::atoi(argv[++i]);
        else if (a == "--copy" && i + 1 < argc) {
            mode_text = argv[++i];
            if (mode_text == "pread") mode = copy_mode::pread;
            else if (mode_text == "map") mode = copy_mode::map;
            else if (mode_text == "map-nt" && __builtin_cpu_supports("avx2")) mode = copy_mode::map_nt;
            else {
                std::fprintf(stderr, "ring_probe: --copy %s is not pread, map or map-nt (map-nt needs AVX2)\n", mode_text.c_str());
                return 2;
            }
        }
        else {
            auto x = a.find('x'), colon = a.find(':');
            if (x == std::string::npos || colon == std::string::npos) {
                std::fprintf(stderr, "ring_probe: ring shape %s is not BxS:P\n", a.c_str());
                return 2;
            }
            shapes.push_back({std::stoul(a.substr(0, x)), parse_size(a.substr(x + 1, colon - x - 1)),
                              parse_size(a.substr(colon + 1)), a});
        }
    }
    if (shapes.empty()) shapes = {{8, 8 << 20, 1 << 20, "8x8M:1M"}, {16, 4 << 20, 1 << 20, "16x4M:1M"}};
    int fd = ::open(path, O_RDONLY);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
        std::perror(path);
        return 1;
    }
    const std::size_t n = static_cast<std::size_t>(st.st_size);
    char* dst = nullptr;
    check(cudaMalloc(reinterpret_cast<void**>(&dst), n), "cudaMalloc");
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    pool workers(threads);
    std::size_t most = 0;
    for (auto& s : shapes) most = std::max(most, s.buffers * s.size);
    std::vector<cudaEvent_t> events(64);
    for (auto& e : events) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
    for (auto& s : shapes)
        if (s.buffers > events.size() || s.buffers < 2 || s.piece == 0 || s.size == 0) {
            std::fprintf(stderr, "ring_probe: ring %s: 2 to 64 buffers, sizes above 0\n", s.text.c_str());
            return 2;
        }
    char* ring = nullptr;
    check(cudaHostAlloc(reinterpret_cast<void**>(&ring), most, cudaHostAllocDefault), "cudaHostAlloc");
    std::memset(ring, 0, most);
    std::printf("| ring (buffers x size : piece), copy | staging | GB/s, best of %d | runs |\n| --- | --- | --- | --- |\n", repeat);
    bool ok = true;
    run_ring(fd, n, dst, ring, shapes[0], workers, stream, events, ok, mode);  // warm: every page of dst
    for (auto& s : shapes) {
        double best = 1e30;
        std::string runs;
        for (int i = 0; i < repeat; ++i) {
            double t = run_ring(fd, n, dst, ring, s, workers, stream, events, ok, mode);
            best = std::min(best, t);
            runs += std::to_string(static_cast<int>(n / t / 1e7) / 100.0).substr(0, 5) + " ";
        }
        std::printf("| %s, %s | %zu MiB | %.2f | %s|\n", s.text.c_str(), mode_text.c_str(), s.buffers * s.size >> 20, n / best / 1e9, runs.c_str());
        std::fflush(stdout);
    }
    // Byte check of the last ring run's destination against the file, 1 MiB at 16 places.
    std::vector<char> a(1 << 20), b(1 << 20);
    for (int i = 0; i < 16 && ok; ++i) {
        std::size_t off = (n - a.size()) / 15 * static_cast<std::size_t>(i);
        check(cudaMemcpy(a.data(), dst + off, a.size(), cudaMemcpyDeviceToHost), "check copy");
        if (::pread(fd, b.data(), b.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(b.size()) ||
            std::memcmp(a.data(), b.data(), a.size()) != 0)
            ok = false;
    }
    check(cudaFreeHost(ring), "cudaFreeHost");
    char* pinned = nullptr;
    check(cudaHostAlloc(reinterpret_cast<void**>(&pinned), n, cudaHostAllocDefault), "cudaHostAlloc");
    std::memset(pinned, 1, n);
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        check(cudaMemcpyAsync(dst, pinned, n, cudaMemcpyHostToDevice, stream), "ceiling copy");
        check(cudaStreamSynchronize(stream), "sync");
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("| pinned host -> device copy (ceiling) | %zu MiB | %.2f | |\n", n >> 20, n / best / 1e9);
    std::printf("bytes %s\n", ok ? "exact" : "DIFFER");
    check(cudaFreeHost(pinned), "cudaFreeHost");
    check(cudaFree(dst), "cudaFree");
    ::close(fd);
    return ok ? 0 : 1;
}
