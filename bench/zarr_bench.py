#!/usr/bin/env python3
"""Zarr arrays read into GPU memory: ferry.zarr against ferry's raw reads, zarr-python and KvikIO.

Writes three arrays of --size bytes (float32, 1-D) with zarr-python itself (zstd level 1,
zarr's threaded writer) under --dir, once (they are reused while their parameters match),
then reads each whole array into GPU memory with the page cache hot, best of --repeat:

  (a) uncompressed, --chunk chunks: ferry.zarr (store + pipeline) vs ferry's raw read of the
      same chunk files (every file read into one GPU buffer by parallel ferry requests);
  (b) zstd, --zstd-chunk chunks: ferry.zarr (nvCOMP on the GPU) vs zarr-python with
      zarr.config.enable_gpu() (CPU decode, LocalStore) vs kvikio.zarr.GDSStore when it
      imports and runs with this zarr (else the reason is printed), at its defaults and over
      KvikIO's threads and task sizes (a fresh process each), the ratio against its best;
  (c) sharded, --shard shards of --inner zstd inner chunks: ferry.zarr on the GPU vs
      zarr-python's CPU path (LocalStore, numpy result).

  (d) with --tiles, square float32 arrays of about --size bytes (32768 x 32768 at 4G),
      uncompressed, one per tile size (256K: 256 x 256 chunks ... 16M: 2048 x 2048): ferry.zarr
      against ferry's raw read of the same chunk files, where every chunk lands in a tile of
      the result rather than in contiguous bytes;
  (e) the ceiling of (b): nvCOMP's batched decode (nvidia.nvcomp, one call) of the same zstd
      chunks already in GPU memory, and the pinned host -> device copy of the compressed
      bytes; the lower of the two rates is the ceiling the zstd read is held to.

The table gives GB/s of array bytes and each ratio next to its bar (0.9x, 3x, 2x, 5x; 0.9x a
tile size; 0.85x the zstd ceiling). A quick run: --size 256M. Needs numpy, cupy, zarr (3.x), numcodecs, google-crc32c,
donfig, nvidia-nvcomp-cu13, ferry (PYTHONPATH=build/python); kvikio is optional.

  python3 bench/zarr_bench.py --dir /data/zbench --size 4G --json zarr.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as bc  # noqa: E402


def parse_size(text: str) -> int:
    """'4G', '256M', '64KiB', '1048576' -> bytes."""
    t = text.strip().upper()
    for suffix in ("IB", "B"):
        if t.endswith(suffix) and len(t) > len(suffix):
            t = t[: -len(suffix)]
            break
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_data(n: int) -> np.ndarray:
    """float32 values a zstd level 1 compresses about 2-3x: small integers with noise in the
    low mantissa bits, a 64 MiB random block tiled (longer than any chunk, so no chunk sees a
    repeat)."""
    rng = np.random.default_rng(16)
    block = min(n, 16 << 20)
    base = rng.integers(0, 512, block).astype(np.float32)
    base += rng.integers(0, 4, block).astype(np.float32) * np.float32(1 / 64)
    reps = -(-n // block)
    return np.tile(base, reps)[:n]


def write_arrays(
    root: str, size: int, chunk: int, zchunk: int, shard: int, inner: int
) -> dict[str, str]:
    import zarr
    from zarr.codecs import ZstdCodec

    n = size // 4
    params = {
        "size": size,
        "chunk": chunk,
        "zstd_chunk": zchunk,
        "shard": shard,
        "inner": inner,
        "zarr": zarr.__version__,
    }
    marker = os.path.join(root, "params.json")
    paths = {k: os.path.join(root, k + ".zarr") for k in ("raw", "zstd", "sharded")}
    if (
        os.path.exists(marker)
        and json.loads(Path(marker).read_text()) == params
        and all(map(os.path.isdir, paths.values()))
    ):
        log("zarr_bench: reusing the arrays in %s" % root)
        return paths
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    t0 = time.perf_counter()
    data = make_data(n)
    zarr.config.set(
        {"async.concurrency": max(os.cpu_count() or 4, 4), "threading.max_workers": os.cpu_count()}
    )
    specs = {
        "raw": dict(chunks=(chunk // 4,), compressors=None),
        "zstd": dict(chunks=(zchunk // 4,), compressors=ZstdCodec(level=1)),
        "sharded": dict(chunks=(inner // 4,), shards=(shard // 4,), compressors=ZstdCodec(level=1)),
    }
    for name, spec in specs.items():
        z = zarr.create_array(store=paths[name], shape=(n,), dtype="float32", fill_value=0, **spec)
        unit = (spec.get("shards") or spec["chunks"])[0]
        step = max(unit, (256 << 20) // 4 // unit * unit)  # 256 MiB pieces of whole shards

        def piece(start: int, z: Any = z, step: int = step) -> None:
            z[start : start + step] = data[start : start + step]

        # zarr encodes the chunks of one write on its thread pool; a few writes at once keep
        # every core busy
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(piece, range(0, n, step)))
        log("zarr_bench: wrote %s (%.1f s so far)" % (paths[name], time.perf_counter() - t0))
    Path(marker).write_text(json.dumps(params))
    return paths


def write_tiles(root: str, size: int, tile: int) -> str:
    """A square float32 array of about `size` bytes in square chunks of `tile` bytes,
    uncompressed, written by zarr-python (reused while its parameters match)."""
    import zarr

    edge = int(math.isqrt(tile // 4))
    side = max(edge, int(math.isqrt(size // 4)) // edge * edge)
    path = os.path.join(root, "tiles-%d.zarr" % edge)
    params = {"side": side, "edge": edge, "zarr": zarr.__version__}
    marker = os.path.join(root, "tiles-%d.json" % edge)
    if os.path.exists(marker) and json.loads(Path(marker).read_text()) == params:
        return path
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    z = zarr.create_array(
        store=path, shape=(side, side), dtype="float32", chunks=(edge, edge), compressors=None,
        fill_value=0,
    )
    band = max(edge, (256 << 20) // 4 // side // edge * edge)  # 256 MiB row bands

    def piece(row: int) -> None:
        rows = min(band, side - row)
        z[row : row + rows] = make_data(rows * side).reshape(rows, side) + np.float32(row)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(piece, range(0, side, band)))
    Path(marker).write_text(json.dumps(params))
    log("zarr_bench: wrote %s (%.1f s)" % (path, time.perf_counter() - t0))
    return path


def chunk_files(path: str) -> list[str]:
    out = []
    for d, _, names in os.walk(os.path.join(path, "c")):
        out += [os.path.join(d, x) for x in names]
    return sorted(out)


def best(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> float:
    times = []
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        r = fn()
        sync()
        times.append(time.perf_counter() - t)
        del r
    return min(times)


def zstd_ceiling(path: str, nbytes: int, zchunk: int, repeat: int, results: dict[str, Any]) -> float | None:
    """(e): the rate (GB/s of array bytes) that the zstd array's read cannot pass: the lower of
    nvCOMP's batched decode of its chunks already in GPU memory (one call, like ferry.zarr's)
    and the pinned host -> device copy of its compressed bytes. None, with a note, where
    nvCOMP does not import."""
    import cupy

    try:
        from nvidia import nvcomp  # type: ignore[import-not-found]
    except Exception as e:
        results["notes"].append("(e) nvidia.nvcomp does not import: %s" % _first_line(e))
        return None
    files = chunk_files(path)
    blobs = [Path(f).read_bytes() for f in files]
    sizes = [len(b) for b in blobs]
    offs = np.concatenate(([0], np.cumsum([-(-n // 256) * 256 for n in sizes])[:-1])).astype(int)
    total = int(offs[-1] + sizes[-1])
    host = cupy.cuda.alloc_pinned_memory(total)
    hview = np.frombuffer(host, dtype=np.uint8, count=total)
    for o, b in zip(offs, blobs):
        hview[o : o + len(b)] = np.frombuffer(b, dtype=np.uint8)
    src = cupy.empty(total, dtype=cupy.uint8)
    chunk_out = zchunk
    dst = cupy.empty(len(files) * chunk_out, dtype=cupy.uint8)
    sync = cupy.cuda.runtime.deviceSynchronize
    stream = cupy.cuda.get_current_stream()

    def copy() -> None:
        src.set(hview, stream=stream)

    codec = nvcomp.Codec(
        algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=src.device.id,
        cuda_stream=stream.ptr,
    )
    copy()
    srcs = nvcomp.as_arrays(src, offs.tolist(), sizes, cuda_stream=stream.ptr)
    # zarr stores an edge chunk whole too (padded with the fill value): every chunk decodes to
    # a chunk's bytes
    dsts = nvcomp.as_arrays(
        dst, (np.arange(len(files)) * chunk_out).tolist(), [chunk_out] * len(files),
        cuda_stream=stream.ptr,
    )

    def decode() -> None:
        codec.decode(srcs, out=dsts)

    decode()
    sync()
    t_copy = best(copy, repeat, sync)
    t_decode = best(decode, repeat, sync)
    results["rows"]["(e) nvCOMP batched decode, chunks in GPU memory"] = {
        "seconds": t_decode, "GBps": nbytes / t_decode / 1e9}
    results["rows"]["(e) pinned -> device copy of the compressed bytes"] = {
        "seconds": t_copy, "GBps": nbytes / t_copy / 1e9}
    log("zarr_bench: (e) decode %.3f s, copy of %d compressed bytes %.3f s" % (t_decode, total, t_copy))
    return nbytes / max(t_decode, t_copy) / 1e9


def gds_sweep(path: str, nbytes: int, repeat: int, results: dict[str, Any]) -> tuple[float, str] | None:
    """KvikIO's GDSStore over its documented knobs (bench/peer_configs.py's KvikIO grid, fewer
    sizes), each configuration in a fresh process started with KvikIO's environment variables:
    the best (GB/s, its settings) and a row per configuration; a refused one is a note."""
    import subprocess

    import peer_configs as pc

    def measure(cfg: dict[str, Any]) -> dict[str, Any]:
        r = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--gds-worker", path, "--repeat", str(repeat)],
            env=pc.kvikio_environment(cfg), capture_output=True, text=True, timeout=600,
        )
        if r.returncode:
            return {"skipped": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]}
        return {"seconds": float(r.stdout.split()[-1])}

    grid = pc.kvikio_grid(threads=(16, 64), task_sizes=(4 << 20, 16 << 20), bounce_sizes=(16 << 20,))
    rows = pc.sweep(grid, measure)
    for row in rows:
        if "failed" in row:
            results["notes"].append("(b) kvikio.zarr.GDSStore %s: did not run: %s" % (row["label"], row["failed"]))
            continue
        name = "(b) kvikio.zarr.GDSStore zstd, %s" % row["label"]
        results["rows"][name] = {"seconds": row["seconds"], "GBps": nbytes / row["seconds"] / 1e9}
        log("zarr_bench: %-40s %8.3f s %7.2f GB/s" % (name, row["seconds"], nbytes / row["seconds"] / 1e9))
    top = pc.best_of(rows)
    if top is None:
        return None
    gbps = nbytes / top["seconds"] / 1e9
    results["notes"].append("(b) KvikIO's GDSStore at its best: %s (%.2f GB/s)" % (top["label"], gbps))
    return gbps, top["label"]


def gds_worker(path: str, repeat: int) -> int:
    """One configuration of the sweep above: the best of `repeat` reads, in seconds."""
    import cupy
    import zarr
    from kvikio.zarr import GDSStore  # type: ignore[import-not-found]

    sync = cupy.cuda.runtime.deviceSynchronize
    store = GDSStore(path)

    def go() -> Any:
        with zarr.config.enable_gpu():
            return zarr.open_array(store=store, mode="r")[...]

    go()
    print("%.6f" % best(go, repeat, sync))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dir", default=os.environ.get("FERRY_BENCH_DIR", "/tmp/ferry-zarr-bench"))
    ap.add_argument(
        "--size", default="4G", help="bytes of each array (default 4G; e.g. 256M for a quick run)"
    )
    ap.add_argument("--chunk", default="16M", help="chunk size of (a), 1M-16M (default 16M)")
    ap.add_argument(
        "--zstd-chunk",
        default="4M",
        help="chunk size of (b), 1M-16M (default 4M: more frames for nvCOMP to decode at once)",
    )
    ap.add_argument("--shard", default="16M", help="shard size of (c) (default 16M)")
    ap.add_argument("--inner", default="64K", help="inner chunk size of (c) (default 64K)")
    ap.add_argument(
        "--tiles",
        default="",
        help="(d): chunk sizes of square float32 tiles, comma-separated (e.g. 256K,1M,4M,16M)",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument(
        "--skip-cpu", action="store_true", help="leave out zarr-python's CPU reads (slow)"
    )
    ap.add_argument("--gds-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gds_worker:
        return gds_worker(args.gds_worker, args.repeat)
    size, chunk = parse_size(args.size), parse_size(args.chunk)
    zchunk = parse_size(args.zstd_chunk)
    shard, inner = parse_size(args.shard), parse_size(args.inner)
    size -= size % shard
    if size <= 0 or chunk % 4 or zchunk % 4 or shard % inner or inner % 4:
        ap.error("--size must hold a shard, --chunk a multiple of 4, --shard a multiple of --inner")

    import cupy
    import ferry
    import ferry.zarr as fz
    import zarr
    from ferry.zarr import _pipeline as pipeline
    from ferry.zarr._store import _Unordered as Unordered

    versions = {
        "zarr": zarr.__version__,
        "ferry": ferry.__version__,
        "cupy": cupy.__version__,
        "numpy": np.__version__,
        "nvcomp": fz.nvcomp_unavailable_reason() or "available",
    }
    try:
        import importlib.metadata as md

        versions["nvcomp"] = (
            "nvidia-nvcomp-cu13 " + md.version("nvidia-nvcomp-cu13")
            if not fz.nvcomp_unavailable_reason()
            else versions["nvcomp"]
        )
    except Exception:
        pass
    log("zarr_bench: %s" % versions)
    cupy.zeros(1).sum()  # the CUDA context, outside the timed regions
    paths = write_arrays(args.dir, size, chunk, zchunk, shard, inner)
    nbytes = (size // 4) * 4
    sync = cupy.cuda.runtime.deviceSynchronize
    pool = cupy.get_default_memory_pool()
    results: dict[str, Any] = {
        "params": {
            "size": nbytes,
            "chunk": chunk,
            "zstd_chunk": zchunk,
            "shard": shard,
            "inner": inner,
            "repeat": args.repeat,
        },
        "versions": versions,
        "rows": {},
        "notes": [],
    }

    def run(name: str, fn: Callable[[], Any], nbytes: int = nbytes) -> float | None:
        try:
            fn()  # warm: page cache, nvCOMP and kernel set-up, file system metadata
            sync()
            t = best(fn, args.repeat, sync)
        except Exception as e:
            note = "%s: did not run: %s" % (name, _first_line(e))
            log("zarr_bench: " + note)
            traceback.print_exc(file=sys.stderr)
            results["notes"].append(note)
            return None
        finally:
            pool.free_all_blocks()
        gbs = nbytes / t / 1e9
        results["rows"][name] = {"seconds": t, "GBps": gbs}
        log("zarr_bench: %-40s %8.3f s %7.2f GB/s" % (name, t, gbs))
        return gbs

    def ratio(a: float | None, b: float | None) -> str:
        return "%.2fx" % (a / b) if a and b else "n/a"

    def ferry_read(path: str) -> Callable[[], Any]:
        def go() -> Any:
            with fz.enable(), zarr.config.enable_gpu():
                return zarr.open_array(store=fz.Store(path), mode="r")[...]

        return go

    def zarr_read(path: str, gpu: bool, store: Any = None) -> Callable[[], Any]:
        def go() -> Any:
            if gpu:
                with zarr.config.enable_gpu():
                    return zarr.open_array(store=store or path, mode="r")[...]
            return zarr.open_array(store=store or path, mode="r")[...]

        return go

    def raw_read(path: str) -> Callable[[], Any]:
        files = chunk_files(path)
        sizes = [os.path.getsize(f) for f in files]

        def go() -> Any:
            buf = cupy.empty(sum(sizes), dtype=cupy.uint8)
            sync()
            # ferry's fastest read of many files: one batch (as ferry.zarr's store reads).
            # (A GPU view offered with no stream, so that ferry reads it on its parallel path,
            # as the store's own reads do.)
            bc.read_whole(ferry, files, sizes, buf, wrap=Unordered)
            return buf

        return go

    # correctness first: ferry's result equals zarr's on a slice of each array
    for p in paths.values():
        with fz.enable(), zarr.config.enable_gpu():
            got = cupy.asnumpy(zarr.open_array(store=fz.Store(p), mode="r")[: 3 << 20])
        want = zarr.open_array(store=p, mode="r")[: 3 << 20]
        if got.tobytes() != want.tobytes():
            log("zarr_bench: ferry's read of %s differs from zarr's" % p)
            return 1

    fz.reset_stats()
    r_raw = run("(a) ferry raw read of the chunk files", raw_read(paths["raw"]))
    r_a = run("(a) ferry.zarr uncompressed", ferry_read(paths["raw"]))
    run("(a) zarr enable_gpu uncompressed", zarr_read(paths["raw"], True))
    r_b = run("(b) ferry.zarr zstd (GPU decode)", ferry_read(paths["zstd"]))
    r_bz = (
        None
        if args.skip_cpu
        else run("(b) zarr enable_gpu zstd (CPU decode)", zarr_read(paths["zstd"], True))
    )
    r_bk = None
    try:
        import kvikio  # type: ignore[import-not-found]
    except Exception as e:
        note = "(b) kvikio is not importable here (%s): no GDSStore comparison" % _first_line(e)
        log("zarr_bench: " + note)
        results["notes"].append(note)
    else:
        kv = "kvikio %s, zarr %s" % (getattr(kvikio, "__version__", "?"), zarr.__version__)
        versions["kvikio"] = kv
        try:
            from kvikio.zarr import GDSStore  # type: ignore[import-not-found]

            gds_store = GDSStore(paths["zstd"])
        except Exception as e:
            note = "(b) kvikio.zarr.GDSStore does not work with %s: %s" % (kv, _first_line(e))
            log("zarr_bench: " + note)
            results["notes"].append(note)
        else:
            r_bk = run(
                "(b) kvikio.zarr.GDSStore zstd, its defaults (%s)" % kv,
                zarr_read(paths["zstd"], True, gds_store),
            )
            if r_bk is None:
                results["notes"].append("(b) kvikio.zarr.GDSStore did not run with %s (above)" % kv)
            else:
                best_cfg = gds_sweep(paths["zstd"], nbytes, args.repeat, results)
                if best_cfg is not None and best_cfg[0] > r_bk:
                    r_bk = best_cfg[0]
    r_c = run("(c) ferry.zarr sharded (GPU decode)", ferry_read(paths["sharded"]))
    r_cz = (
        None if args.skip_cpu else run("(c) zarr CPU sharded", zarr_read(paths["sharded"], False))
    )
    r_ceil = zstd_ceiling(paths["zstd"], nbytes, zchunk, args.repeat, results) if r_b else None

    tiles = [t for t in args.tiles.split(",") if t]
    tile_bars = []
    for t in tiles:
        path = write_tiles(args.dir, size, parse_size(t))
        tnbytes = sum(os.path.getsize(f) for f in chunk_files(path))
        got = cupy.asnumpy(ferry_read(path)()[:1024, :1024])
        if got.tobytes() != zarr.open_array(store=path, mode="r")[:1024, :1024].tobytes():
            log("zarr_bench: ferry's read of %s differs from zarr's" % path)
            return 1
        raw = run("(d) %s tiles: ferry raw read" % t, raw_read(path), tnbytes)
        ours = run("(d) %s tiles: ferry.zarr" % t, ferry_read(path), tnbytes)
        # the same with every whole tile placed by one kernel a group (off by default)
        pipeline.PLACE_TILES_IN_ONE_KERNEL = True
        try:
            placed = fz.stats()["chunks_placed_in_one_kernel"]
            one = run("(d) %s tiles: ferry.zarr, tiles placed in one kernel" % t, ferry_read(path),
                      tnbytes)
            if one and fz.stats()["chunks_placed_in_one_kernel"] == placed:
                results["notes"].append("(d) %s: the one-kernel placement did not run" % t)
        finally:
            pipeline.PLACE_TILES_IN_ONE_KERNEL = False
        tile_bars.append(("(d) %s tiles vs ferry raw read" % t, ratio(ours, raw), 0.9))
        tile_bars.append(("(d) %s tiles, one kernel, vs ferry raw read" % t, ratio(one, raw), 0.9))
    results["ferry_zarr_stats"] = fz.stats()

    bars = [
        ("(a) uncompressed vs ferry raw read", ratio(r_a, r_raw), 0.9),
        ("(b) zstd vs zarr enable_gpu (CPU decode)", ratio(r_b, r_bz), 3.0),
        ("(b) zstd vs kvikio GDSStore at its best", ratio(r_b, r_bk), 2.0),
        ("(c) sharded vs zarr CPU", ratio(r_c, r_cz), 5.0),
        ("(b) zstd vs its ceiling (e)", ratio(r_b, r_ceil), 0.85),
    ] + tile_bars
    results["bars"] = [{"what": w, "ratio": r, "bar": b} for w, r, b in bars]
    print(
        "\nZarr -> GPU, %.2f GiB float32, chunks %s, shards %s of %s inner chunks, "
        "hot page cache, best of %d"
        % (
            nbytes / (1 << 30),
            args.chunk + " (zstd " + args.zstd_chunk + ")",
            args.shard,
            args.inner,
            args.repeat,
        )
    )
    print("| reader | s | GB/s |")
    print("| --- | --- | --- |")
    for name, row in results["rows"].items():
        print("| %s | %.3f | %.2f |" % (name, row["seconds"], row["GBps"]))
    print("\n| bar | ratio | target | met |")
    print("| --- | --- | --- | --- |")
    for w, r, b in bars:
        met = "n/a" if r == "n/a" else ("yes" if float(r[:-1]) >= b else "no")
        print("| %s | %s | >= %.1fx | %s |" % (w, r, b, met))
    for note in results["notes"]:
        print("note: " + note)
    print("ferry.zarr stats: %s" % json.dumps(results["ferry_zarr_stats"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
