#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a small consumer against it
# twice: with CMake's find_package(ferry) and with pkg-config.
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

cmake -S "$consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/cmake-build/consumer" "$tmp/a.bin"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs ferry)
case "$flags" in *"$prefix"*) ;; *) echo "pkg-config flags do not point into $prefix: $flags"; exit 1 ;; esac
c++ -std=c++20 "$consumer/main.cpp" -o "$tmp/pc-consumer" $flags
LD_LIBRARY_PATH="$libdir" "$tmp/pc-consumer" "$tmp/b.bin"
echo "installed ferry builds and runs with find_package(ferry) and with pkg-config"
