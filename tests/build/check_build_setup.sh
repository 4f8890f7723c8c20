#!/usr/bin/env bash
# Checks what a fresh configure of the source tree sets up, without compiling anything:
#  - `make demo` builds the target ferry_cli and nothing else, and that target compiles only the
#    library's and the CLI's sources (no test or Python source): the demo stays quick;
#  - with FERRY_UNITY_BUILD (the default) the CLI's sources and those of the library's layers
#    that allow it compile in unity units, never one by one (each of them would parse the same
#    headers and compile CLI11 or nlohmann/json again);
#  - without CUDAARCHS or CMAKE_CUDA_ARCHITECTURES the GPU code is built for sm_80 and sm_90,
#    with compute_90 PTX (the project's default, not nvcc's).
# Usage: check_build_setup.sh SOURCE_DIR
# (Lists are searched through here-strings: with pipefail, `echo "$list" | grep -q` fails at
# random where grep stops reading before echo has written everything, and echo gets SIGPIPE.)
set -euo pipefail
src=$(cd "$1" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ferry-build-setup.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

unset CUDAARCHS
cmake -S "$src" -B "$scratch" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$scratch.log" 2>&1 ||
  { cat "$scratch.log"; rm -f "$scratch.log"; echo "FAIL: configure"; exit 1; }
rm -f "$scratch.log"

# 1. The demo's build steps, as make would run them (-n: nothing runs).
builds=$(make -s -n -C "$src" demo BUILD="$scratch" | grep -E '(^|[ ;&])cmake --build ' || true)
[ -n "$builds" ] || bad "make -n demo runs no 'cmake --build'"
while IFS= read -r line; do
  [ -z "$line" ] && continue
  targets=$(echo "$line" | { grep -oE -- '--target +[^ ]+( +[^ -][^ ]*)*' || true; } | sed -E 's/--target +//')
  [ "$targets" = ferry_cli ] || bad "make demo builds '${targets:-everything}', not only ferry_cli: $line"
done <<<"$builds"

# 2. What building ferry_cli compiles.
compiles=$(ninja -C "$scratch" -t commands ferry_cli | grep -E ' -c ' | grep -oE -- '-c [^ ]+' | cut -c4-)
count=$(echo "$compiles" | sed '/^$/d' | wc -l)
[ "$count" -gt 0 ] || bad "ninja lists no compile step for ferry_cli"
# A unity unit stands for the sources it includes.
sources=$(for f in $compiles; do
  case $f in */Unity/unity_*) sed -n 's/^#include "\(.*\)"$/\1/p' "$f" ;; *) echo "$f" ;; esac
done)
strays=$(echo "$sources" | grep -E "^$src/(tests|python|bench)/" || true)
[ -z "$strays" ] || bad "building ferry_cli compiles test, bench or Python sources:
$strays"

# 3. The unity units.
if grep -q '^FERRY_UNITY_BUILD:BOOL=ON' "$scratch/CMakeCache.txt"; then
  alone=$(echo "$compiles" | grep -E "^$src/(tools/ferry/[^/]+|src/[^/]+|src/(array|checkpoint|cuda|distributed|doctor|formats|io)/.+)\.cpp$" |
    grep -vE "^$src/src/(formats/safetensors|io/stream_ordered)\.cpp$" || true)
  [ -z "$alone" ] || bad "with FERRY_UNITY_BUILD these compile one by one:
$alone"
  for group in array checkpoint core cuda distributed doctor formats io; do
    grep -q "/unity_${group}_cxx\.cxx$" <<<"$compiles" || bad "no unity unit for the library's $group sources"
  done
  grep -qE '/ferry_cli\.dir/Unity/unity_[0-9]+_cxx\.cxx$' <<<"$compiles" || bad "no unity unit for tools/ferry"
else
  bad "FERRY_UNITY_BUILD is not ON by default"
fi

# 4. The default GPU architectures, in the library's nvcc step.
kernels=$(ninja -C "$scratch" -t commands ferry_cli | grep -E 'nvcc .* -c [^ ]*/src/cuda/[^ ]+\.cu( |$)' | head -1)
if [ -z "$kernels" ]; then
  bad "no nvcc step for src/cuda/*.cu"
else
  for code in 'code=\[sm_80\]' 'code=\[sm_90\]' 'code=\[compute_90\]'; do
    grep -qE -- "arch=compute_[0-9]+,$code" <<<"$kernels" || bad "the kernels are not built with ${code//\\/}: $(echo "$kernels" | grep -oE -- '--generate-code=[^ ]+' | tr '\n' ' ')"
  done
fi

[ "$fail" = 0 ] || exit 1
echo "make demo builds ferry_cli only ($count compile steps: library and CLI); unity units for the CLI and the library's layers; GPU code for sm_80, sm_90 and compute_90 PTX"
