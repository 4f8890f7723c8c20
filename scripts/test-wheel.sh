#!/usr/bin/env bash
# The binary wheels as users get them: built from the build tree (scripts/wheel.py), each
# installed with pip into a fresh virtual environment of a Python it is for, offline and without
# compiling (--no-index, --only-binary), with the CUDA toolkit off the path and PYTHONPATH
# unset. For each: its size and its manylinux tag (auditwheel show), the install time, `import
# ferry` from the environment, `ferry --version`, `ferry doctor --json`, and arrays saved and
# loaded back; the wheel of the Python running this script also runs the Python suite's host
# tests. Fails past the bars of docs/python.md (40 MB, 30 s, a manylinux tag).
#   scripts/test-wheel.sh [BUILD] [pytest -k expression]
#   scripts/test-wheel.sh BUILD --cuda 12
# Default: the build tree's CUDA, for each Python of WHEEL_PYTHONS (default 3.9 3.10 3.11 3.12
# 3.13; one abi3 wheel serves 3.12 and 3.13) that is installed; a missing one is named and
# skipped. --cuda 12: the ferry-cu12 wheel (abi3), built over libferry built in BUILD/cu12 with
# the CUDA 12 toolkit (scripts/cuda12.sh), for 3.12 and 3.13, else this script's Python.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cuda=""
select="test_host or test_first_use or test_load_many or test_checkpoint"
if [ "${2:-}" = --cuda ]; then
  cuda=$3
  versions=${WHEEL_PYTHONS:-3.12 3.13}
else
  select=${2:-$select}
  versions=${WHEEL_PYTHONS:-3.9 3.10 3.11 3.12 3.13}
fi
# Without a CUDA 12 toolkit, and none to fetch (no network), the CUDA 12 wheel's test skips
# (ctest's SKIP_RETURN_CODE), saying so; in CI it fails.
if [ "$cuda" = 12 ] && ! scripts/cuda12.sh >/dev/null; then
  echo "wheel: skipped: no CUDA 12 toolkit to build ferry-cu12 with (scripts/cuda12.sh)"
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
own=$(python3 -c "import sys; print('%d.%d' % sys.version_info[:2])")

find_python() {  # the interpreter of version $1: pyenv's, else on PATH (a pyenv shim may not run it)
  local p
  p=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V | tail -1)
  [ -n "$p" ] || p=$(command -v "python$1" || true)
  [ -n "$p" ] && "$p" -c "" 2>/dev/null && echo "$p"
}
pythons=()
for v in $versions; do
  if p=$(find_python "$v"); then
    pythons+=("$p")
  else
    echo "wheel: Python $v is not installed: its wheel is not tested"
  fi
done
[ ${#pythons[@]} -gt 0 ] || pythons=("$(command -v python3)")
python3 scripts/wheel.py --build "$build" --out "$work/dist" --python "${pythons[@]}" ${cuda:+--cuda "$cuda"} >/dev/null

for wheel in "$work"/dist/ferry_cu*.whl; do
  size=$(stat -c %s "$wheel")
  tag=$(python3 -m auditwheel show "$wheel" 2>&1 | tr -d '\n' | { grep -o '"manylinux_[0-9_]*x86_64"' || true; } |
        head -1 | tr -d '"')
  echo "wheel: $(basename "$wheel") $((size / 1000000)) MB, ${tag:-no manylinux tag}"
  [ "$size" -le 40000000 ] || { echo "wheel: larger than 40 MB" >&2; exit 1; }
  [ -n "$tag" ] || { echo "wheel: auditwheel show reports no manylinux tag" >&2; exit 1; }
done

clean_path="/usr/bin:/bin"
run() { env -u PYTHONPATH PATH="$venv/bin:$clean_path" CUDA_HOME= "$@"; }
for py in "${pythons[@]}"; do
  v=$("$py" -c "import sys; print('%d.%d' % sys.version_info[:2])")
  abi=$("$py" -c "import sys; print('abi3' if sys.version_info >= (3, 12) else 'cp%d%d' % sys.version_info[:2])")
  wheel=$(ls "$work"/dist/ferry_cu*-*-"$abi"-*.whl)
  # The test's own tools (numpy; pytest, safetensors, torch... for the host tests) come from
  # that Python's site-packages; ferry only from the wheel.
  venv=$work/venv-$v
  "$py" -m venv --system-site-packages "$venv"
  t0=$(date +%s%N)
  env -u PYTHONPATH PATH="$venv/bin:$clean_path" CUDA_HOME= PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$venv/bin/python" -m pip install -q --no-index --no-deps --only-binary=:all: "$wheel"
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "wheel: $(basename "$wheel") installed for Python $v in $ms ms"
  [ "$ms" -le 30000 ] || { echo "wheel: the install took more than 30 s" >&2; exit 1; }
  (
    cd "$work"  # nothing of the source tree on sys.path
    where=$(run "$venv/bin/python" -c "import ferry, os; print(os.path.dirname(ferry.__file__))")
    case "$where" in "$venv/"*) ;; *) echo "wheel: ferry was imported from $where, not the wheel" >&2; exit 1 ;; esac
    run "$venv/bin/ferry" --version >/dev/null
    run "$venv/bin/ferry" doctor --json >"$work/doctor.json" || true  # exit 1: no GPU here
    run "$venv/bin/python" -c "import json, sys; json.load(open(sys.argv[1]))" "$work/doctor.json"
    run "$venv/bin/python" - "$work" <<'EOF'
import os, sys
import numpy as np
import ferry
d = sys.argv[1]
a = np.arange(24, dtype=np.float32).reshape(4, 6)
ferry.save(os.path.join(d, "a.npy"), a)
np.save(os.path.join(d, "b.npy"), a.T * 2)
assert np.array_equal(np.load(os.path.join(d, "a.npy")), a)
assert np.array_equal(ferry.load(os.path.join(d, "a.npy")), a)
assert np.array_equal(ferry.load(os.path.join(d, "b.npy")), a.T * 2)
a.tofile(os.path.join(d, "a.f32"))
assert np.array_equal(ferry.fromfile(os.path.join(d, "a.f32"), dtype=np.float32), a.ravel())
EOF
  )
  if [ -z "$cuda" ] && [ "$v" = "$own" ]; then
    (cd "$work" && FERRY_CLI="$venv/bin/ferry" PYTHONDONTWRITEBYTECODE=1 \
      run "$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/python/tests" -k "$select")
  fi
done
