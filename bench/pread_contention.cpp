// Small preads from the page cache on many threads: one descriptor shared by all of them (as a
// ferry::file's workers share its source's), one opened by each, and the shared one with
// POSIX_FADV_RANDOM. Each thread reads every other `seg`-byte piece of its own stretch of
// FILE twice (row segments of a half slice, one page-cache pass first).
//
//     ferry_pread_contention FILE SEG THREADS        (FILE in the page cache: cat FILE >/dev/null)
//
// Prints the wall time per read and the rate of each arrangement.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

enum class arrangement { shared, per_thread, shared_random };

struct run_result {
    double seconds = 0;
    std::size_t reads = 0;
    bool ok = true;
};

run_result run(const char* path, int shared_fd, off_t size, std::size_t seg, int threads, arrangement how) {
    std::vector<std::thread> pool;
    std::vector<std::size_t> counts(static_cast<std::size_t>(threads), 0);
    std::vector<char> failed(static_cast<std::size_t>(threads), 0);
    const off_t stretch = size / threads;
    auto t0 = std::chrono::steady_clock::now();
    for (int id = 0; id < threads; ++id) {
        pool.emplace_back([&, id] {
            int fd = how == arrangement::per_thread ? ::open(path, O_RDONLY) : shared_fd;
            if (fd < 0) {
                failed[static_cast<std::size_t>(id)] = 1;
                return;
            }
            std::vector<char> buf(1 << 20);
            std::size_t n = 0;
            const off_t first = id * stretch;
            for (int pass = 0; pass < 2; ++pass)
                for (off_t o = first; o + 2 * static_cast<off_t>(seg) <= first + stretch; o += 2 * static_cast<off_t>(seg)) {
                    if (::pread(fd, buf.data() + (n * seg) % (buf.size() - seg), seg, o) != static_cast<ssize_t>(seg)) {
                        failed[static_cast<std::size_t>(id)] = 1;
                        break;
                    }
                    ++n;
                }
            counts[static_cast<std::size_t>(id)] = n;
            if (how == arrangement::per_thread) ::close(fd);
        });
    }
    for (auto& t : pool) t.join();
    run_result r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (std::size_t i = 0; i < counts.size(); ++i) {
        r.reads += counts[i];
        if (failed[i]) r.ok = false;
    }
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s FILE SEG THREADS\n", argv[0]);
        return 2;
    }
    const char* path = argv[1];
    const std::size_t seg = std::strtoull(argv[2], nullptr, 10);
    const int threads = std::atoi(argv[3]);
    if (seg == 0 || seg > (1u << 19) || threads < 1 || threads > 256) {
        std::fprintf(stderr, "SEG must be 1..524288 bytes and THREADS 1..256\n");
        return 2;
    }
    int fd = ::open(path, O_RDONLY);
    if (fd < 0) {
        std::perror(path);
        return 1;
    }
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (size < static_cast<off_t>(2 * seg) * threads) {
        std::fprintf(stderr, "%s: too small for %d threads of %zu-byte pieces\n", path, threads, seg);
        return 1;
    }
    const struct {
        arrangement how;
        const char* name;
    } rows[] = {{arrangement::shared, "one descriptor shared"},
                {arrangement::per_thread, "a descriptor per thread"},
                {arrangement::shared_random, "shared, POSIX_FADV_RANDOM"}};
    for (const auto& row : rows) {
        if (row.how == arrangement::shared_random) ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
        run_result r = run(path, fd, size, seg, threads, row.how);
        if (!r.ok) {
            std::fprintf(stderr, "%s: a read failed or was short\n", path);
            return 1;
        }
        std::printf("%-28s %zu-byte reads, %d threads: %6.0f ns a read (wall), %6.2f GB/s\n", row.name, seg,
                    threads, r.seconds / static_cast<double>(r.reads) * 1e9,
                    static_cast<double>(r.reads * seg) / r.seconds / 1e9);
    }
    ::close(fd);
    return 0;
}
