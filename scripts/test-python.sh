#!/usr/bin/env bash
# Runs the Python package's tests against the package the CMake build assembled in
# <build>/python (the extension next to the pure-Python files). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
if [ ! -d "$build/python/ferry" ]; then
  echo "python: $build/python/ferry is missing (was nanobind found? run scripts/deps.sh)" >&2
  exit 1
fi
export PYTHONPATH="$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m pytest -q -p no:cacheprovider python/tests "$@"
