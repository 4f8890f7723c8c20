#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, ASan + UBSan, tests/fuzz/) and runs each for
# FUZZ_SECONDS (default 60) on a fresh corpus seeded from tests/data and tests/fuzz/seeds.
# Fails on the first target that finds a crash, a leak, a timeout or a memory blow-up; the
# input that did it is kept under $FUZZ_BUILD/artifacts/<target>/ (make it a regression vector
# in tests/data or tests/fuzz/regressions/<target>/).
#
#   FUZZ_SECONDS=10 scripts/fuzz.sh              every target for 10 s
#   FUZZ_TARGETS="npy_header_fuzz" scripts/fuzz.sh  one target
#   FUZZ_BUILD=build-fuzz JOBS=2                  where to build, how wide (and how many
#                                                 targets fuzz side by side)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD:-build-fuzz}
jobs=${JOBS:-2}
cxx=${FUZZ_CXX:-clang++}
cc=${FUZZ_CC:-clang}

command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (libFuzzer needs clang)" >&2; exit 1; }

# nvcc keeps g++ as its host compiler: the .cu sources are not fuzzed, and nvcc rejects some
# clang versions as a host compiler.
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CUDA_HOST_COMPILER="${FUZZ_CUDA_HOST_COMPILER:-g++}" \
  -DFERRY_BUILD_FUZZERS=ON -DFERRY_BUILD_PYTHON=OFF -DFERRY_SANITIZE= >/dev/null
cmake --build "$build" -j "$jobs" --target ferry_fuzzers
echo "fuzz: built in $(( $(date +%s) - start )) s"

targets=${FUZZ_TARGETS:-$(cd tests/fuzz && ls *_fuzz.cpp | sed 's/\.cpp$//')}
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

seed() {  # seed $target $dir: what the target starts from
    case $1 in
        npy_header_fuzz) cp tests/data/npy/*.npy "$2"/ ;;
        safetensors_header_fuzz) cp tests/data/safetensors/*.safetensors "$2"/ ;;
    esac
    if [ -d "tests/fuzz/seeds/$1" ]; then cp "tests/fuzz/seeds/$1"/* "$2"/; fi
    if [ -d "tests/fuzz/regressions/$1" ]; then cp "tests/fuzz/regressions/$1"/* "$2"/; fi
    return 0
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# One target: its regressions once, then FUZZ_SECONDS of fuzzing; its summary line in
# $work/$t.summary. Runs in the background beside another (each fuzzer is one process on one
# core: JOBS of them side by side take the time of one).
run_target() {
    local t=$1
    local bin="$build/tests/fuzz/$t"
    local corpus="$work/$t"
    local artifacts="$root/$build/artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    seed "$t" "$corpus"
    local dict=()
    [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
    echo "fuzz: $t for ${seconds} s ($(ls "$corpus" | wc -l) seeds)"
    local log="$work/$t.log"
    # The known regressions first, each once: a fixed bug must stay fixed.
    if [ -d "tests/fuzz/regressions/$t" ]; then
        "$bin" -runs=0 "tests/fuzz/regressions/$t"/* >"$log" 2>&1 || { cat "$log"; echo "fuzz: $t: a regression input fails again" >&2; return 1; }
    fi
    if ! "$bin" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$artifacts/" \
            "$corpus" >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz: $t FAILED; the input is in $artifacts/ (reproduce: $bin <input>)" >&2
        return 1
    fi
    local runs cov
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    echo "$t: ${runs:-?} executions, coverage ${cov:-?} edges, corpus $(ls "$corpus" | wc -l)" >"$work/$t.summary"
}

failed=0
running=0
for t in $targets; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
    [ "$failed" = 0 ] || break
    run_target "$t" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
[ "$failed" = 0 ] || { echo "fuzz: a target failed (above)" >&2; exit 1; }
summary=()
for t in $targets; do summary+=("$(cat "$work/$t.summary")"); done
echo "fuzz: all targets clean ($(( $(date +%s) - start )) s in all)"
printf '  %s\n' "${summary[@]}"
