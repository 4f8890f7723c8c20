"""Each peer's documented knobs, the configurations the benchmarks sweep, and one way to run each.

A ratio against a peer is only worth what the peer's configuration is worth: run with a knob left
at a value its documentation tells users to change, a peer looks slower than its users see it.
So every benchmark that sets ferry beside a peer runs the peer twice over:

  default   the library as installed, nothing set (what a new user gets)
  sweep     every configuration of the grid below, each in a fresh process like every other
            reader (the best of `repeat` runs). A first version ran a peer's whole grid in one
            process; on the H200 machine it measured later configurations up to a sixth below
            what fresh processes measured in the next run (InstantTensor's MMAP backend 27.9
            against 33.8 GB/s, KvikIO at 64 threads 39.0 against 43.9), which favours whichever
            configuration runs first
  best      the fastest configuration of the sweep; its settings are printed beside its figure
            and every ratio is taken against it

The knobs, from each peer's own documentation:
  KvikIO 26.10      `kvikio.defaults.set`: num_threads (default 1), task_size (4 MiB),
                    bounce_buffer_size (16 MiB) (KVIKIO_NTHREADS, KVIKIO_TASK_SIZE,
                    KVIKIO_BOUNCE_BUFFER_SIZE)
  InstantTensor     `safe_open(files, framework="pt", device=0, backend=..., chunk_size=...,
  0.2.2             io_depth=..., concurrency=...)`, all shards in one call; backend a `Backend`
                    or `BackendPolicy.BUFFERED` (URING_BUFFERED, then MMAP); the default tries
                    URING, then AIO (O_DIRECT).
                    INSTANTTENSOR_DIRECT_IO is not one of its settings: it changes nothing.
  fastsafetensors   `SafeTensorsFileLoader(pg, device, nogds=..., max_threads=16,
  0.5.0             bbuf_size_kb=16384)`; nogds=True where there is no GPUDirect Storage
  safetensors 0.8   `load_file(path, device="cuda")` straight to the device, or to the host and
                    then `.to("cuda")`

A configuration a peer refuses on this machine (an io_uring backend where the kernel blocks it, say)
is a row with its error, never left out silently.
"""

import itertools

MiB = 1 << 20


def kvikio_grid(threads=(16, 32, 64), task_sizes=(4 * MiB, 16 * MiB, 64 * MiB),
                bounce_sizes=(16 * MiB, 64 * MiB)):
    """Its default (1 thread) is the "defaults" row."""
    return [{"num_threads": t, "task_size": ts, "bounce_buffer_size": bb}
            for t, ts, bb in itertools.product(threads, task_sizes, bounce_sizes)]


def instanttensor_grid():
    """InstantTensor's page-cache backends, each at its own chunk size and at 16 MiB. Its
    O_DIRECT backends (URING, AIO: its default) read past the page cache, at the disk's speed
    whether the file is hot or not (0.01-0.13 GB/s on a 256 MiB file on the H200 machine): the
    "defaults" row runs them, and the cold rows, where they are what InstantTensor recommends."""
    out = []
    for name in ("BackendPolicy.BUFFERED", "URING_BUFFERED", "MMAP"):
        for chunk in (None, 16 * MiB):
            out.append({"backend": name, "chunk_size": chunk})
    # In a wider grid run in one process on the H200 machine (a 4 GiB file, hot), AIO_BUFFERED ran
    # at 5.5 GB/s against URING_BUFFERED's 26, 64 MiB chunks at a third of each backend's own
    # chunk size, deeper queues (io_depth 32, concurrency 16) at half: AIO_BUFFERED at its own
    # chunk size stands for them.
    out.append({"backend": "AIO_BUFFERED", "chunk_size": None})
    return out


def fastsafetensors_grid(threads=(16, 32, 64), bbuf_kb=(16 * 1024,)):
    return [{"nogds": True, "max_threads": t, "bbuf_size_kb": b} for t, b in itertools.product(threads, bbuf_kb)]


def safetensors_grid():
    return [{"device": "cuda"}, {"device": "cpu", "then": "to('cuda')"}]


def describe(cfg):
    """A configuration as its users would write it, e.g. 'num_threads=16 task_size=16M'."""
    if not cfg:
        return "defaults"

    def v(x):
        if isinstance(x, int) and x >= MiB and x % MiB == 0:
            return "%dM" % (x // MiB)
        return str(x)
    return " ".join("%s=%s" % (k, v(x)) for k, x in cfg.items() if not k.startswith("_") and x is not None)


def plain(cfg):
    """The JSON-able part of a configuration (without the library objects it carries)."""
    return {k: v for k, v in cfg.items() if not k.startswith("_")}


# ---- one load per peer, over a list of files --------------------------------------------------


def kvikio_env(cfg):
    """A KvikIO configuration as the environment variables its documentation gives first: the
    worker process starts with them, as a user's program would."""
    n = str(cfg["num_threads"])
    return {"KVIKIO_NTHREADS": n, "KVIKIO_NUM_THREADS": n, "KVIKIO_TASK_SIZE": str(cfg["task_size"]),
            "KVIKIO_BOUNCE_BUFFER_SIZE": str(cfg["bounce_buffer_size"])}


def kvikio_environment(cfg=None, base=None):
    """The environment of a process that runs KvikIO in configuration `cfg` (None: its defaults,
    whatever the caller's environment says): `base` (os.environ) without KvikIO's variables,
    plus cfg's."""
    import os

    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("KVIKIO_")}
    env.update(kvikio_env(cfg) if cfg else {})
    return env


def instanttensor_backend(it, name):
    return it.BackendPolicy.BUFFERED if name == "BackendPolicy.BUFFERED" else getattr(it.Backend, name)


def instanttensor_load(it, files, cfg):
    """{name: tensor} through one safe_open over every file, as InstantTensor recommends."""
    kw = {}
    if cfg:
        kw["backend"] = instanttensor_backend(it, cfg["backend"])
        for k in ("chunk_size", "io_depth", "concurrency"):
            if cfg.get(k):
                kw[k] = cfg[k]
    out = {}
    with it.safe_open(list(files), framework="pt", device=0, **kw) as fh:
        for name, t in fh.tensors():
            out[name] = t
    return out


def fastsafetensors_load(fst, files, cfg, count):
    """Loads every file onto cuda:0; returns count(views) before the loader's buffers are freed."""
    kw = dict(cfg) if cfg else {"nogds": True}  # no GPUDirect Storage here: its documented switch
    loader = fst.SafeTensorsFileLoader(fst.SingleGroup(), "cuda:0", **kw)
    try:
        loader.add_filenames({0: list(files)})
        fb = loader.copy_files_to_device()
        try:
            return count({k: fb.get_tensor(k) for k in fb.key_to_rank_lidx.keys()})
        finally:
            fb.close()
    finally:
        loader.close()


def safetensors_load(st_torch, files, cfg):
    out = {}
    device = (cfg or {}).get("device", "cuda")
    for p in files:
        d = st_torch.load_file(p, device=device)
        if device == "cpu":
            d = {k: t.to("cuda") for k, t in d.items()}
        out.update(d)
    return out


# ---- the sweep --------------------------------------------------------------------------------


def sweep(configs, measure):
    """measure(cfg) -> a reader's result ({"seconds", ...} or {"skipped"/"unavailable": why}) for
    every configuration, each in a process of its own; returns [{"config", "label", "seconds" |
    "failed", ...}] in the order given."""
    rows = []
    for cfg in configs:
        row = {"config": plain(cfg), "label": describe(cfg)}
        try:
            r = measure(cfg)
        except Exception as e:  # the harness itself: say so in the row, go on with the grid
            r = {"skipped": "%s: %s" % (type(e).__name__, e)}
        if "seconds" in r:
            row.update({k: v for k, v in r.items() if k not in ("config", "label", "id", "reader")})
        else:  # a configuration the peer refuses here: its row says why
            why = r.get("skipped") or r.get("unavailable") or "no result"
            row["failed"] = (str(why).splitlines() or [""])[0][:200]
        rows.append(row)
    return rows


def best_of(rows):
    ok = [r for r in rows if "seconds" in r]
    return min(ok, key=lambda r: r["seconds"]) if ok else None
