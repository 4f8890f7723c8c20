// Entry point of ferry_microbench: every bench/*.cpp registers its benchmarks with BENCHMARK().
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
