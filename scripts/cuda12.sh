#!/usr/bin/env bash
# The CUDA 12 toolkit the ferry-cu12 wheel is built with (scripts/wheel.py --cuda 12), where
# none is installed: assembled once in .cuda12/ (ignored by git), then only found there.
#   scripts/cuda12.sh     prints the nvcc to build with, fetching the toolkit first if needed
# An installed CUDA 12 toolkit is used instead when there is one: CUDA12_NVCC=path/to/nvcc,
# else the newest /usr/local/cuda-12.*/bin/nvcc.
#
# NVIDIA's CUDA 12 wheels on PyPI carry the headers (nvidia-cuda-runtime-cu12, the crt headers
# of nvidia-cuda-nvcc-cu12, nvidia-cuda-cccl-cu12), ptxas and libdevice, but not the compiler
# driver and front ends (nvcc, cicc, cudafe++, fatbinary): those come from Debian's
# nvidia-cuda-toolkit 12.4 (trixie, non-free; NVIDIA's binaries), downloaded with apt into
# .cuda12/ and unpacked there, not installed. Everything is CUDA 12.4 except the static
# runtime: only the 12.9 runtime wheel carries libcudart_static.a, and one runtime serves every
# 12.x compiler (minor version compatibility: drivers >= 525 run it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/.cuda12
deb_version="12.4.131~12.4.1-2"
wheels=(nvidia-cuda-nvcc-cu12==12.4.131 nvidia-cuda-runtime-cu12==12.4.127
        nvidia-cuda-cccl-cu12==12.4.127.post1)
static_runtime=nvidia-cuda-runtime-cu12==12.9.79

works() { [[ $("$1" --version 2>/dev/null) == *"release 12."* ]]; }
if [ -n "${CUDA12_NVCC:-}" ]; then
  works "$CUDA12_NVCC" || { echo "cuda12: CUDA12_NVCC=$CUDA12_NVCC is not a CUDA 12 nvcc" >&2; exit 1; }
  echo "$CUDA12_NVCC"; exit 0
fi
for nvcc in $(ls -d /usr/local/cuda-12.*/bin/nvcc 2>/dev/null | sort -V -r); do
  works "$nvcc" && { echo "$nvcc"; exit 0; }
done
works "$root/bin/nvcc" && { echo "$root/bin/nvcc"; exit 0; }

echo "cuda12: assembling a CUDA 12.4 toolkit in .cuda12/ (Debian's nvidia-cuda-toolkit, NVIDIA's wheels)" >&2
rm -rf "$root"
work=$root/.fetch
mkdir -p "$work/apt/lists/partial" "$work/apt/archives/partial"
# apt on its own lists and cache: the system's sources and state stay as they are.
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie non-free" \
  >"$work/apt/sources.list"
touch "$work/apt/status"
apt_opts=(-o Dir::Etc::SourceList="$work/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
          -o Dir::State::Lists="$work/apt/lists" -o Dir::Cache="$work/apt"
          -o Dir::State::status="$work/apt/status" -o APT::Sandbox::User=root -qq)
apt-get "${apt_opts[@]}" update >&2
(cd "$work" && apt-get "${apt_opts[@]}" download "nvidia-cuda-toolkit=$deb_version" >&2) || {
  echo "cuda12: Debian's nvidia-cuda-toolkit $deb_version could not be downloaded;" \
       "install a CUDA 12 toolkit and set CUDA12_NVCC" >&2
  exit 1
}
dpkg-deb -x "$work"/nvidia-cuda-toolkit_*.deb "$work/deb"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q --no-deps --target "$work/pip" "${wheels[@]}" >&2
python3 -m pip install -q --no-deps --target "$work/pip-static" "$static_runtime" >&2

# The layout of an installed toolkit, which CMake's FindCUDAToolkit and nvcc.profile expect:
# bin/, nvvm/{bin,libdevice}/, include/, lib64/.
tk=$work/deb/usr/lib/nvidia-cuda-toolkit
mkdir -p "$root/bin" "$root/nvvm/bin" "$root/nvvm/libdevice" "$root/include" "$root/lib64"
cp "$tk/bin/nvcc" "$root/bin/"
cp -r "$tk/bin/crt" "$root/bin/"
for tool in cudafe++ fatbinary nvlink ptxas bin2c cuobjdump; do cp "$work/deb/usr/bin/$tool" "$root/bin/"; done
cp "$tk/bin/cicc" "$root/nvvm/bin/"
cp "$tk/libdevice/libdevice.10.bc" "$root/nvvm/libdevice/"
for part in cuda_runtime cuda_nvcc cuda_cccl; do cp -r "$work/pip/nvidia/$part/include/." "$root/include/"; done
find "$root/include" \( -name __init__.py -o -name __pycache__ \) -prune -exec rm -rf {} +
cp "$work/pip-static/nvidia/cuda_runtime/lib/"{libcudart_static.a,libculibos.a} "$root/lib64/"
cat >"$root/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
rm -rf "$work"
works "$root/bin/nvcc" || { echo "cuda12: the nvcc assembled in .cuda12/ does not run" >&2; exit 1; }
echo "cuda12: $(du -sh "$root" | cut -f1) in .cuda12/" >&2
echo "$root/bin/nvcc"
