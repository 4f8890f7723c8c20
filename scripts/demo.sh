#!/usr/bin/env bash
# ferry's main job on built-in sample data: is GPUDirect Storage usable here, then load a raw
# file, a big-endian .npy and a safetensors file of many tensors into GPU memory (host memory
# where there is no GPU), printing the path taken, throughput and checksums.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
ferry=$build/tools/ferry
dir=$build/demo
mkdir -p "$dir"

echo "== ferry doctor $dir"
"$ferry" doctor "$dir" | sed -n '/^Verdict/,$p'
echo
echo "== sample data in $dir"
python3 scripts/make_samples.py "$dir" 256
ls -l "$dir" | awk 'NR>1 {printf "  %-22s %12d bytes\n", $9, $5}'
echo
echo "== ferry load: a raw float32 file"
"$ferry" load "$dir/sample.f32" --dtype float32 --checksum
echo
echo "== ferry load: a big-endian .npy (byte order converted where the array lands: by a GPU kernel, or on the CPU)"
"$ferry" info "$dir/sample_be.npy" | sed -n 1,4p
"$ferry" load "$dir/sample_be.npy" --checksum
echo
echo "== ferry load: a safetensors file of 300 tensors (one coalesced read)"
"$ferry" load "$dir/sample.safetensors" --checksum | sed -n 1,8p
echo
echo "== ferry load --json (the same, for scripts)"
"$ferry" load "$dir/sample.safetensors" --json | python3 -c "import json,sys; j=json.load(sys.stdin); print({k: j[k] for k in ('format','device','bytes','gbps','io')}, len(j['arrays']), 'arrays')"
