#!/usr/bin/env bash
# Runs the Python package's tests against the extension built in the CMake build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -d python/tests ]; then echo "python: no tests"; exit 0; fi
ext=$(find "$build/python" -name '_ferry*.so' 2>/dev/null | head -1 || true)
if [ -z "$ext" ]; then
  echo "python: the extension was not built (nanobind missing?); run scripts/deps.sh" >&2
  exit 1
fi
export PYTHONPATH="$(dirname "$(dirname "$ext")")${PYTHONPATH:+:$PYTHONPATH}"
shift || true
exec python3 -m pytest -q python/tests "$@"
