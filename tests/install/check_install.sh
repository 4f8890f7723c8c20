#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a small consumer against it
# twice: with CMake's find_package(ferry) and with pkg-config. Neither names a language level
# (the package carries C++20) nor sets LD_LIBRARY_PATH (both link with a run path into the prefix).
set -euo pipefail
build="$1"
consumer="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# Moved after installing: both ways must find it where it lies now.
mv "$tmp/prefix" "$tmp/moved"
prefix="$tmp/moved"
libdir=$(dirname "$(find "$prefix" -name 'libferry.so' | head -1)")
unset LD_LIBRARY_PATH

cmake -S "$consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
"$tmp/cmake-build/consumer" "$tmp/a.bin"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs ferry)
case "$flags" in *"$prefix"*) ;; *) echo "pkg-config flags do not point into $prefix: $flags"; exit 1 ;; esac
c++ "$consumer/main.cpp" -o "$tmp/pc-consumer" $flags
"$tmp/pc-consumer" "$tmp/b.bin"
echo "installed ferry builds and runs with find_package(ferry) and with pkg-config"
