#!/usr/bin/env bash
# Fetches, on a machine with network, what the side-by-side benchmarks need on a GPU machine
# without it: the peers' wheels for that machine's Python into .whl-bench/ (bench/probes/
# gpu_round.sh installs them there with --no-deps) and nginx unpacked from Debian's packages
# into .nginx/ (bench/remote_bench.sh, NGINX_ROOT). Both folders stay out of git; carry them.
#   bench/fetch_peers.sh              Python 3.12, the versions the benches were last run with
#   PYTHON_VERSION=3.11 bench/fetch_peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON_VERSION:-3.12}
# KvikIO and what it loads; InstantTensor; fastsafetensors and its CLI's typer; zarr-python,
# its codecs and config, and nvCOMP's Python wheel (ferry.zarr's GPU decoders).
wheels=(kvikio-cu13==26.10.0 libkvikio-cu13==26.10.0 rapids-logger==0.3.0 cuda-pathfinder
        instanttensor==0.2.2 fastsafetensors==0.5.0 typer zarr==3.1.6 numcodecs==0.16.6 donfig
        google-crc32c crc32c nvidia-nvcomp-cu13)
mkdir -p .whl-bench
for w in "${wheels[@]}"; do
  echo "fetch_peers: $w"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform any -d .whl-bench "$w"
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download nginx nginx-common libpcre2-8-0 >/dev/null)
rm -rf .nginx && mkdir .nginx
for f in "$work"/*.deb; do dpkg -x "$f" .nginx; done
echo "fetch_peers: $(ls .whl-bench | wc -l) wheels in .whl-bench ($(du -sh .whl-bench | cut -f1)), nginx in .nginx"
