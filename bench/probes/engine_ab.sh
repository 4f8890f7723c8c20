#!/usr/bin/env bash
# Before/after speed of the engine, on the GPU machine, in one unattended run (< 5 minutes):
#   bench/probes/engine_ab.sh BEFORE_SRC_DIR
# BEFORE_SRC_DIR is a plain source tree of the old engine (e.g. `git archive 91297d9 | tar -x -C
# /tmp/before`); no git or network is needed. Both trees are built (Release, library only, with
# this tree's offline dependency bundle .deps/), then, interleaved A/B/A/B:
#   hot:   an 8 GiB file already in the page cache -> GPU memory (best of 3);
#   cold:  the same file with the page cache dropped before each read (echo 3 >
#          /proc/sys/vm/drop_caches as root, else posix_fadvise DONTNEED through dd);
#   write: 4 GiB of GPU memory -> a new file, fsync'd (best of 2).
# Prints a table of GB/s. Env: SIZE_GIB (8), WRITE_GIB (4), DIR (a directory on the disk under
# test; default: a temporary one next to this tree), ROUNDS (2).
set -euo pipefail
before=$(cd "${1:?usage: bench/probes/engine_ab.sh BEFORE_SRC_DIR}" && pwd)
after=$(cd "$(dirname "$0")/../.." && pwd)
size_gib=${SIZE_GIB:-8}
write_gib=${WRITE_GIB:-4}
rounds=${ROUNDS:-2}
work=${DIR:-$after/.engine-ab}
mkdir -p "$work"
trap 'rm -f "$work/data.bin" "$work/out.bin"' EXIT
deps=()
[ -d "$after/.deps" ] && deps=(-DFERRY_DEPS_DIR="$after/.deps")

build() {  # build SRC OUT: libferry.so and the probe
    local src=$1 out=$2
    cmake -S "$src" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF \
        -DFERRY_BUILD_TOOLS=OFF -DFERRY_BUILD_PYTHON=OFF "${deps[@]}" >"$out.log" 2>&1 ||
        { tail -20 "$out.log"; exit 1; }
    cmake --build "$out" --target ferry -j "$(nproc)" >>"$out.log" 2>&1 || { tail -20 "$out.log"; exit 1; }
    local lib
    lib=$(dirname "$(find "$out" -name 'libferry.so' | head -1)")
    c++ -std=c++20 -O2 -I"$src/include" "$after/bench/probes/engine_ab_probe.cpp" -o "$out/probe" \
        -L"$lib" -lferry -Wl,-rpath,"$lib"
}
echo "building before ($before) and after ($after)..."
build "$before" "$work/before" &
pid_before=$!
build "$after" "$work/after" &
pid_after=$!
wait "$pid_before"
wait "$pid_after"

bytes=$((size_gib << 30))
wbytes=$((write_gib << 30))
echo "writing a ${size_gib} GiB test file in $work..."
head -c "$bytes" /dev/urandom >"$work/data.bin" 2>/dev/null ||
    dd if=/dev/urandom of="$work/data.bin" bs=64M count=$((size_gib * 16)) status=none
sync

drop() {
    sync
    if [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
        drop_how="drop_caches"
    else
        drop_how="fadvise"
        dd if="$work/data.bin" iflag=nocache count=0 status=none 2>/dev/null || true
        dd of="$work/data.bin" oflag=nocache conv=notrunc,fdatasync count=0 status=none 2>/dev/null || true
    fi
}
drop_how="?"
declare -A sum
run() {  # run WHICH TEST -> adds GB/s
    local which=$1 test=$2 r
    case $test in
        hot) cat "$work/data.bin" >/dev/null; r=$("$work/$which/probe" read "$work/data.bin" "$bytes" 3) ;;
        cold) drop; r=$("$work/$which/probe" read "$work/data.bin" "$bytes" 1) ;;
        write) r=$("$work/$which/probe" write "$work/out.bin" "$wbytes" 2); rm -f "$work/out.bin" ;;
    esac
    local gbps=${r#* }
    echo "  $test $which: $gbps GB/s"
    sum[$which.$test]=$(python3 -c "print(${sum[$which.$test]:-0} + $gbps)")
}
for round in $(seq "$rounds"); do
    echo "round $round"
    for test in hot cold write; do
        if [ $((round % 2)) = 1 ]; then run before $test; run after $test
        else run after $test; run before $test; fi
    done
done
echo
echo "mean of $rounds rounds, GB/s (cold: $drop_how)"
printf '%-8s %10s %10s %8s\n' test before after change
for test in hot cold write; do
    b=$(python3 -c "print(round(${sum[before.$test]} / $rounds, 2))")
    a=$(python3 -c "print(round(${sum[after.$test]} / $rounds, 2))")
    c=$(python3 -c "print(f'{(${a} / ${b} - 1) * 100:+.1f}%' if ${b} > 0 else 'n/a')")
    printf '%-8s %10s %10s %8s\n' "$test" "$b" "$a" "$c"
done
