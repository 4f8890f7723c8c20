#!/usr/bin/env python3
"""ferry against its peers and the hardware ceilings, side by side, on the same files in one run.

Files (written once under --dir, reused while their parameters match):
  raw          --size bytes of float32 (default 8G)
  .npy         --npy-size bytes of float32 (default 4G)
  safetensors  --st-size bytes of bf16 tensors of LLM-like shapes (default 4G, ~900 tensors)

Reads, each reader in a fresh process that imports its libraries and makes the CUDA context
before the clock starts; best of --repeat with the page cache hot (fewer for a reader whose
runs pass --reader-budget seconds), best of --cold-repeat cold
(drop_caches as root, else posix_fadvise DONTNEED; the table says which):
  ferry        ferry.fromfile(raw, float32, device="cuda"), ferry.load(npy|st, device="cuda",
               like="torch"), the CLI `ferry load --json` (its own in-process timing), and
               `ferry bench` (the C++ routes and ceilings, hot)
  peers        when importable: KvikIO CuFile.read into a CuPy array, InstantTensor (one
               safe_open), fastsafetensors (nogds), safetensors.torch.load_file, each at its
               defaults and at its best: its documented knobs are swept first, hot, in one
               process per peer (bench/peer_configs.py says which and why), and the fastest
               configuration then runs as a reader of its own; every ratio is against that best.
               Also cupy.fromfile, numpy.fromfile + cupy.asarray, numpy.load + cupy.asarray.
               A missing peer is a row saying "not importable", a configuration it refuses a
               row with its error
  ceilings     pinned host -> device copy (torch or CuPy); a parallel buffered pread of the raw
               file into pinned host memory (--threads, hot and cold)
Durable writes, interleaved A/B/A/B over --write-rounds rounds in one process (the order turns
each round), --write-size bytes to a new file each time: ferry.tofile from GPU and from host
memory and ferry.save(.npy) from GPU memory (atomic, fsync) against a raw parallel pwrite +
fsync of the same bytes from pinned memory with ferry's thread count, and KvikIO CuFile.write +
fsync at the configuration its read sweep found best (16 threads without one); mean and spread
per writer, and ratios paired round by round.

--host measures host-memory rows only (ferry into host memory, the CLI with --device host, numpy,
safetensors on the CPU, KvikIO into host memory, the pread ceiling; writes from host memory):
it runs without a GPU, for a quick check use --size 64M --npy-size 32M --st-size 32M.

  python3 bench/peers_bench.py --dir /root/ferry-tmp/peers --json peers.json --plot peers.png
  python3 bench/peers_bench.py --host --dir /tmp/pb --size 64M --npy-size 32M --st-size 32M

Prints markdown tables (GB/s; vs the ceiling; ferry / each peer; the bars; each peer's sweep), writes
--json, and with --plot a PNG (matplotlib, optional). --replot JSON redraws a PNG from a run.
"""

import argparse
import gc
import json
import math
import os
import platform
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402
import peer_configs as pc  # noqa: E402

ROOT = os.path.dirname(HERE)

# ---- the files ----------------------------------------------------------------------------


def npy_header(descr, count):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, count)
    d += " " * (64 - (10 + len(d) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()


def st_shapes(size, layers):
    """bf16 shapes of a decoder of `layers` layers whose total is about `size` bytes: hidden h
    (a multiple of 64), MLP 3.5h, vocabulary 8h; 9 tensors a layer plus embedding, norm, head."""
    h = max(64, int(math.sqrt(size / 2 / (14.5 * layers + 16))) // 64 * 64)
    m, v = int(3.5 * h) // 64 * 64, 8 * h
    out = [("model.embed_tokens.weight", (v, h))]
    for i in range(layers):
        p = "model.layers.%d." % i
        out += [(p + "self_attn.%s_proj.weight" % n, (h, h)) for n in "qkvo"]
        out += [(p + "mlp.gate_proj.weight", (m, h)), (p + "mlp.up_proj.weight", (m, h)),
                (p + "mlp.down_proj.weight", (h, m)), (p + "input_layernorm.weight", (h,)),
                (p + "post_attention_layernorm.weight", (h,))]
    return out + [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]


def st_header(shapes):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes:
        n = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, off


def prepare_files(folder, size, npy_size, st_size, layers):
    """{kind: {"path", "payload", "offset"}}; written once, reused while the parameters match."""
    os.makedirs(folder, exist_ok=True)
    count = size // 4
    npy_count = npy_size // 4
    st_head, st_payload = st_header(st_shapes(st_size, layers))
    npy_head = npy_header("<f4", npy_count)
    files = {
        "raw": {"path": os.path.join(folder, "peers-bench.raw"), "payload": count * 4, "offset": 0},
        "npy": {"path": os.path.join(folder, "peers-bench.npy"), "payload": npy_count * 4,
                "offset": len(npy_head)},
        "safetensors": {"path": os.path.join(folder, "peers-bench.safetensors"),
                        "payload": st_payload, "offset": len(st_head),
                        "tensors": len(st_shapes(st_size, layers))},
    }
    params = {"size": count * 4, "npy": npy_count * 4, "st": st_payload, "layers": layers, "v": 1}
    marker = os.path.join(folder, "peers-bench-params.json")
    if os.path.exists(marker) and all(os.path.exists(f["path"]) for f in files.values()):
        with open(marker) as f:
            if json.load(f) == params:
                bc.log("peers_bench: reusing the files in %s" % folder)
                return files
    t0 = time.perf_counter()
    block = bc.random_block()
    bc.write_repeated(files["raw"]["path"], b"", count * 4, block)
    bc.write_repeated(files["npy"]["path"], npy_head, npy_count * 4, block)
    bc.write_repeated(files["safetensors"]["path"], st_head, st_payload, block)
    os.sync()  # no writeback left running under the measurements
    with open(marker, "w") as f:
        json.dump(params, f)
    bc.log("peers_bench: wrote the files in %.1f s" % (time.perf_counter() - t0))
    return files


# ---- readers ------------------------------------------------------------------------------
# Each reader: (file kind, label in GPU mode, label in host mode (None: GPU only), modules it
# needs, environment, kind of row). Its function runs in the worker: setup(ctx, f) outside
# the clock, then run(ctx, state) timed; the result's bytes are checked against the payload.

READERS = {
    # raw float32
    "ferry.fromfile": ("raw", "ferry.fromfile(device='cuda')", "ferry.fromfile (host)", [], {}, "ferry"),
    "ferry.fromfile.registered": ("raw", "ferry.fromfile(device='cuda'), the file registered once (opt-in)", None,
                                  [], {}, "ferry-registered"),
    "ferry.cli.raw": ("raw", "ferry load --json (CLI)", "ferry load --device host (CLI)", [], {}, "ferry-cli"),
    # Each peer twice: as installed, and at the best configuration its sweep found in this run
    # (bench/peer_configs.py); ratios are taken against the best.
    "kvikio.default": ("raw", "KvikIO CuFile.read, its defaults", "KvikIO CuFile.read (host), its defaults",
                       ["kvikio"], {}, "peer"),
    "kvikio.best": ("raw", "KvikIO CuFile.read, its best", "KvikIO CuFile.read (host), its best",
                    ["kvikio"], {}, "peer"),
    "cupy.fromfile": ("raw", "cupy.fromfile", None, ["cupy"], {}, "peer"),
    "numpy.fromfile": ("raw", "numpy.fromfile + cupy.asarray", "numpy.fromfile", [], {}, "peer"),
    "ceiling.copy": ("raw", "pinned host -> device copy", None, [], {}, "ceiling"),
    "ceiling.pread": ("raw", "parallel pread into pinned memory", "parallel pread into host memory",
                      [], {}, "ceiling"),
    # .npy float32
    "ferry.load.npy": ("npy", "ferry.load(device='cuda', like='torch')", "ferry.load (host)", [], {}, "ferry"),
    "ferry.cli.npy": ("npy", "ferry load --json (CLI)", "ferry load --device host (CLI)", [], {}, "ferry-cli"),
    "kvikio.best.npy": ("npy", "KvikIO CuFile.read at the data offset, its best",
                        "KvikIO CuFile.read (host) at the data offset, its best", ["kvikio"], {}, "peer"),
    "numpy.load": ("npy", "numpy.load + cupy.asarray", "numpy.load", [], {}, "peer"),
    # safetensors bf16
    "ferry.load.st": ("safetensors", "ferry.load(device='cuda', like='torch')", "ferry.load (host)",
                      [], {}, "ferry"),
    "ferry.cli.st": ("safetensors", "ferry load --json (CLI)", "ferry load --device host (CLI)", [], {},
                     "ferry-cli"),
    "safetensors.torch": ("safetensors", "safetensors.torch.load_file(device='cuda')",
                          "safetensors.torch.load_file (host)", ["safetensors.torch"], {}, "peer"),
    "safetensors.best": ("safetensors", "safetensors.torch.load_file, its best", None,
                         ["safetensors.torch"], {}, "peer"),
    "instanttensor.default": ("safetensors", "InstantTensor, its defaults (URING, then AIO: O_DIRECT)", None,
                              ["instanttensor"], {}, "peer"),
    "instanttensor.best": ("safetensors", "InstantTensor, its best", None, ["instanttensor"], {}, "peer"),
    "fastsafetensors.default": ("safetensors", "fastsafetensors, nogds=True, its defaults", None,
                                ["fastsafetensors"], {}, "peer"),
    "fastsafetensors.best": ("safetensors", "fastsafetensors, its best", None, ["fastsafetensors"], {}, "peer"),
}

COLD = ["ceiling.pread", "ferry.fromfile", "ferry.cli.raw", "kvikio.best", "cupy.fromfile",
        "ferry.load.st", "ferry.cli.st", "safetensors.torch", "instanttensor.default", "instanttensor.best",
        "fastsafetensors.best"]

# The peers whose knobs are swept (bench/peer_configs.py): {peer: (file kind, its "best" readers)}.
SWEPT = {"kvikio": ("raw", ["kvikio.best", "kvikio.best.npy"]),
         "instanttensor": ("safetensors", ["instanttensor.best"]),
         "fastsafetensors": ("safetensors", ["fastsafetensors.best"]),
         "safetensors": ("safetensors", ["safetensors.best"])}
MODULE = {"kvikio": "kvikio", "instanttensor": "instanttensor", "fastsafetensors": "fastsafetensors",
          "safetensors": "safetensors.torch"}


class Ctx:
    """What a worker imported: numpy, ferry, the GPU libraries, the reader's peer modules."""

    def __init__(self, host, threads):
        import numpy as np
        import ferry
        self.np, self.ferry, self.host, self.threads = np, ferry, host, threads
        self.torch = self.cupy = None
        self.mods = {}
        self.versions = {"python": platform.python_version(), "numpy": np.__version__,
                         "ferry": ferry.__version__}
        if host:
            return
        if ferry.cuda_device_count() == 0:
            raise Unavailable("no usable GPU: " + ferry.cuda_unavailable_reason() + " (try --host)")
        torch, _ = bc.try_import("torch")
        if torch is not None and torch.cuda.is_available():
            self.torch = torch
            torch.zeros(1, device="cuda")  # the CUDA context, before the clock
            self.versions["torch"] = torch.__version__
            self.versions["gpu"] = torch.cuda.get_device_name(0)
        cupy, _ = bc.try_import("cupy")
        if cupy is not None:
            self.cupy = cupy
            cupy.zeros(1).sum()
            self.versions["cupy"] = cupy.__version__

    def need(self, names):
        for name in names:
            mod, why = bc.try_import(name)
            if mod is None:
                raise Unavailable(why)
            self.mods[name] = mod
            top = name.split(".")[0]
            self.versions[top] = getattr(sys.modules[top], "__version__", "?")

    def sync(self):
        if self.torch is not None:
            self.torch.cuda.synchronize()
        elif self.cupy is not None:
            self.cupy.cuda.runtime.deviceSynchronize()

    def free(self):
        gc.collect()
        if self.torch is not None:
            self.torch.cuda.empty_cache()
        if self.cupy is not None:
            self.cupy.get_default_memory_pool().free_all_blocks()
            self.cupy.get_default_pinned_memory_pool().free_all_blocks()

    def pinned(self, n):
        """n bytes of page-locked host memory (numpy view), or plain host memory in --host."""
        np = self.np
        if self.host:
            return np.empty(n, np.uint8)
        if self.torch is not None:
            t = self.torch.empty(n, dtype=self.torch.uint8, pin_memory=True)
            self._keep = t
            return t.numpy()
        if self.cupy is not None:
            import cupyx
            return cupyx.empty_pinned((n,), dtype=np.uint8)
        raise Unavailable("pinned memory needs torch or cupy with CUDA")

    def gpu_lib(self):
        if self.cupy is None:
            raise Unavailable("cupy: needed for the GPU array")
        return self.cupy


class Unavailable(Exception):
    """A reader that cannot run here: reported as a row, not as a failure."""


def nbytes_of(x):
    if isinstance(x, int):
        return x
    if isinstance(x, dict):
        return sum(nbytes_of(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(nbytes_of(v) for v in x)
    if hasattr(x, "nbytes"):
        return int(x.nbytes)
    return int(x.numel() * x.element_size())  # older torch


def reader_fn(rid, ctx, f, cfg=None):
    """(setup, run) of reader `rid` for file record f, in ctx's mode; a peer's reader runs with
    configuration `cfg` (bench/peer_configs.py; None: the library's defaults)."""
    np, ferry, host = ctx.np, ctx.ferry, ctx.host
    path = f["path"]
    torch_like = "torch" if ctx.torch is not None else "cupy"
    if rid == "ferry.fromfile":
        if host:
            return None, lambda s: ferry.fromfile(path, np.float32)
        return None, lambda s: ferry.fromfile(path, np.float32, device="cuda")
    if rid == "ferry.fromfile.registered":
        def register():  # once, outside the clock: what a server pays when it first loads the file
            reg = ferry.register_file(path)
            return {"registration": reg, "extra": {"register_seconds": reg.seconds}}
        return register, lambda s: ferry.fromfile(path, np.float32, device="cuda")
    if rid.startswith("ferry.load."):
        if host:
            return None, lambda s: ferry.load(path, like="ferry")
        return None, lambda s: ferry.load(path, device="cuda", like=torch_like)
    if rid.startswith("kvikio."):
        kvikio = ctx.mods["kvikio"]
        import kvikio.defaults
        ctx.versions["kvikio_compat_mode"] = str(kvikio.defaults.get("compat_mode"))
        ctx.versions["kvikio_config"] = {k: kvikio.defaults.get(k)  # what the environment set
                                         for k in ("num_threads", "task_size", "bounce_buffer_size")}
        n, off = f["payload"], f["offset"]
        lib = np if host else ctx.gpu_lib()

        def run(s):
            buf = lib.empty(n, dtype=np.uint8)
            with kvikio.CuFile(path, "r") as fh:
                got = fh.read(buf, n, off)
            if got != n:
                raise RuntimeError("KvikIO read %d of %d bytes" % (got, n))
            return buf
        return None, run
    if rid == "cupy.fromfile":
        cupy = ctx.gpu_lib()
        return None, lambda s: cupy.fromfile(path, dtype=np.float32)
    if rid == "numpy.fromfile":
        if host:
            return None, lambda s: np.fromfile(path, dtype=np.float32)
        cupy = ctx.gpu_lib()
        return None, lambda s: cupy.asarray(np.fromfile(path, dtype=np.float32))
    if rid == "numpy.load":
        if host:
            return None, lambda s: np.load(path)
        cupy = ctx.gpu_lib()
        return None, lambda s: cupy.asarray(np.load(path))
    if rid.startswith("safetensors."):
        st = ctx.mods["safetensors.torch"]
        if host:
            return None, lambda s: st.load_file(path, device="cpu")
        return None, lambda s: pc.safetensors_load(st, [path], cfg)
    if rid.startswith("instanttensor."):
        it = ctx.mods["instanttensor"]
        return None, lambda s: pc.instanttensor_load(it, [path], cfg)
    if rid.startswith("fastsafetensors."):
        fst = ctx.mods["fastsafetensors"]
        # get_tensor hands out views of fastsafetensors' own buffer: count its bytes before it goes
        return None, lambda s: pc.fastsafetensors_load(fst, [path], cfg,
                                                       lambda d: sum(nbytes_of(t) for t in d.values()))
    if rid == "ceiling.copy":
        n = f["payload"]

        def setup():
            if ctx.torch is not None:
                torch = ctx.torch
                return (torch.empty(n, dtype=torch.uint8, pin_memory=True),
                        torch.empty(n, dtype=torch.uint8, device="cuda"))
            return ctx.pinned(n), ctx.gpu_lib().empty(n, dtype=np.uint8)

        def run(s):
            src, dst = s
            if ctx.torch is not None:
                dst.copy_(src, non_blocking=True)
            else:
                dst.set(src)
            return n
        return setup, run
    if rid == "ceiling.pread":
        n = f["payload"]

        def setup():
            return memoryview(ctx.pinned(n)).cast("B")

        return setup, lambda mv: bc.parallel_pread([path], ctx.threads, into=mv)
    raise SystemExit("unknown reader " + rid)


def worker(a):
    """One reader in this process: prints one JSON object."""
    rid = a.worker
    kind = READERS[rid][0]
    f = json.loads(a.file_json)
    try:
        ctx = Ctx(a.host, a.threads)
        ctx.need(READERS[rid][3])
        setup, run = reader_fn(rid, ctx, f, json.loads(a.config_json) if a.config_json else None)
        state = setup() if setup else None
    except Unavailable as e:
        print(json.dumps({"id": rid, "unavailable": str(e)}))
        return 0
    runs, method = [], None
    for _ in range(a.repeat):
        if a.cold:
            method = bc.evict([f["path"]], a.cache_drop)
        ctx.sync()
        t0 = time.perf_counter()
        out = run(state)
        ctx.sync()
        dt = time.perf_counter() - t0
        got = nbytes_of(out)
        del out
        if a.fresh_memory:
            ctx.free()
        else:
            gc.collect()
        if got != f["payload"]:
            raise SystemExit("%s read %d bytes of %s, not its %d" % (rid, got, kind, f["payload"]))
        runs.append(dt)
        if sum(runs) > a.reader_budget:  # a slow reader (one thread, pageable memory): enough said
            break
    r = {"id": rid, "seconds": min(runs), "runs": runs, "bytes": f["payload"], "versions": ctx.versions,
         "placement": bc.placement()}
    if method:
        r["cache_drop"] = method
    if isinstance(state, dict):
        r.update(state.get("extra", {}))
    if rid.startswith("ferry."):
        r["stats_read"] = {k: v.get("bytes") for k, v in ctx.ferry.stats().get("read", {}).items()}
    print(json.dumps(r))
    return 0


# ---- durable writes -----------------------------------------------------------------------

WRITERS = {
    # id: (label, GPU mode, host mode)
    "ferry.tofile.gpu": ("ferry.tofile from GPU memory (atomic, fsync)", True, False),
    "ferry.tofile.host": ("ferry.tofile from host memory (atomic, fsync)", True, True),
    "ferry.save.npy.gpu": ("ferry.save(.npy) from GPU memory (atomic, fsync)", True, False),
    "ferry.save.npy.host": ("ferry.save(.npy) from host memory (atomic, fsync)", False, True),
    "raw.pwrite": ("parallel pwrite + fsync from pinned memory", True, False),
    "raw.pwrite.host": ("parallel pwrite + fsync from host memory", False, True),
    "kvikio.write": ("KvikIO CuFile.write + fsync (from GPU memory)", True, False),
    "kvikio.write.host": ("KvikIO CuFile.write + fsync (from host memory)", False, True),
}


def pwrite_fsync(path, mem, threads, chunk, sync=True):
    """The raw baseline: a new file, `threads` threads writing `chunk` pieces, then fsync
    (with `sync`; without it the bytes stay in the page cache)."""
    import threading
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = len(mem)
    errors = []

    def work(k):
        try:
            for off in range(k * chunk, n, threads * chunk):
                end, at = min(off + chunk, n), off
                while at < end:
                    at += os.pwrite(fd, mem[at:end], at)
        except Exception as e:
            errors.append(e)
    try:
        pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        if errors:
            raise errors[0]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_worker(a):
    """Every writer in this process, interleaved over the rounds: prints one JSON object."""
    ctx = Ctx(a.host, a.threads)
    np, ferry = ctx.np, ctx.ferry
    n = a.write_size // 4 * 4
    block = np.frombuffer(bc.random_block(1), dtype=np.uint8)
    host = np.resize(block, n).view(np.float32)  # what a user holds: pageable numpy memory
    threads = int(ferry.settings.resolved()["threads"]) if a.write_threads == 0 else a.write_threads
    chunk = a.write_chunk
    kvikio, why_kvikio = bc.try_import("kvikio")
    if kvikio is not None:
        ctx.versions["kvikio"] = kvikio.__version__
    unavailable = {}
    gpu = None
    if not a.host:
        if ctx.torch is not None:
            gpu = ctx.torch.from_numpy(host).cuda()
        else:
            gpu = ctx.gpu_lib().asarray(host)
        pinned = ctx.pinned(n)
        pinned[:] = host.view(np.uint8)
        pinned_mv = memoryview(pinned).cast("B")
    host_mv = memoryview(host).cast("B")
    writers = []
    for wid, (label, on_gpu, on_host) in WRITERS.items():
        if not (on_host if a.host else on_gpu):
            continue
        if wid.startswith("kvikio") and kvikio is None:
            unavailable[wid] = why_kvikio
            continue
        writers.append(wid)

    full = {"gpu": gpu, "host": host, "pinned": None if a.host else pinned_mv, "host_mv": host_mv}

    def do(wid, path, b):
        if wid == "ferry.tofile.gpu":
            ferry.tofile(b["gpu"], path)
        elif wid == "ferry.tofile.host":
            ferry.tofile(b["host"], path)
        elif wid == "ferry.save.npy.gpu":
            ferry.save(path, b["gpu"])
        elif wid == "ferry.save.npy.host":
            ferry.save(path, b["host"])
        elif wid == "raw.pwrite":
            pwrite_fsync(path, b["pinned"], threads, chunk)
        elif wid == "raw.pwrite.host":
            pwrite_fsync(path, b["host_mv"], threads, chunk)
        elif wid.startswith("kvikio.write"):
            buf = b["host"] if wid.endswith(".host") else b["gpu"]  # torch through the CUDA array interface
            with kvikio.CuFile(path, "w") as fh:
                done = fh.write(buf)
            if done != nbytes_of(buf):
                raise RuntimeError("KvikIO wrote %d of %d bytes" % (done, nbytes_of(buf)))
            fsync_path(path)

    # One small write of each first: thread pools, pinned staging and bounce buffers exist
    # before the clock, as they do in a program that saved before.
    small = {k: (v[: (1 << 20) // 4] if k in ("gpu", "host") else v[: 1 << 20]) if v is not None else None
             for k, v in full.items()}
    for wid in list(writers):
        path = os.path.join(a.dir, "peers-write-warm%s" % (".npy" if ".npy" in wid else ".bin"))
        try:
            do(wid, path, small)
        except Exception as e:  # a peer that imports but cannot run here: its row says why
            unavailable[wid] = "failed: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:200])
            writers.remove(wid)
        if os.path.exists(path):
            os.unlink(path)
    times = {w: [] for w in writers}
    order_log = []
    for r in range(a.write_rounds):
        order = writers[r % len(writers):] + writers[:r % len(writers)] if writers else []
        order_log.append(order)
        for wid in order:
            path = os.path.join(a.dir, "peers-write-%s%s" % (wid, ".npy" if ".npy" in wid else ".bin"))
            if os.path.exists(path):
                os.unlink(path)
            os.sync()  # the last writer's deletes and writeback are done before the clock
            ctx.sync()
            t0 = time.perf_counter()
            do(wid, path, full)
            times[wid].append(time.perf_counter() - t0)
            size = os.path.getsize(path)
            if size < n:
                raise SystemExit("%s wrote %d bytes, not %d" % (wid, size, n))
            bc.evict([path], "fadvise")
            os.unlink(path)
    os.sync()
    print(json.dumps({"bytes": n, "threads": threads, "chunk": chunk, "times": times, "order": order_log,
                      "labels": {w: WRITERS[w][0] for w in writers}, "unavailable": unavailable,
                      "versions": ctx.versions}))
    return 0


# ---- the parent ---------------------------------------------------------------------------


def child_cmd(a, extra):
    cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(a.threads), "--cache-drop", a.cache_drop,
           "--reader-budget", str(a.reader_budget)] + (["--fresh-memory"] if a.fresh_memory else [])
    return cmd + (["--host"] if a.host else []) + extra


def run_reader(a, rid, f, cold, cfg=None, repeat=None):
    kind, label_gpu, label_host, _, env_extra, role = READERS[rid]
    label = label_host if a.host else label_gpu
    if cfg is not None:
        label += " (%s)" % pc.describe(cfg)
    row = {"id": rid, "file": kind, "cache": "cold" if cold else "hot", "reader": label, "role": role}
    if cfg is not None:
        row["config"] = cfg
    if role == "ferry-cli":
        return dict(row, **run_cli(a, f, kind, cold))
    env = dict(os.environ, **env_extra)
    if rid.startswith("kvikio."):  # its defaults are its own, whatever the caller's environment says
        env = pc.kvikio_environment(cfg, env)
    if not cold:
        bc.warm([f["path"]], a.threads)
    repeat = repeat or (a.cold_repeat if cold else a.repeat)
    cmd = child_cmd(a, ["--worker", rid, "--file-json", json.dumps(f), "--repeat", str(repeat)]
                    + (["--cold"] if cold else []) + (["--config-json", json.dumps(cfg)] if cfg else []))
    row.update(bc.run_json(cmd, env=env, timeout=a.timeout))
    return row


def run_sweep(a, peer, f):
    """One peer's grid (bench/peer_configs.py), each configuration a reader in its own process,
    the file hot: {"rows": [...]} or {"unavailable": why}."""
    import importlib.util
    module = MODULE[peer]
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return {"unavailable": "No module named %r" % module.split(".")[0]}
    grid = {"kvikio": pc.kvikio_grid, "instanttensor": pc.instanttensor_grid,
            "fastsafetensors": pc.fastsafetensors_grid, "safetensors": pc.safetensors_grid}[peer]()
    rid = SWEPT[peer][1][0]
    rows = pc.sweep(grid, lambda cfg: run_reader(a, rid, f, cold=False, cfg=cfg, repeat=a.sweep_repeat))
    for r in rows:
        r["gbps"] = gbps(r) if "seconds" in r else None
    return {"rows": rows}


def best_reader(rid):
    """The swept peer whose "best" reader rid is, else None."""
    for peer, (_, ids) in SWEPT.items():
        if rid in ids:
            return peer
    return None


def run_cli(a, f, kind, cold):
    if not a.ferry or not os.access(a.ferry, os.X_OK):
        return {"unavailable": "no ferry CLI at %r (build it, or pass --ferry)" % a.ferry}
    cmd = [a.ferry, "load", f["path"], "--json"] + (["--dtype", "float32"] if kind == "raw" else [])
    cmd += ["--device", "host"] if a.host else []
    runs, method, last = [], None, None
    for _ in range(a.cold_repeat if cold else a.repeat):
        if cold:
            method = bc.evict([f["path"]], a.cache_drop)
        else:
            bc.warm([f["path"]], a.threads)
        last = bc.run_json(cmd, timeout=a.timeout)
        if "seconds" not in last:
            return {"skipped": last.get("skipped", "no timing in the CLI's JSON")}
        if last["bytes"] != f["payload"]:
            return {"skipped": "the CLI read %d bytes, not %d" % (last["bytes"], f["payload"])}
        runs.append(last["seconds"])
    r = {"seconds": min(runs), "runs": runs, "bytes": f["payload"], "io": last.get("io")}
    if method:
        r["cache_drop"] = method
    return r


def run_ferry_bench(a, f):
    """`ferry bench` on the raw file: the C++ routes and the engine's own ceilings (hot)."""
    if not a.ferry or not os.access(a.ferry, os.X_OK):
        return {"skipped": "no ferry CLI at %r" % a.ferry}
    cmd = [a.ferry, "bench", f["path"], "--threads", str(a.threads), "--task-size", "32M",
           "--repeat", str(a.repeat), "--no-naive", "--json"]
    cmd += ["--device", "host", "--paths", "host"] if a.host else ["--paths", "staged,stream,registered"]
    return bc.run_json(cmd, timeout=a.timeout)


def gbps(row):
    return row["bytes"] / row["seconds"] / 1e9 if "seconds" in row else None


def analyse(res, host):
    """Adds GB/s, ratios, the write statistics and the bars to the result."""
    rows = res["reads"]
    for r in rows:
        r["gbps"] = gbps(r)

    def find(rid, cache):
        for r in rows:
            if r["id"] == rid and r["cache"] == cache and r.get("gbps"):
                return r["gbps"]
        return None
    ceil = {"hot": find("ceiling.pread" if host else "ceiling.copy", "hot"), "cold": find("ceiling.pread", "cold")}
    res["ceilings"] = {"hot": ceil["hot"], "cold": ceil["cold"],
                       "hot_what": "pread into host memory" if host else "pinned host -> device copy",
                       "cold_what": "parallel buffered pread, page cache dropped"}
    if not host:
        res["ceilings"]["hot_pread"] = find("ceiling.pread", "hot")
    refs = {}
    for r in rows:
        if r["role"] in ("ferry", "ferry-cli") and r.get("gbps"):
            refs[(r["file"], r["cache"], r["role"])] = r["gbps"]
    for r in rows:
        g = r.get("gbps")
        if not g:
            continue
        if ceil[r["cache"]] and r["role"] != "ceiling":
            r["vs_ceiling"] = g / ceil[r["cache"]]
        for role, key in (("ferry", "ferry_py_over_this"), ("ferry-cli", "ferry_cli_over_this")):
            ref = refs.get((r["file"], r["cache"], role))
            if ref and r["role"] == "peer":
                r[key] = ref / g
    w = res.get("writes")
    if w and "times" in w:
        n = w["bytes"]
        w["stats"] = {k: bc.spread([n / t / 1e9 for t in v]) for k, v in w["times"].items() if v}
        base = {"raw": "raw.pwrite.host" if host else "raw.pwrite",
                "kvikio": "kvikio.write.host" if host else "kvikio.write"}
        w["paired"] = {}
        for k, v in w["times"].items():
            for name, b in base.items():
                if k != b and b in w["times"] and k.startswith("ferry"):
                    ratios = [tb / tk for tk, tb in zip(v, w["times"][b])]  # GB/s ratio per round
                    w["paired"]["%s/%s" % (k, name)] = bc.spread(ratios)
    bars = []
    if not host:
        kv = find("kvikio.best", "hot")
        py, cli = find("ferry.fromfile", "hot"), find("ferry.cli.raw", "hot")
        cpy, cpread = find("ferry.fromfile", "cold"), find("ceiling.pread", "cold")

        def bar(what, a_, b_, target):
            """target None: a ratio reported, not judged."""
            ratio = a_ / b_ if a_ and b_ else None
            bars.append({"what": what, "ratio": ratio, "target": target,
                         "met": None if ratio is None or target is None else ratio >= target})
        bar("hot raw -> GPU, Python vs the pinned copy ceiling", py, ceil["hot"], 0.95)
        bar("hot raw -> GPU, CLI vs the pinned copy ceiling", cli, ceil["hot"], 0.95)
        bar("hot raw -> GPU, Python vs KvikIO at its best (swept)", py, kv, None)
        bar("hot safetensors -> GPU, Python vs InstantTensor at its best (swept)",
            find("ferry.load.st", "hot"), find("instanttensor.best", "hot"), None)
        bar("cold raw -> GPU, Python vs a parallel buffered pread", cpy, cpread, 1.0)
        reg = find("ferry.fromfile.registered", "hot")
        if reg:  # the opt-in for a file loaded again and again, beside the one-shot bars above
            bar("hot raw -> GPU, Python, file registered once (opt-in), vs the ceiling", reg, ceil["hot"], 0.95)
            bar("hot raw -> GPU, Python, file registered once (opt-in), vs KvikIO at its best", reg, kv, None)
        if w and "stats" in w:
            for k in ("ferry.tofile.gpu", "ferry.save.npy.gpu", "ferry.tofile.host"):
                for name, target in (("raw", 0.9), ("kvikio", 1.0)):
                    p = w["paired"].get("%s/%s" % (k, name))
                    if p:
                        bars.append({"what": "durable write %s vs %s (paired mean)" % (k, name),
                                     "ratio": p["mean"], "target": target, "met": p["mean"] >= target})
    res["bars"] = bars


def fmt(x, spec="%.2f"):
    return spec % x if x is not None else ""


def harness_udev_record(folder):
    """The udev record scripts/gpu-check.sh writes for cuFile's tests, when it describes the
    disk of `folder`: with it cuFile serves that disk, so readers that use cuFile (KvikIO) do
    not run as they would on the user's machine."""
    try:
        st = os.stat(folder)
        path = "/run/udev/data/b%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
        with open(path) as f:
            return path if "E:FERRY_TEST_HARNESS=1" in f.read().split() else None
    except OSError:
        return None


def report(res):
    host = res["params"]["host"]
    out = []
    if res.get("udev_record"):
        out.append("\nwarning: %s (the test harness's udev record) is present: cuFile serves this disk, "
                   "so KvikIO's rows are not what its users see; remove it and run again" % res["udev_record"])
    c = res["ceilings"]
    out.append("\n## Reads: %s, best of %d hot / %d cold, one process per reader%s\n"
               % ("host memory" if host else "into GPU memory", res["params"]["repeat"], res["params"]["cold_repeat"],
                  "" if host else ("; every run into memory mapped for it (--fresh-memory)"
                                   if res["params"].get("fresh_memory") else
                                   "; the libraries' pools kept between a reader's runs")))
    out.append("ceiling: hot %s %s GB/s; cold %s %s GB/s; cold runs dropped the page cache by %s\n"
               % (c["hot_what"], fmt(c["hot"]), c["cold_what"], fmt(c["cold"]),
                  ", ".join(sorted({r["cache_drop"] for r in res["reads"] if r.get("cache_drop")})) or "-"))
    rows = []
    for r in res["reads"]:
        if r.get("gbps"):
            speed = "%.2f" % r["gbps"]
        elif "unavailable" in r:
            reason = r["unavailable"]
            speed = ("not importable (%s)" % reason) if ":" in reason and "No module" in reason else reason
        else:
            speed = "failed: " + r.get("skipped", "?")
        if len(speed) > 120:
            speed = speed[:117] + "..."
        rows.append([r["file"], r["cache"], r["reader"], speed, fmt(r.get("vs_ceiling"), "%.2fx"),
                     fmt(r.get("ferry_py_over_this"), "%.2fx"), fmt(r.get("ferry_cli_over_this"), "%.2fx")])
    out.append(bc.markdown(["file", "cache", "reader", "GB/s", "vs ceiling", "ferry Python / this",
                            "ferry CLI / this"], rows))
    for peer, sw in (res.get("sweeps") or {}).items():
        if not sw.get("rows"):
            out.append("\n%s's sweep: %s" % (peer, sw.get("unavailable") or "nothing ran"))
            continue
        best = pc.best_of(sw["rows"])
        out.append("\n%s's sweep (hot, %s file, best of %d each, a process each; best: %s):\n"
                   % (peer, SWEPT[peer][0], res["params"].get("sweep_repeat", 0), best["label"] if best else "-"))
        out.append(bc.markdown(["configuration", "GB/s"],
                               [[r["label"], "%.2f" % r["gbps"] if "gbps" in r else "failed: " + r["failed"]]
                                for r in sw["rows"]]))
    fb = res.get("ferry_bench") or {}
    if fb.get("results"):
        out.append("\n`ferry bench` on the raw file (C++, median of %d):\n" % fb.get("repeat", 0))
        out.append(bc.markdown(["measurement", "threads", "GB/s"],
                               [["%s%s" % (x["name"], " (ceiling)" if x["kind"] == "ceiling" else ""),
                                 x["threads"], "%.2f" % x["gbps"]] for x in fb["results"]]))
    elif fb.get("skipped"):
        out.append("\n`ferry bench`: " + fb["skipped"])
    w = res.get("writes") or {}
    if "stats" in w:
        out.append("\n## Durable writes: %s to a new file, %d rounds interleaved, %d threads, %s pieces for "
                   "the raw writer\n" % (bc.human(w["bytes"]), len(w["order"]), w["threads"], bc.human(w["chunk"])))
        rows = []
        for k, s in w["stats"].items():
            rows.append([WRITERS[k][0], "%.2f" % s["mean"], "%.2f-%.2f" % (s["min"], s["max"]),
                         "%.0f%%" % (100 * s["stdev"] / s["mean"]) if s["mean"] else ""])
        for k, why in w.get("unavailable", {}).items():
            rows.append([WRITERS[k][0], why if why.startswith("failed") else "not importable (%s)" % why, "", ""])
        out.append(bc.markdown(["writer", "mean GB/s", "min-max", "stdev"], rows))
        if w["paired"]:
            out.append("\nferry / baseline, paired round by round:\n")
            out.append(bc.markdown(["ratio", "mean", "min-max"],
                                   [[k, "%.2fx" % s["mean"], "%.2f-%.2fx" % (s["min"], s["max"])]
                                    for k, s in w["paired"].items()]))
    elif w.get("skipped"):
        out.append("\ndurable writes: failed: " + w["skipped"])
    if res["bars"]:
        out.append("\n## Bars and ratios\n")
        out.append(bc.markdown(["what", "ratio", "target", "met"],
                               [[b["what"], fmt(b["ratio"], "%.2fx"),
                                 ">= %.2fx" % b["target"] if b["target"] else "(reported)",
                                 {True: "yes", False: "no", None: "n/a" if b["target"] else ""}[b["met"]]]
                                for b in res["bars"]]))
    elif host:
        out.append("\n(--host: the bars are set for GPU memory and are not judged here)")
    print("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("FERRY_BENCH_DIR", "/tmp/ferry-peers-bench"),
                    help="where the files are written (a real disk for the cold and write rows)")
    ap.add_argument("--size", default="8G", help="raw float32 file (default 8G)")
    ap.add_argument("--npy-size", default="4G", help=".npy float32 file (default 4G)")
    ap.add_argument("--st-size", default="4G", help="safetensors file of bf16 tensors (default 4G)")
    ap.add_argument("--layers", type=int, default=100, help="decoder layers of the safetensors file "
                    "(9 tensors each; default 100: 903 tensors)")
    ap.add_argument("--repeat", type=int, default=3, help="hot runs per reader, best taken (default 3)")
    ap.add_argument("--cold-repeat", type=int, default=1, help="cold runs per reader (default 1)")
    ap.add_argument("--sweep-repeat", type=int, default=3,
                    help="runs per configuration in a peer's sweep, best taken (default 3)")
    ap.add_argument("--reader-budget", type=float, default=8.0,
                    help="a reader whose runs took this many seconds in all stops repeating (default 8)")
    ap.add_argument("--threads", type=int, default=16, help="threads of the pread ceiling (default 16)")
    ap.add_argument("--cache-drop", default="auto", choices=["auto", "drop_caches", "fadvise"],
                    help="how cold runs empty the page cache (auto: drop_caches when root)")
    ap.add_argument("--write-size", default="4G", help="bytes of each durable write (default 4G)")
    ap.add_argument("--write-rounds", type=int, default=5, help="interleaved rounds of writes (default 5)")
    ap.add_argument("--write-threads", type=int, default=0, help="raw pwrite threads (default: ferry's)")
    ap.add_argument("--write-chunk", default="4M", help="raw pwrite piece size (default 4M)")
    ap.add_argument("--only", default="", help="comma-separated reader ids to run (default: all); "
                    "'none' for no reads. Ids: " + ", ".join(READERS))
    ap.add_argument("--skip-cold", action="store_true")
    ap.add_argument("--skip-write", action="store_true")
    ap.add_argument("--skip-ferry-bench", action="store_true")
    ap.add_argument("--fresh-memory", action="store_true",
                    help="empty CuPy's and PyTorch's memory pools between a reader's runs, so that every run "
                    "reads into memory mapped for it (slower to copy into, by about a tenth on the H200 "
                    "machine); by default the pools keep it, as in a program that loads repeatedly")
    ap.add_argument("--host", action="store_true", help="host-memory rows only (no GPU needed)")
    ap.add_argument("--ferry", default=os.environ.get("FERRY_CLI", os.path.join(ROOT, "build", "tools", "ferry")),
                    help="the ferry CLI (default build/tools/ferry, or $FERRY_CLI)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds for one worker")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--plot", help="draw the results into this PNG (needs matplotlib)")
    ap.add_argument("--replot", metavar="JSON", help="only redraw --plot from an earlier --json")
    # internal: one worker
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--write-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--file-json", help=argparse.SUPPRESS)
    ap.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config-json", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.write_size = bc.parse_size(a.write_size)
    a.write_chunk = bc.parse_size(a.write_chunk)
    if a.worker:
        return worker(a)
    if a.write_worker:
        return write_worker(a)
    if a.replot:
        if not a.plot:
            ap.error("--replot needs --plot FILE.png")
        with open(a.replot) as f:
            return plot(json.load(f), a.plot)
    if a.plot and plot_missing():
        bc.log("peers_bench: --plot: %s; measuring without the plot" % plot_missing())

    if not a.host:
        import ferry
        if ferry.cuda_device_count() == 0:
            bc.log("peers_bench: no usable GPU: %s; --host measures the host-memory rows"
                   % ferry.cuda_unavailable_reason())
            return 2
    t_start = time.perf_counter()
    only = [x for x in a.only.split(",") if x]
    unknown = [x for x in only if x not in READERS and x != "none"]
    if unknown:
        ap.error("--only: unknown reader ids %s" % ", ".join(unknown))
    files = prepare_files(a.dir, bc.parse_size(a.size), bc.parse_size(a.npy_size), bc.parse_size(a.st_size),
                          a.layers)
    res = {"params": {"host": a.host, "fresh_memory": a.fresh_memory, "repeat": a.repeat,
                      "cold_repeat": a.cold_repeat, "sweep_repeat": a.sweep_repeat, "threads": a.threads,
                      "dir": a.dir, "cache_drop": bc.cache_drop_method(a.cache_drop)},
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                       "numa_nodes": len(bc.numa_nodes()), "gpu_numa_nodes": bc.gpu_numa_nodes()},
           "files": files, "reads": [], "phases": {}, "udev_record": harness_udev_record(a.dir)}
    if res["udev_record"]:
        bc.log("peers_bench: warning: %s, the test harness's udev record, is present: KvikIO will read "
               "through cuFile, not as its users do" % res["udev_record"])
    wanted = [r for r in READERS if (not only or r in only)
              and (READERS[r][2] is not None or not a.host)]

    def where(r):
        """' (cpu 3, node 0)' on machines of several NUMA nodes, else ''."""
        pl = r.get("placement") or {}
        if res["machine"]["numa_nodes"] < 2 or "cpu" not in pl:
            return ""
        return " (cpu %d, node %s; GPU on node %s)" % (pl["cpu"], pl.get("node"),
                                                       ",".join(map(str, res["machine"]["gpu_numa_nodes"])) or "?")

    def phase(name, t0):
        res["phases"][name] = time.perf_counter() - t0
        bc.log("peers_bench: %s done in %.0f s (%.0f s in all)" % (name, res["phases"][name],
                                                                  time.perf_counter() - t_start))

    # Each swept peer's grid first (hot), so that its "best" readers run at what it found.
    t0 = time.perf_counter()
    res["sweeps"], best_cfg = {}, {}
    for peer, (kind, ids) in SWEPT.items():
        if not any(r in wanted for r in ids):
            continue
        sw = run_sweep(a, peer, files[kind])
        res["sweeps"][peer] = sw
        b = pc.best_of(sw.get("rows", []))
        best_cfg[peer] = b["config"] if b else None
        bc.log("peers_bench: sweep %-16s %s" % (peer, "best %.2f GB/s at %s (%d configurations)"
                                                 % (b["gbps"], b["label"], len(sw["rows"])) if b else
                                                 sw.get("unavailable") or "no configuration ran"))
    if res["sweeps"]:
        phase("sweeps", t0)

    def read(rid, cold):
        peer = best_reader(rid)
        if not peer:
            return run_reader(a, rid, files[READERS[rid][0]], cold=cold)
        kind, label_gpu, label_host = READERS[rid][:3]
        row = {"id": rid, "file": kind, "cache": "cold" if cold else "hot", "role": "peer",
               "reader": label_host if a.host else label_gpu}
        sw = res["sweeps"].get(peer, {})
        best = pc.best_of(sw.get("rows", []))
        if best is None:
            return dict(row, unavailable=sw.get("unavailable") or "its sweep found no configuration that runs here")
        if rid == SWEPT[peer][1][0] and not cold:  # the sweep measured it: its fastest process
            return dict(row, **{k: v for k, v in best.items() if k not in ("label", "gbps")},
                        reader=row["reader"] + " (%s)" % best["label"])
        return run_reader(a, rid, files[kind], cold=cold, cfg=best["config"])

    t0 = time.perf_counter()
    for rid in wanted:
        r = read(rid, cold=False)
        bc.log("peers_bench: hot  %-24s %s%s" % (rid, "%.2f GB/s" % gbps(r) if "seconds" in r
                                                else r.get("unavailable") or r.get("skipped"), where(r)))
        res["reads"].append(r)
    if not a.skip_ferry_bench and (not only or "ferry.fromfile" in only):
        bc.warm([files["raw"]["path"]], a.threads)
        res["ferry_bench"] = run_ferry_bench(a, files["raw"])
    phase("hot reads", t0)
    if not a.skip_write:
        t0 = time.perf_counter()
        cmd = child_cmd(a, ["--write-worker", "--dir", a.dir, "--write-size", str(a.write_size),
                            "--write-rounds", str(a.write_rounds), "--write-threads", str(a.write_threads),
                            "--write-chunk", str(a.write_chunk)])
        kv = best_cfg.get("kvikio") or {"num_threads": 16, "task_size": 4 << 20, "bounce_buffer_size": 16 << 20}
        res["writes"] = bc.run_json(cmd, env=dict(os.environ, **pc.kvikio_env(kv)), timeout=max(a.timeout, 1800))
        phase("durable writes", t0)
    if not a.skip_cold:
        t0 = time.perf_counter()
        for rid in [r for r in COLD if r in wanted]:
            r = read(rid, cold=True)
            bc.log("peers_bench: cold %-24s %s%s" % (rid, "%.2f GB/s" % gbps(r) if "seconds" in r
                                                    else r.get("unavailable") or r.get("skipped"), where(r)))
            res["reads"].append(r)
        phase("cold reads", t0)
    res["phases"]["total"] = time.perf_counter() - t_start
    analyse(res, a.host)
    report(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    if a.plot and not plot_missing():
        plot(res, a.plot)
    return 0


def plot_missing():
    import importlib.util
    return "" if importlib.util.find_spec("matplotlib") else "matplotlib is not installed (pip install matplotlib)"


def plot(res, path):
    import plot_bench
    plot_bench.plot_peers(res, path)
    bc.log("peers_bench: plot written to %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
