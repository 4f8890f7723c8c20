// One measurement for bench/probes/engine_ab.sh, built against each engine's public API (which the
// old and the new engine share): read a file into GPU memory, or write GPU memory to a file and
// fsync it. Prints seconds and GB/s of the best of `repeat` runs on one line.
#include <ferry/ferry.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s read|write FILE BYTES REPEAT\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[1], path = argv[2];
    const std::size_t n = std::strtoull(argv[3], nullptr, 10);
    const int repeat = std::atoi(argv[4]);
    const bool gpu = ferry::cuda_device_count() > 0;
    ferry::device_buffer dev;
    std::vector<char> host;  // without a GPU (a dry run of the script): pageable host memory
    void* mem = nullptr;
    if (gpu) {
        dev = ferry::device_buffer(n);
        mem = dev.data();
    } else {
        host.resize(n);
        mem = host.data();
    }
    double best = 1e30;
    for (int i = 0; i < repeat; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        if (mode == "read") {
            ferry::file f(path);
            f.read(mem, n, 0);
        } else {
            ferry::file f(path, ferry::open_mode::write);
            f.write(mem, n, 0);
            f.sync();
            f.close();
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s < best) best = s;
    }
    std::printf("%.4f %.2f\n", best, static_cast<double>(n) / best / 1e9);
    return 0;
}
