// The baseline of bench/many_files_bench.py --cold: many whole files read through one io_uring
// at a fixed queue depth, as fio's io_uring engine would, with no library in the way. Each file
// takes the four steps ferry's reader takes (statx, openat, read until its end, close), each one
// request; --depth files are in flight at once, each on its own buffer (reused, never handed
// out). Prints one JSON line: files, bytes, seconds, files_per_s, depth.
//
//   ferry_uring_files --depth 16 --list FILE     (FILE: one path a line)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <liburing.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

enum class step { stat, open, read, close };

struct slot {
    std::size_t file = 0;
    step at = step::stat;
    struct statx sx {};
    int fd = -1;
    std::size_t done = 0;
    std::vector<char> buffer;
};

[[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "ferry_uring_files: %s\n", what.c_str());
    std::exit(1);
}

class reader {
public:
    reader(std::vector<std::string> paths, unsigned depth) : paths_(std::move(paths)), slots_(depth) {
        if (int rc = io_uring_queue_init(depth, &ring_, 0); rc < 0)
            fail(std::string("io_uring_queue_init: ") + std::strerror(-rc));
    }
    ~reader() { io_uring_queue_exit(&ring_); }

    std::size_t run() {
        std::size_t in_flight = 0;
        for (auto& s : slots_) in_flight += start_next(s);
        io_uring_submit(&ring_);
        while (in_flight > 0) {
            io_uring_cqe* cqe = nullptr;
            if (int rc = io_uring_wait_cqe(&ring_, &cqe); rc < 0) fail(std::string("wait: ") + std::strerror(-rc));
            auto* s = static_cast<slot*>(io_uring_cqe_get_data(cqe));
            const int res = cqe->res;
            io_uring_cqe_seen(&ring_, cqe);
            if (!advance(*s, res) && !start_next(*s)) --in_flight;  // finished, and no file left for it
            io_uring_submit(&ring_);
        }
        return bytes_;
    }

private:
    // Starts the slot's next file; false when none is left.
    bool start_next(slot& s) {
        if (next_ >= paths_.size()) return false;
        s.file = next_++;
        s.at = step::stat;
        s.done = 0;
        auto* sqe = sqe_for(s);
        io_uring_prep_statx(sqe, AT_FDCWD, paths_[s.file].c_str(), 0, STATX_SIZE, &s.sx);
        return true;
    }

    io_uring_sqe* sqe_for(slot& s) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (!sqe) fail("no free submission entry");
        io_uring_sqe_set_data(sqe, &s);
        return sqe;
    }

    void queue_read(slot& s) {
        const std::size_t left = std::min<std::size_t>(s.sx.stx_size - s.done, std::size_t{1} << 30);
        io_uring_prep_read(sqe_for(s), s.fd, s.buffer.data() + s.done, static_cast<unsigned>(left), s.done);
    }

    // Takes one completion of the slot's file; false when the file is finished.
    bool advance(slot& s, int res) {
        const std::string& path = paths_[s.file];
        if (res < 0) fail(path + ": " + std::strerror(-res));
        switch (s.at) {
        case step::stat:
            s.at = step::open;
            if (s.buffer.size() < s.sx.stx_size) s.buffer.resize(s.sx.stx_size);
            io_uring_prep_openat(sqe_for(s), AT_FDCWD, path.c_str(), O_RDONLY | O_CLOEXEC, 0);
            return true;
        case step::open:
            s.fd = res;
            s.at = step::read;
            if (s.sx.stx_size == 0) break;
            queue_read(s);
            return true;
        case step::read:
            if (res == 0) fail(path + ": ended before its size");
            s.done += static_cast<std::size_t>(res);
            if (s.done < s.sx.stx_size) {
                queue_read(s);
                return true;
            }
            break;
        case step::close:
            bytes_ += s.sx.stx_size;
            return false;
        }
        s.at = step::close;
        io_uring_prep_close(sqe_for(s), s.fd);
        return true;
    }

    std::vector<std::string> paths_;
    std::vector<slot> slots_;
    io_uring ring_{};
    std::size_t next_ = 0;
    std::size_t bytes_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
    unsigned depth = 16;
    std::string list;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--depth" && i + 1 < argc) {
            depth = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
        } else if (arg == "--list" && i + 1 < argc) {
            list = argv[++i];
        } else {
            fail("usage: ferry_uring_files --depth N --list FILE (unknown argument " + arg + ")");
        }
    }
    if (depth == 0 || depth > 4096) fail("--depth must be 1-4096");
    std::ifstream in(list);
    if (!in) fail("--list " + list + ": cannot be read");
    std::vector<std::string> paths;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) paths.push_back(line);
    if (paths.empty()) fail("--list " + list + ": no paths");
    const std::size_t n = paths.size();
    reader r(std::move(paths), depth);
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t bytes = r.run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"files\": %zu, \"bytes\": %zu, \"seconds\": %.6f, \"files_per_s\": %.1f, \"depth\": %u}\n", n, bytes,
                s, static_cast<double>(n) / s, depth);
    return 0;
}
