"""Helpers the Python benchmarks in bench/ share: sizes, page-cache control, file generation,
optional imports and workers in fresh processes.

Each benchmark measures a reader in its own process (imports and the CUDA context made before
the clock starts), so the parent keeps only what it needs to prepare files and caches and to
collect one JSON object per worker. Nothing here imports a GPU library.
"""

import json
import os
import statistics
import subprocess
import sys
import threading

BLOCK = 64 << 20  # generated files repeat a random block this long (longer than any read)


def parse_size(text):
    """'8G', '8GiB', '4.6G', '512M', '4096' -> bytes (binary units)."""
    t = str(text).strip().upper()
    for suffix in ("IB", "B"):
        if t.endswith(suffix) and len(t) > len(suffix) and t[-len(suffix) - 1] in "KMGT":
            t = t[: -len(suffix)]
            break
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t[-1:] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%.4g %s" % (n / (1 << shift), unit)
    return "%d B" % n


def try_import(name):
    """(module, "") or (None, reason): absent, or present but unable to load what it needs."""
    try:
        return __import__(name, fromlist=["_"]), ""
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return None, "%s: %s" % (name, first)


def random_block(seed=0):
    import numpy as np
    return np.random.default_rng(seed).integers(0, 256, BLOCK, dtype=np.uint8).tobytes()


def write_repeated(path, header, payload_bytes, block):
    """header, then payload_bytes made of `block` repeated (the last copy cut short)."""
    with open(path, "wb") as f:
        f.write(header)
        left = payload_bytes
        while left:
            n = min(left, len(block))
            f.write(block[:n] if n < len(block) else block)
            left -= n


def parallel_pread(paths, threads=16, chunk=4 << 20, into=None):
    """Reads every byte of `paths` with `threads` threads in `chunk` pieces (os.preadv drops
    the GIL): into the writable buffer `into` (a memoryview as long as the files together), or
    into a scratch buffer per thread. Returns the bytes read."""
    jobs, base = [], 0
    for p in paths:
        size = os.path.getsize(p)
        jobs += [(p, off, min(chunk, size - off), base + off) for off in range(0, size, chunk)]
        base += size
    fds = {p: os.open(p, os.O_RDONLY) for p in paths}
    done = [0] * threads
    errors = []

    def work(k):
        scratch = None if into is not None else memoryview(bytearray(chunk))
        try:
            for p, off, n, at in jobs[k::threads]:
                view = into[at:at + n] if into is not None else scratch[:n]
                got = 0
                while got < n:
                    r = os.preadv(fds[p], [view[got:]], off + got)
                    if r == 0:
                        raise EOFError("%s: end of file at byte %d" % (p, off + got))
                    got += r
                done[k] += n
        except Exception as e:  # reported by the caller, never lost in a thread
            errors.append(e)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    try:
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        for fd in fds.values():
            os.close(fd)
    if errors:
        raise errors[0]
    return sum(done)


def read_whole(ferry, paths, sizes, into, wrap=lambda view: view):
    """ferry's read of the files whole, one after the other in ``into`` (a buffer of at least
    the sum of ``sizes``, host or GPU), in one ``read_batch``: the ceiling of a load of them.
    ``wrap`` offers each file's view of ``into`` to ferry (as it stands by default)."""
    files = [ferry.File(p) for p in paths]
    try:
        pieces, at = [], 0
        for f, n in zip(files, sizes):
            pieces.append((f, 0, wrap(into[at:at + n])))
            at += n
        ferry.read_batch(pieces).result()
    finally:
        for f in files:
            f.close()


def warm(paths, threads=16):
    """Puts the files in the page cache (a parallel read of every byte)."""
    parallel_pread(paths, threads)


def cache_drop_method(asked="auto"):
    """'drop_caches' (root, writable /proc/sys/vm/drop_caches) or 'fadvise'."""
    if asked in ("drop_caches", "fadvise"):
        return asked
    if asked != "auto":
        raise ValueError("cache drop method: auto, drop_caches or fadvise, not %r" % asked)
    ok = os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)
    return "drop_caches" if ok else "fadvise"


def evict(paths, method="auto"):
    """Takes the files out of the page cache; returns the method used: 'drop_caches' (every
    clean page of the machine) or 'fadvise' (posix_fadvise DONTNEED on each file, after an
    fdatasync so that no page is left dirty)."""
    method = cache_drop_method(method)
    if method == "drop_caches":
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            return method
        except OSError:
            method = "fadvise"
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return method


def run_json(cmd, env=None, timeout=900):
    """Runs a worker that prints one JSON object as its last line. Returns that object, or
    {"skipped": reason} with the last line of its error output."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": "timed out after %d s" % timeout}
    except OSError as e:
        return {"skipped": "cannot run %s: %s" % (cmd[0], e)}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["exit status %d" % p.returncode]
        return {"skipped": tail[0][:300]}
    for text in (lines[-1], p.stdout):  # one JSON line last, or one (indented) JSON document
        try:
            return json.loads(text)
        except ValueError:
            pass
    return {"skipped": "no JSON from %s: %s" % (cmd[0], lines[-1][:200])}


def _cpu_list(text):
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}."""
    cpus = set()
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def numa_nodes():
    """{node: set of its CPUs} from /sys/devices/system/node; {} where the machine does not say."""
    base = "/sys/devices/system/node"
    out = {}
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        if name.startswith("node") and name[4:].isdigit():
            try:
                with open(os.path.join(base, name, "cpulist")) as f:
                    out[int(name[4:])] = _cpu_list(f.read())
            except (OSError, ValueError):
                pass
    return out


def gpu_numa_nodes():
    """The NUMA node of each GPU nvidia-smi lists ([] without nvidia-smi), from the PCI device's
    numa_node in sysfs (-1 where the machine does not say)."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    nodes = []
    for line in p.stdout.split():
        domain, _, rest = line.strip().lower().partition(":")
        bdf = "%s:%s" % (domain[-4:], rest)  # nvidia-smi prints an 8-digit domain, sysfs 4
        try:
            with open("/sys/bus/pci/devices/%s/numa_node" % bdf) as f:
                nodes.append(int(f.read()))
        except (OSError, ValueError):
            nodes.append(-1)
    return nodes


def placement():
    """Where this process runs now: its CPU, that CPU's NUMA node, and the nodes of the CPUs it
    may run on (pinned memory is first placed on the node of the CPU that touches it). Slow
    readers in one run of several fresh processes can be told apart by it."""
    try:
        with open("/proc/self/stat") as f:
            cpu = int(f.read().rsplit(")", 1)[1].split()[36])  # field 39, "processor"
    except (OSError, ValueError, IndexError):
        return {}
    nodes = numa_nodes()
    allowed = os.sched_getaffinity(0)
    return {"cpu": cpu, "node": next((n for n, c in nodes.items() if cpu in c), None),
            "allowed_nodes": sorted(n for n, c in nodes.items() if c & allowed)}


def spread(values):
    """mean, min, max and the sample standard deviation (0 for one value)."""
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0, "n": len(values)}


def markdown(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def log(msg):
    print(msg, file=sys.stderr, flush=True)
