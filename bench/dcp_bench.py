#!/usr/bin/env python3
"""torch.distributed.checkpoint through ferry.dcp against torch's own writer and reader, side by
side in one run on the same state dict (docs/dcp.md, docs/benchmarks.md).

The state dict is shaped like a training checkpoint: ``--tensors`` bf16 parameters and, for
each, two fp32 AdamW moments and a step, ``--size`` bytes in all, on ``--device`` (cpu or cuda).
Measured, best of ``--rounds`` (configurations interleaved round by round):

* save, durable (``sync_files=True``) and into the page cache (``sync_files=False``):
  ferry.dcp.FileSystemWriter and torch's FileSystemWriter, each at its default ``thread_count``
  (files per rank) and at each of ``--threads`` (each one's best is the row to compare); the
  disk's ceiling, 16 threads' ``pwrite`` + ``fsync`` of the same bytes from host memory (pinned
  on a GPU machine) into one file and into 16 files side by side, and the page cache's, the
  same writes without the ``fsync``;
* load, hot (the files in the page cache), into tensors on the device: ferry.dcp.FileSystemReader
  (as it comes, checking the checksums its writer recorded; with ``verify="never"``; reading
  ahead within its default memory budget; and with a budget that lets it read the whole
  checkpoint ahead while DCP plans), torch's FileSystemReader, and ferry's raw read of the same
  files (``ferry.read_batch`` of every byte) as the ceiling;
* load, cold (the files taken out of the page cache before each load: ``drop_caches`` as root,
  else ``posix_fadvise``): ferry's reader with and without its checks, torch's reader, and a
  16-thread buffered read of the files into host memory as the ceiling;
* ``dcp.async_save`` with ferry's writer: the time the caller is blocked (staging) and the time
  until the save is done, against one copy of the state into host memory (pinned on a GPU);
  and a stand-in training step (matmuls on the device) timed alone and while the save writes.

    python bench/dcp_bench.py --size 256M --tensors 64 --device cpu
"""

import argparse
import json
import os
import shutil
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as bc  # noqa: E402
from peers_bench import pwrite_fsync  # noqa: E402


def state_dict(torch, size, tensors, device):
    """``tensors`` bf16 parameters with two fp32 moments each (10 bytes an element) and a step."""
    per = max(1, size // (10 * tensors))
    cols = 1024 if per >= 4096 else 16
    rows = max(1, per // cols)
    g = torch.Generator().manual_seed(0)
    model, optim = {}, {}
    for i in range(tensors):
        w = torch.randn(rows, cols, generator=g)
        model["layers.%d.weight" % i] = w.to(torch.bfloat16).to(device)
        optim["layers.%d.weight" % i] = {"exp_avg": (w * 0.1).to(device), "exp_avg_sq": (w * w).to(device),
                                         "step": torch.tensor(10.0)}
    return {"model": model, "optim": {"state": optim}, "step": 10}


def nbytes(torch, sd):
    if isinstance(sd, dict):
        return sum(nbytes(torch, v) for v in sd.values())
    return sd.numel() * sd.element_size() if isinstance(sd, torch.Tensor) else 0


def blank(torch, sd):
    if isinstance(sd, dict):
        return {k: blank(torch, v) for k, v in sd.items()}
    return torch.empty_like(sd) if isinstance(sd, torch.Tensor) else sd


def files_of(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".distcp"))


def sync_device(torch, device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_save(dcp, sd, folder, writer):
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    dcp.save(sd, storage_writer=writer)
    return time.perf_counter() - t0


def ceiling(folder, host, files, sync=True):
    """Seconds to write ``host``'s bytes with 16 threads and, with ``sync``, fsync them (without,
    into the page cache only): into one file, or cut into ``files`` files written side by side (16 // files threads each), as a rank's
    ``thread_count`` files are; a buffered write takes its file's inode lock, so one file's
    writes into the page cache take turns."""
    import threading

    mem = memoryview(host.numpy())
    part = -(-len(mem) // files)
    paths = [os.path.join(folder, "ceiling%d.bin" % i) for i in range(files)]
    errors = []

    def one(i):
        try:
            pwrite_fsync(paths[i], mem[i * part:(i + 1) * part], max(1, 16 // files), 4 << 20, sync)
        except Exception as e:
            errors.append(e)
    t0 = time.perf_counter()
    pool = [threading.Thread(target=one, args=(i,)) for i in range(files)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    t = time.perf_counter() - t0
    for p in paths:
        if os.path.exists(p):
            os.remove(p)
    if errors:
        raise errors[0]
    return t


def measure_saves(a, torch, dcp, ferry, sd, total, rows):
    folder = os.path.join(a.dir, "save")
    host = torch.empty(total, dtype=torch.uint8, pin_memory=a.device.startswith("cuda"))
    host.fill_(1)
    for sync in (True, False):
        configs = [("ferry.dcp.FileSystemWriter", lambda s=sync: ferry.dcp.FileSystemWriter(folder, sync_files=s))]
        configs += [("ferry.dcp.FileSystemWriter thread_count=%d" % t,
                     lambda s=sync, t=t: ferry.dcp.FileSystemWriter(folder, sync_files=s, thread_count=t))
                    for t in a.threads if t > 1]
        configs += [("torch FileSystemWriter (default)", lambda s=sync: dcp.FileSystemWriter(folder, sync_files=s))]
        configs += [("torch FileSystemWriter thread_count=%d" % t,
                     lambda s=sync, t=t: dcp.FileSystemWriter(folder, sync_files=s, thread_count=t))
                    for t in a.threads]
        best = {}
        for _ in range(a.rounds):
            for name, make in configs:
                best[name] = min(best.get(name, 1e9), time_save(dcp, sd, folder, make()))
            for files in (1, 16):
                name = "ceiling: 16-thread pwrite%s, %d file%s" % (" + fsync" if sync else "", files,
                                                                  "s" if files > 1 else "")
                best[name] = min(best.get(name, 1e9), ceiling(a.dir, host, files, sync))
        what = "save, durable (sync_files=True)" if sync else "save into the page cache (sync_files=False)"
        for name, s in best.items():
            rows.append({"what": what, "who": name, "seconds": s, "GB/s": total / s / 1e9})


def readers(ferry, dcp, folder):
    """The readers every load runs: ferry's as it comes (checking the bytes against the
    checksums its writer recorded), ferry's without the checks (the ceilings check nothing),
    torch's (no setting to sweep)."""
    return [("ferry.dcp.FileSystemReader", lambda: ferry.dcp.FileSystemReader(folder)),
            ("ferry.dcp.FileSystemReader, verify='never'",
             lambda: ferry.dcp.FileSystemReader(folder, verify="never")),
            ("torch FileSystemReader", lambda: dcp.FileSystemReader(folder))]


def raw_read(ferry, paths, sizes, raw):
    """Seconds for ferry to read the files whole into ``raw`` (as long as they are together),
    one ``read_batch``: the hot load's ceiling."""
    t0 = time.perf_counter()
    bc.read_whole(ferry, paths, sizes, raw)
    return time.perf_counter() - t0


def measure_loads(a, torch, dcp, ferry, sd, total, rows):
    folder = os.path.join(a.dir, "load")
    shutil.rmtree(folder, ignore_errors=True)
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder, sync_files=False))
    paths = files_of(folder)
    bc.warm(paths)
    out = blank(torch, sd)
    sizes = [os.path.getsize(p) for p in paths]
    raw = torch.empty(sum(sizes), dtype=torch.uint8, device=a.device)
    # Beside the readers every load runs (no reads ahead), ferry's reading ahead within its
    # default memory budget (three quarters of 1 GiB), and with a budget that lets it read the
    # whole checkpoint ahead while DCP plans.
    whole = (sum(sizes) * 4) // 3 + (64 << 20)
    base = readers(ferry, dcp, folder)
    configs = base[:2] + [("ferry.dcp.FileSystemReader, prefetch=%s" % a.device,
                           lambda: ferry.dcp.FileSystemReader(folder, prefetch=a.device)),
                          ("ferry.dcp.FileSystemReader, all read ahead (memory_budget=%d MiB)" % (whole >> 20),
                           lambda: ferry.dcp.FileSystemReader(folder, prefetch=a.device, memory_budget=whole))] + base[2:]
    best, phases = {}, {}
    for _ in range(a.rounds):
        for name, make in configs:
            sync_device(torch, a.device)
            reader = make()
            t0 = time.perf_counter()
            dcp.load(out, storage_reader=reader)
            sync_device(torch, a.device)
            t = time.perf_counter() - t0
            if t < best.get(name, 1e9):
                best[name] = t
                phases[name] = getattr(reader, "stats", {})
        name = "ceiling: ferry.read_batch of the files"
        best[name] = min(best.get(name, 1e9), raw_read(ferry, paths, sizes, raw))
    check(torch, sd, out)
    for name, s in best.items():
        rows.append({"what": "load, hot, into %s tensors" % a.device, "who": name, "seconds": s,
                     "GB/s": total / s / 1e9})
    # Where ferry's best loads went: DCP's planning (reads ahead running), the wait for them,
    # the reader's read_data.
    for name, st in phases.items():
        if "read_data_seconds" in st:
            print("%s: planning %.1f ms, waiting for reads ahead %.1f ms, read_data %.1f ms, %.2f GB read ahead"
                  % (name, st.get("planning_seconds", 0) * 1e3, st.get("prefetch_wait_seconds", 0) * 1e3,
                     st["read_data_seconds"] * 1e3, st.get("prefetched_bytes", 0) / 1e9), file=sys.stderr)


def measure_cold_loads(a, torch, dcp, ferry, sd, total, rows):
    """Loads with the files out of the page cache before each (bench_common.evict): ferry's
    reader, the same without its checks, torch's reader, and the ceiling, a 16-thread buffered
    read of the same files into host memory (pinned on a GPU machine)."""
    folder = os.path.join(a.dir, "cold")
    shutil.rmtree(folder, ignore_errors=True)
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder, sync_files=True))
    paths = files_of(folder)
    out = blank(torch, sd)
    host = torch.empty(sum(os.path.getsize(p) for p in paths), dtype=torch.uint8,
                       pin_memory=a.device.startswith("cuda"))
    into = memoryview(host.numpy())
    configs = readers(ferry, dcp, folder)
    best, method = {}, None
    for _ in range(a.rounds):
        for name, make in configs:
            sync_device(torch, a.device)
            reader = make()
            method = bc.evict(paths, a.cache_drop)
            t0 = time.perf_counter()
            dcp.load(out, storage_reader=reader)
            sync_device(torch, a.device)
            best[name] = min(best.get(name, 1e9), time.perf_counter() - t0)
        name = "ceiling: 16-thread buffered read of the files"
        method = bc.evict(paths, a.cache_drop)
        t0 = time.perf_counter()
        bc.parallel_pread(paths, 16, into=into)
        best[name] = min(best.get(name, 1e9), time.perf_counter() - t0)
    check(torch, sd, out)
    for name, s in best.items():
        rows.append({"what": "load, cold (%s), into %s tensors" % (method, a.device), "who": name,
                     "seconds": s, "GB/s": total / s / 1e9})


def check(torch, want, got):
    if isinstance(want, dict):
        for k in want:
            check(torch, want[k], got[k])
    elif isinstance(want, torch.Tensor):
        if not torch.equal(want.cpu(), got.cpu()):
            raise SystemExit("dcp_bench: a loaded tensor differs from the saved one")


def measure_async(a, torch, dcp, ferry, sd, total, rows):
    folder = os.path.join(a.dir, "async")
    pin = a.device.startswith("cuda")
    staged = blank(torch, {"x": torch.empty(total, dtype=torch.uint8)})["x"]
    staged = staged.pin_memory() if pin else staged
    flat = [t for t in _tensors(torch, sd)]
    best = {}
    # A training loop's writer, made once: with cache_staged_state_dict=True its staging copy
    # is allocated (and pinned) by the first save and reused by every later one.
    reused = ferry.dcp.FileSystemWriter(folder + "-reused", cache_staged_state_dict=True)
    dcp.async_save(sd, storage_writer=reused).result()
    for _ in range(a.rounds):
        shutil.rmtree(folder + "-reused", ignore_errors=True)
        sync_device(torch, a.device)
        t0 = time.perf_counter()
        fut = dcp.async_save(sd, storage_writer=reused)
        best["blocked reused"] = min(best.get("blocked reused", 1e9), time.perf_counter() - t0)
        fut.result()
        shutil.rmtree(folder, ignore_errors=True)
        sync_device(torch, a.device)
        t0 = time.perf_counter()
        fut = dcp.async_save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
        blocked = time.perf_counter() - t0
        overlapped = training_steps(torch, a.device, until=fut.done)
        fut.result()
        done = time.perf_counter() - t0
        alone = training_steps(torch, a.device, count=max(3, len(overlapped)))
        t0 = time.perf_counter()
        at = 0
        for t in flat:   # one copy of the state into host memory: what staging must do at least
            n = t.numel() * t.element_size()
            staged[at:at + n].copy_(t.reshape(-1).view(torch.uint8), non_blocking=pin)
            at += n
        sync_device(torch, a.device)
        copy = time.perf_counter() - t0
        for k, v in (("blocked", blocked), ("done", done), ("copy", copy),
                     ("step alone", sum(alone) / len(alone)),
                     ("step overlapped", sum(overlapped) / max(1, len(overlapped)))):
            best[k] = min(best.get(k, 1e9), v)
    rows.append({"what": "async_save", "who": "ferry.dcp.FileSystemWriter, a new one each save: caller blocked",
                 "seconds": best["blocked"], "GB/s": total / best["blocked"] / 1e9})
    rows.append({"what": "async_save", "who": "ferry.dcp.FileSystemWriter, made once with "
                 "cache_staged_state_dict=True: caller blocked", "seconds": best["blocked reused"],
                 "GB/s": total / best["blocked reused"] / 1e9})
    rows.append({"what": "async_save", "who": "ferry.dcp.FileSystemWriter: save done",
                 "seconds": best["done"], "GB/s": total / best["done"] / 1e9})
    rows.append({"what": "async_save", "who": "one copy of the state to %s host memory" %
                 ("pinned" if pin else "pageable"), "seconds": best["copy"], "GB/s": total / best["copy"] / 1e9})
    for k in ("step alone", "step overlapped"):
        rows.append({"what": "async_save", "who": "training step (%s matmuls), %s" %
                     (STEP_MATMULS, "while the save writes" if k.endswith("overlapped") else "alone"),
                     "seconds": best[k], "GB/s": None})


STEP_MATMULS = 8


def training_steps(torch, device, until=None, count=None, limit=120.0):
    """Times stand-in training steps (STEP_MATMULS matmuls of 1024x1024 fp32 on the device),
    until ``until()`` is true or ``count`` steps ran; bounded by ``limit`` seconds. One step
    runs at least (a save may end before the first step starts)."""
    x = torch.randn(1024, 1024, device=device)
    times, end = [], time.perf_counter() + limit
    while not times or (time.perf_counter() < end and (until is None or not until())
                        and (count is None or len(times) < count)):
        t0 = time.perf_counter()
        y = x
        for _ in range(STEP_MATMULS):
            y = torch.mm(y, x) * 1e-3
        sync_device(torch, device)
        times.append(time.perf_counter() - t0)
    return times


def _tensors(torch, sd):
    if isinstance(sd, dict):
        for v in sd.values():
            yield from _tensors(torch, v)
    elif isinstance(sd, torch.Tensor):
        yield sd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="256M", help="bytes of the state dict (e.g. 64M, 8G)")
    ap.add_argument("--tensors", type=int, default=64, help="bf16 parameters (each with two fp32 moments)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dir", default="/tmp/ferry-dcp-bench")
    ap.add_argument("--threads", default="1,2,4,8,16", help="torch writer thread_count values to sweep")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="save,load,cold,async", help="which parts to run")
    ap.add_argument("--cache-drop", default="auto", choices=["auto", "drop_caches", "fadvise"],
                    help="how cold loads empty the page cache (auto: drop_caches as root, else fadvise)")
    ap.add_argument("--json", help="write the rows here too")
    a = ap.parse_args()
    a.threads = [int(t) for t in a.threads.split(",") if t]
    warnings.simplefilter("ignore")
    import torch
    import torch.distributed.checkpoint as dcp

    import ferry
    import ferry.dcp

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("dcp_bench: --device cuda needs a GPU and torch with CUDA")
    os.makedirs(a.dir, exist_ok=True)
    sd = state_dict(torch, bc.parse_size(a.size), a.tensors, a.device)
    total = nbytes(torch, sd)
    rows = []
    parts = set(a.only.split(","))
    try:
        if "save" in parts:
            measure_saves(a, torch, dcp, ferry, sd, total, rows)
        if "load" in parts:
            measure_loads(a, torch, dcp, ferry, sd, total, rows)
        if "cold" in parts:
            measure_cold_loads(a, torch, dcp, ferry, sd, total, rows)
        if "async" in parts:
            measure_async(a, torch, dcp, ferry, sd, total, rows)
    finally:
        shutil.rmtree(a.dir, ignore_errors=True)
    print("dcp_bench: %s in %d tensors on %s, best of %d" % (bc.human(total), len(list(_tensors(torch, sd))),
                                                               a.device, a.rounds))
    print("| what | who | seconds | GB/s |\n| --- | --- | --- | --- |")
    for r in rows:
        rate = "" if r["GB/s"] is None else "%.2f" % r["GB/s"]
        print("| %s | %s | %.3f | %s |" % (r["what"], r["who"], r["seconds"], rate))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bytes": total, "device": a.device, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
