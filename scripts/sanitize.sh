#!/usr/bin/env bash
# The host test suite under AddressSanitizer + UndefinedBehaviorSanitizer, then the thread-pool
# and concurrency tests under ThreadSanitizer; fails on any report. Tests that need a GPU skip
# (on a GPU machine they run too).
#
#   scripts/sanitize.sh            both (ASan+UBSan in build-asan, TSan in build-tsan)
#   scripts/sanitize.sh asan|tsan  one of them
#   JOBS=2 SANITIZE_CXX=g++ ASAN_BUILD=... TSAN_BUILD=...
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${JOBS:-2}
cxx=${SANITIZE_CXX:-g++}
what=${1:-all}

# The tests that exercise threads: the pool, every I/O path's concurrent conformance tests,
# ferry::file (retries, destruction with requests in flight), the staging pool, the
# reliability suite's stress and fault-injection tests, and the remote sources' shared state
# (the connection pool under many readers, credentials renewed while four links read at
# once). Not the fork tests: TSan cannot follow
# a forked child that starts threads (it kills it), which ferry's child then does.
tsan_tests='^(thread_pool|thread_pool_stress|staging_pool|engine|file|refresh_test|posix_worker_fd|registered_file)\.|^paths/(conformance|stream_order)\.|^fault_injection\.file_|^nginx_test\.many_threads'
# The TSan build compiles only the files that hold those tests (and what they link with);
# tsan_min is how many of them must run, so that a test moved to another file is not lost quietly.
tsan_files='io/staging_pool_test.cpp;io/engine_test.cpp;io/file_test.cpp;io/registered_file_test.cpp;io/conformance_test.cpp;io/stream_order_test.cpp;reliability/thread_pool_stress_test.cpp;reliability/fault_injection_test.cpp;backend/memory_source.cpp;backend/posix/posix_worker_fd_test.cpp;backend/s3/credential_refresh_test.cpp;backend/http/http_source_test.cpp'
tsan_min=147

# The sanitizer flags go in through CMAKE_<LANG>_FLAGS and the linker flags, not the
# FERRY_SANITIZE option: that option adds -fsanitize to every link step, the CUDA device-link
# step of libferry.so included, where nvcc hands it to gcc together with -c and the build
# fails. Host compile and link steps are all that need it.
# -O1 -g1 (line tables): what the sanitizers' reports need, at half the compile time of the
# release build's -O2 -g, which is most of this script's time on a 2-core machine.
build() {  # build DIR SANITIZERS [TEST_FILES]
    local dir=$1 san=$2 files=${3:-}
    local flags="-fsanitize=$san -fno-omit-frame-pointer -fno-sanitize-recover=all"
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
        -DFERRY_SANITIZE= -DFERRY_BUILD_PYTHON=OFF -DCMAKE_CXX_FLAGS="$flags" \
        -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$san" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=$san" \
        -DFERRY_TEST_FILES="$files" >/dev/null
    cmake --build "$dir" -j "$jobs" --target ferry_tests
}

# Each test in its own process (ctest); a sanitizer report makes the process exit non-zero.
run() {  # run DIR [ctest args...]
    local dir=$1; shift
    (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 900 "$@")
}

t0=$(date +%s)
if [ "$what" = all ] || [ "$what" = asan ]; then
    echo "sanitize: ASan + UBSan build"
    build "${ASAN_BUILD:-build-asan}" address,undefined
    t1=$(date +%s)
    echo "sanitize: whole host suite under ASan + UBSan"
    # The Python tests need the extension module, which is not built here (a sanitized
    # extension would need libasan preloaded into the interpreter). Nor does the install test:
    # its consumer program is built plain and cannot load a sanitized libferry.
    # protect_shadow_gap=0: the CUDA runtime maps memory where ASan would otherwise reserve it.
    ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:protect_shadow_gap=0:detect_stack_use_after_return=1:strict_init_order=1" \
    LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
        run "${ASAN_BUILD:-build-asan}" -E '^(python|install)\.'
    echo "sanitize: ASan + UBSan clean (build $(( t1 - t0 )) s, tests $(( $(date +%s) - t1 )) s)"
fi
if [ "$what" = all ] || [ "$what" = tsan ]; then
    t2=$(date +%s)
    echo "sanitize: TSan build"
    build "${TSAN_BUILD:-build-tsan}" thread "$tsan_files"
    t3=$(date +%s)
    echo "sanitize: concurrency tests under TSan"
    found=$(cd "${TSAN_BUILD:-build-tsan}" && ctest -N -R "$tsan_tests" | sed -n 's/^Total Tests: //p')
    if [ "${found:-0}" -lt "$tsan_min" ]; then
        echo "sanitize: only ${found:-0} of the $tsan_min concurrency tests are in the TSan build;" \
             "add the file that now holds the others to tsan_files" >&2
        exit 1
    fi
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp" \
        run "${TSAN_BUILD:-build-tsan}" -R "$tsan_tests"
    echo "sanitize: TSan clean (build $(( t3 - t2 )) s, tests $(( $(date +%s) - t3 )) s)"
fi
echo "sanitize: done in $(( $(date +%s) - t0 )) s"
