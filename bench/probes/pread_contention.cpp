// Small reads from the page cache on many threads: preads through one descriptor shared by all
// of them (as a ferry::file's workers share its source's), through one opened by each, and
// through the shared one with POSIX_FADV_RANDOM; and copies out of a read-only mapping of the
// file, either one mapping per group of rows (about 2 MiB of the file, as a worker's group of
// a lane chunk; with MAP_POPULATE or faulted in) or one mapping of the whole file shared by the
// threads (mapped and unmapped inside the timed run, one pass). Each thread reads every other
// `seg`-byte piece of its own stretch of FILE twice (row segments of a half slice, one
// page-cache pass first).
//
//     ferry_pread_contention FILE SEG THREADS        (FILE in the page cache: cat FILE >/dev/null)
//
// Prints the wall time per read and the rate of each arrangement.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

enum class arrangement { shared, per_thread, shared_random, map_group, map_group_populate, map_whole };

// The file span one mapping of a group covers (map_group*): a worker's 1 MiB of half rows.
constexpr off_t group_span = 2 << 20;

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
    const off_t page = ::sysconf(_SC_PAGESIZE);
    auto t0 = std::chrono::steady_clock::now();
    char* whole = nullptr;
    if (how == arrangement::map_whole) {
        void* m = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_SHARED, shared_fd, 0);
        if (m == MAP_FAILED) return {0, 0, false};
        whole = static_cast<char*>(m);
    }
    const bool mapped = how == arrangement::map_group || how == arrangement::map_group_populate;
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
            const off_t step = 2 * static_cast<off_t>(seg);
            for (int pass = 0; pass < 2 && mapped; ++pass)
                for (off_t g = first; g + step <= first + stretch; g += group_span) {
                    // One mapping per group: its page-aligned span, its rows copied out, unmapped.
                    const off_t end = std::min(g + group_span, first + stretch);
                    const off_t lo = g / page * page;
                    const std::size_t len = static_cast<std::size_t>(end - lo);
                    const int flags = MAP_SHARED | (how == arrangement::map_group_populate ? MAP_POPULATE : 0);
                    void* m = ::mmap(nullptr, len, PROT_READ, flags, fd, lo);
                    if (m == MAP_FAILED) {
                        failed[static_cast<std::size_t>(id)] = 1;
                        break;
                    }
                    for (off_t o = g; o + static_cast<off_t>(seg) <= end; o += step, ++n)
                        std::memcpy(buf.data() + (n * seg) % (buf.size() - seg), static_cast<char*>(m) + (o - lo), seg);
                    ::munmap(m, len);
                }
            // One pass: each page is faulted in once, as in one load (the mapping is the run's).
            for (int pass = 0; pass < 1 && whole; ++pass)
                for (off_t o = first; o + step <= first + stretch; o += step, ++n)
                    std::memcpy(buf.data() + (n * seg) % (buf.size() - seg), whole + o, seg);
            for (int pass = 0; pass < 2 && !mapped && !whole; ++pass)
                for (off_t o = first; o + step <= first + stretch; o += step) {
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
    if (whole) ::munmap(whole, static_cast<std::size_t>(size));
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
                {arrangement::shared_random, "shared, POSIX_FADV_RANDOM"},
                {arrangement::map_group, "a mapping per 2 MiB group"},
                {arrangement::map_group_populate, "the same, MAP_POPULATE"},
                {arrangement::map_whole, "one mapping of the file"}};
    for (const auto& row : rows) {
        ::posix_fadvise(fd, 0, 0, row.how == arrangement::shared_random ? POSIX_FADV_RANDOM : POSIX_FADV_NORMAL);
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
