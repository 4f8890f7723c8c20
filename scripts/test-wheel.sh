#!/usr/bin/env bash
# The binary wheel as a user gets it: built from the build tree (scripts/wheel.py), installed
# into a fresh virtual environment with pip, offline and without compiling (--no-index,
# --only-binary), with the CUDA toolkit off the path and PYTHONPATH unset; then the `ferry`
# command and the Python suite's host tests run against the installed package, not the build
# tree. Prints the wheel's size and the install time, and fails past the bars of
# docs/python.md (40 MB, 30 s).
#   scripts/test-wheel.sh [BUILD] [pytest -k expression]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
select=${2:-test_host or test_first_use or test_load_many or test_checkpoint}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 scripts/wheel.py --build "$build" --out "$work/dist" >/dev/null
wheel=$(ls "$work"/dist/ferry_cu*-cp*.whl)
size=$(stat -c %s "$wheel")
echo "wheel: $(basename "$wheel") $((size / 1000000)) MB"
[ "$size" -le 40000000 ] || { echo "wheel: larger than 40 MB" >&2; exit 1; }
# The test's own tools (numpy, pytest, safetensors, torch...) come from the system's
# site-packages; ferry only from the wheel.
python3 -m venv --system-site-packages "$work/venv"
clean_path="$work/venv/bin:/usr/bin:/bin"
t0=$(date +%s%N)
env -u PYTHONPATH PATH="$clean_path" CUDA_HOME= PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$work/venv/bin/python" -m pip install -q --no-index --no-deps --only-binary=:all: "$wheel"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "wheel: installed in $ms ms"
[ "$ms" -le 30000 ] || { echo "wheel: the install took more than 30 s" >&2; exit 1; }
cd "$work"  # nothing of the source tree on sys.path
run() { env -u PYTHONPATH PATH="$clean_path" CUDA_HOME= "$@"; }
where=$(run "$work/venv/bin/python" -c "import ferry, os; print(os.path.dirname(ferry.__file__))")
case "$where" in "$work/venv/"*) ;; *) echo "wheel: ferry was imported from $where, not the wheel" >&2; exit 1 ;; esac
run "$work/venv/bin/ferry" --version
run "$work/venv/bin/ferry" doctor --json >"$work/doctor.json" || true  # exit 1: no GPU here
run "$work/venv/bin/python" -c "import json, sys; json.load(open(sys.argv[1]))" "$work/doctor.json"
FERRY_CLI="$work/venv/bin/ferry" PYTHONDONTWRITEBYTECODE=1 \
  run "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$OLDPWD/python/tests" -k "$select"
