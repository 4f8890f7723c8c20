// A whole checkpoint load through open_checkpoint then load_checkpoint, against
// open_and_load_checkpoint (the shards' reads issued once their headers are read, while the open
// still merges and checks them), taking turns on the same files, best of --rounds each.
//   ferry_open_load_probe DIR [rounds] [cuda]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ferry/checkpoint.hpp"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s DIR [rounds] [cuda]\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
    ferry::checkpoint_load_options o;
    if (argc > 3 && std::strcmp(argv[3], "cuda") == 0) o.where = ferry::placement::cuda(0);
    using clock = std::chrono::steady_clock;
    double apart = 1e9, together = 1e9, first_apart = 0, first_together = 0;
    std::size_t tensors = 0;
    for (int r = 0; r < rounds; ++r) {
        auto t0 = clock::now();
        {
            ferry::checkpoint c = ferry::open_checkpoint(dir);
            const double open = std::chrono::duration<double>(clock::now() - t0).count();
            auto l = ferry::load_checkpoint(c, o);
            const double s = std::chrono::duration<double>(clock::now() - t0).count();
            if (s < apart) apart = s, first_apart = open + l.stats.first_read_seconds;
            tensors = l.tensors.size();
        }
        t0 = clock::now();
        {
            auto l = ferry::open_and_load_checkpoint({dir}, o);
            const double s = std::chrono::duration<double>(clock::now() - t0).count();
            if (s < together) together = s, first_together = l.stats.first_read_seconds;
        }
    }
    std::printf("%zu tensors, %s, best of %d\n", tensors, o.where.on_gpu() ? "GPU" : "host", rounds);
    std::printf("open_checkpoint + load_checkpoint  %8.1f ms  (first read at %.1f ms)\n", apart * 1e3, first_apart * 1e3);
    std::printf("open_and_load_checkpoint           %8.1f ms  (first read at %.1f ms)\n", together * 1e3, first_together * 1e3);
    std::printf("ratio %.3f\n", apart / together);
}
