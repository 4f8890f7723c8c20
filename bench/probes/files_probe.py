#!/usr/bin/env python3
"""Where the time of many small hot files goes on a machine: open/close alone, open+read+close
(one thread and a pool), np.load, ferry.load_many into host and GPU memory; on the given folder
and on a copy in /dev/shm (tmpfs), so the file system's share shows. With --native, also
load_many into --device of the same arrays saved native and in C order, so the share of the
byte swaps and transposes shows.
    python3 bench/probes/files_probe.py --dir DIR --files 20000 [--device cuda] [--native]
"""
import argparse, concurrent.futures as cf, importlib.util, os, shutil, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import numpy as np  # noqa: E402
import many_files_bench as mfb  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--dir", default="/tmp/files-probe")
ap.add_argument("--files", type=int, default=20000)
ap.add_argument("--device", default="cpu")
ap.add_argument("--threads", type=int, default=16)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--native", action="store_true", help="also the same arrays native and C-ordered")
a = ap.parse_args()
import ferry  # noqa: E402


def open_close(p):
    os.close(os.open(p, os.O_RDONLY))


def read_all(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        return len(os.read(fd, 1 << 20))
    finally:
        os.close(fd)


def cases(paths):
    pool = cf.ThreadPoolExecutor(a.threads)
    out = {
        "stat loop": lambda: [os.stat(p) for p in paths],
        "open+close loop": lambda: [open_close(p) for p in paths],
        "open+read+close loop": lambda: [read_all(p) for p in paths],
        "open+read+close %d thr" % a.threads: lambda: list(pool.map(read_all, paths, chunksize=64)),
        "np.load loop": lambda: [np.load(p) for p in paths],
        "load_many host": lambda: ferry.load_many(paths),
    }
    if a.device != "cpu":
        import cupy
        from ferry import _many_device
        sync = cupy.cuda.runtime.deviceSynchronize

        def capsules(like=None):
            # The arrays made from DLPack capsules, as before CuPy's ndarray over a MemoryPointer.
            _many_device.views = False
            try:
                return ferry.load_many(paths, device=a.device, like=like), sync()
            finally:
                _many_device.views = True

        out["load_many %s" % a.device] = lambda: (ferry.load_many(paths, device=a.device), sync())
        out["load_many %s capsules" % a.device] = capsules
        if importlib.util.find_spec("torch"):
            out["load_many %s torch" % a.device] = lambda: (ferry.load_many(paths, device=a.device, like="torch"), sync())
    return out


def scaling(paths):
    """The library's reader alone (no views), by thread count: into its own pooled blocks, and
    into blocks touched before (a pre-faulted pool, as pinned memory from a library's pool is)."""
    from ferry import _ferry
    import resource
    pool = [np.ones(4 << 20, np.uint8) for _ in range(sum(os.path.getsize(p) for p in paths) // (3 << 20) + 64)]
    for thr in (1, 4, 16):
        for kind in ("own", "touched"):
            best = None
            for _ in range(a.rounds):
                it = iter(pool)
                alloc = (lambda n: next(it)[:n]) if kind == "touched" else None
                r0 = resource.getrusage(resource.RUSAGE_SELF)
                t0 = time.perf_counter()
                x = _ferry.read_whole_files(paths, None, None, thr, True, allocate=alloc)
                t = time.perf_counter() - t0
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                del x
                cur = (t, r1.ru_stime - r0.ru_stime, r1.ru_minflt - r0.ru_minflt)
                best = cur if best is None or t < best[0] else best
            print("read_whole_files %2d threads, %-7s blocks %8.1f ms %9.0f files/s  sys %.0f ms  faults %d"
                  % (thr, kind, best[0] * 1e3, len(paths) / best[0], best[1] * 1e3, best[2]), flush=True)
    if a.device != "cpu":
        from ferry import _many_device
        ferry.load_many(paths, device=a.device)
        print("load_many %s, last call: %s" % (a.device, ", ".join(
            "%s %s" % (k, ("%.1f ms" % (v * 1e3)) if isinstance(v, float) else v) for k, v in _many_device.last_call.items())))


def native_copy(paths):
    """The same arrays saved native and C-ordered, beside the originals (made once)."""
    folder = os.path.dirname(paths[0]) + "-native"
    out = [os.path.join(folder, os.path.basename(p)) for p in paths]
    if not os.path.exists(os.path.join(folder, ".complete")):
        os.makedirs(folder, exist_ok=True)
        for p, q in zip(paths, out):
            x = np.load(p)
            np.save(q, np.ascontiguousarray(x, x.dtype.newbyteorder("=")))
        open(os.path.join(folder, ".complete"), "w").close()
    return out


def run(label, paths, only=None):
    for p in paths:
        read_all(p)
    best = {}
    for _ in range(a.rounds):
        for k, fn in cases(paths).items():
            if only and not k.startswith(only):
                continue
            t0 = time.perf_counter(); fn(); t = time.perf_counter() - t0
            best[k] = min(best.get(k, t), t)
    for k, t in best.items():
        print("%-8s %-26s %8.1f ms %9.0f files/s" % (label, k, t * 1e3, len(paths) / t), flush=True)


paths = mfb.prepare(a.dir, a.files, 16 << 10, 256 << 10)
print("%d files, %.2f GB" % (len(paths), sum(os.path.getsize(p) for p in paths) / 1e9))
scaling(paths)
run("disk", paths)
if a.native:
    run("native", native_copy(paths), only="load_many")
shm = "/dev/shm/files-probe"
if not os.path.exists(shm):
    shutil.copytree(os.path.dirname(paths[0]), shm)
run("tmpfs", [os.path.join(shm, os.path.basename(p)) for p in paths])
shutil.rmtree(shm)
