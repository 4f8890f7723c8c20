#!/usr/bin/env bash
# Before/after speed of the Python paths that sit on the engine (checkpoint loads, ferry.zarr),
# on the GPU machine, in one unattended run:
#   bench/probes/python_ab.sh BEFORE_TREE
# BEFORE_TREE is a plain source tree of the old version with CMakeLists.txt, cmake/, include/,
# src/ and python/ (e.g. `git archive REV CMakeLists.txt cmake include src python | tar -x -C DIR`).
# Both trees build their Python extension (Release, this tree's .deps/ bundle); then, in
# alternating processes, each loads a 4 GiB, 800-tensor checkpoint and 2 GiB zarr arrays
# (uncompressed and zstd, 64 MiB chunks) into GPU memory, hot, best of 3. Needs cupy, zarr 3,
# numcodecs and nvCOMP's wheels for the zstd row. Env: ROUNDS (2), DIR (scratch folder).
set -euo pipefail
before=$(cd "${1:?usage: bench/probes/python_ab.sh BEFORE_TREE}" && pwd)
after=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${ROUNDS:-2}
work=${DIR:-$after/.python-ab}
mkdir -p "$work"
trap 'rm -rf "$work/data"' EXIT
deps=()
[ -d "$after/.deps" ] && deps=(-DFERRY_DEPS_DIR="$after/.deps")
build() {  # build SRC OUT: the Python package in OUT/python
    cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_TOOLS=OFF "${deps[@]}" >"$2.log" 2>&1 &&
        cmake --build "$2" --target ferry_python -j "$(nproc)" >>"$2.log" 2>&1 || { tail -20 "$2.log"; exit 1; }
}
echo "building before ($before) and after ($after)..."
build "$before" "$work/before" & b=$!
build "$after" "$work/after" & a=$!
wait $b; wait $a
probe=$after/bench/probes/python_ab_probe.py
mkdir -p "$work/data"
PYTHONPATH="$work/after/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$probe" write "$work/data"
declare -A sum
run() {  # run WHICH TEST
    local r
    r=$(PYTHONPATH="$work/$1/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$probe" "$2" "$work/data" | tail -1)
    echo "  $2 $1: ${r#* } GB/s"
    sum[$1.$2]=$(python3 -c "print(${sum[$1.$2]:-0} + ${r#* })")
}
tests=(checkpoint zarr-raw zarr-zstd)
for round in $(seq "$rounds"); do
    echo "round $round"
    for t in "${tests[@]}"; do
        if [ $((round % 2)) = 1 ]; then run before "$t"; run after "$t"; else run after "$t"; run before "$t"; fi
    done
done
echo
echo "mean of $rounds rounds, GB/s, hot, into GPU memory"
printf '%-11s %10s %10s %8s\n' test before after change
for t in "${tests[@]}"; do
    python3 -c "b=${sum[before.$t]}/$rounds; a=${sum[after.$t]}/$rounds; print('%-11s %10.2f %10.2f %+7.1f%%' % ('$t', b, a, (a / b - 1) * 100))"
done
