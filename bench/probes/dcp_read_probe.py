#!/usr/bin/env python3
"""Where ferry.dcp's read_data spends its time per item: bench/dcp_bench.py's state dict saved
by ferry's writer, loaded with dcp.load into tensors on --device (hot), the best round's
phases from the reader's stats, then one load with read_data under cProfile (top functions by
their own time; nanobind calls count in their Python callers). Beside the load, in the same
rounds: the load with verify="never" (what the checksums cost), the reader's own
pieces (each item's file, offset and destination, recorded from one load) read by ferry alone,
and ferry's raw read of the files into one buffer: what the pieces' layout costs the engine,
apart from DCP and the reader's per-item work.
    python3 bench/probes/dcp_read_probe.py [--size 512M] [--tensors 512] [--device cuda]
"""
import argparse, cProfile, os, pstats, shutil, sys, tempfile, time, warnings
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import dcp_bench as b  # noqa: E402
import bench_common as bc  # noqa: E402

warnings.filterwarnings("ignore")
ap = argparse.ArgumentParser()
ap.add_argument("--size", default="512M")
ap.add_argument("--tensors", type=int, default=512)
ap.add_argument("--device", default="cpu")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--top", type=int, default=30)
a = ap.parse_args()
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import ferry.dcp  # noqa: E402
from ferry.dcp import _reader, _reads  # noqa: E402

sd = b.state_dict(torch, bc.parse_size(a.size), a.tensors, a.device)
folder = tempfile.mkdtemp(prefix="ferry-dcp-read-")
try:
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder, sync_files=False))
    out = b.blank(torch, sd)
    best = None
    recorded: list = []
    submit = _reads.submit_pieces

    def record(files, pieces, *args, **kw):
        recorded.extend(pieces)
        return submit(files, pieces, *args, **kw)
    _reads.submit_pieces = record
    dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(folder, prefetch=None))
    _reads.submit_pieces = submit
    paths = b.files_of(folder)
    lengths = [os.path.getsize(p) for p in paths]
    raw = torch.empty(sum(lengths), dtype=torch.uint8, device=a.device)
    extra: dict = {}

    def keep(name, t):
        extra[name] = min(extra.get(name, 1e9), t)
    for _ in range(a.rounds):
        b.sync_device(torch, a.device)
        t0 = time.perf_counter()
        dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(folder, prefetch=None, verify="never"))
        b.sync_device(torch, a.device)
        keep("dcp.load, verify='never'", time.perf_counter() - t0)
        files = _reads.Files()
        t0 = time.perf_counter()
        _reads.read_pieces(files, recorded)
        b.sync_device(torch, a.device)
        keep("the reader's %d pieces read by ferry alone" % len(recorded), time.perf_counter() - t0)
        files.close()
        keep("raw read of the %d files into one buffer" % len(paths), b.raw_read(ferry, paths, lengths, raw))
    for _ in range(a.rounds):
        reader = ferry.dcp.FileSystemReader(folder, prefetch=None)
        b.sync_device(torch, a.device)
        t0 = time.perf_counter()
        dcp.load(out, storage_reader=reader)
        b.sync_device(torch, a.device)
        t = time.perf_counter() - t0
        if best is None or t < best[0]:
            best = (t, dict(reader.stats))
    b.check(torch, sd, out)
    t, st = best
    print("dcp.load %.1f ms: planning %.1f ms, read_data %.1f ms (%d items)"
          % (t * 1e3, st["planning_seconds"] * 1e3, st["read_data_seconds"] * 1e3, a.tensors * 4))
    for name, t in extra.items():
        print("%s: %.1f ms" % (name, t * 1e3))
    prof = cProfile.Profile()
    inner = _reader.FileSystemReader.read_data

    def read_data(self, plan, planner):
        prof.enable()
        try:
            return inner(self, plan, planner)
        finally:
            prof.disable()
    _reader.FileSystemReader.read_data = read_data
    dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(folder, prefetch=None))
    pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)
finally:
    shutil.rmtree(folder, ignore_errors=True)
