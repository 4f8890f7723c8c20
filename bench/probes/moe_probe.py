#!/usr/bin/env python3
"""Where an MoE-shaped GPU checkpoint load's time goes: the call, the library, the wrapping of
the result, the raw read of the same shards, the library with no wrapping at all, and the same
load through the per-tensor reads. Each clock stops with the result in hand; freeing it is
timed apart.
    python3 bench/probes/moe_probe.py --dir DIR --tensors 50000 --matrices 64 --device cuda
"""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import many_tensors_bench as mtb  # noqa: E402

a, folder, files = mtb.moe_probe_setup(__doc__)
import ferry, torch  # noqa: E402
from ferry import _ferry  # noqa: E402
sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
sizes = [os.path.getsize(p) for p in files]


def raw():
    buf = torch.empty(sum(sizes), dtype=torch.uint8, device=a.device)
    hs = [ferry.File(p) for p in files]
    at, pieces = 0, []
    for f, n in zip(hs, sizes):
        pieces.append((f, 0, buf[at:at + n])); at += n
    t0 = time.perf_counter(); ferry.read_batch(pieces).result(); sync(); t1 = time.perf_counter()
    for f in hs:
        f.close()
    return {"read_only": t1 - t0}, buf


def load(**kw):
    r = ferry.load_checkpoint(folder, **kw); sync()
    s = r.stats
    return {k: s[k] for k in ("seconds", "wrap_seconds", "open_seconds", "headers_seconds", "first_read_seconds")}, r


every = [t["name"] for t in ferry.info_checkpoint(folder)["tensors"]]


def bare():
    dev = a.device if a.device != "cuda" else "cuda:0"
    t0 = time.perf_counter(); c = _ferry.checkpoint_info([folder]); t1 = time.perf_counter()
    arrays, s = _ferry.load_checkpoint([folder], dev, "all", [], [], None, [], False, False, "auto", None)
    sync()
    return {"seconds": s["seconds"], "wrap_seconds": s["wrap_seconds"], "open_seconds": s["open_seconds"],
            "first_read_seconds": s["first_read_seconds"], "info": t1 - t0}, arrays


# "every name": the same load with a selection naming each tensor, which takes the per-tensor
# reads (planned first, then read), where a load of all tensors reads each shard as one range
# started before the plan.
cases = {"raw read_batch": raw, "load torch": lambda: load(like="torch", device=a.device),
         "load torch, every name": lambda: load(like="torch", device=a.device, tensors=every),
         "load cupy": lambda: load(device=a.device), "library, Arrays only": bare}
best = {}
for _ in range(a.rounds):
    for k, fn in cases.items():
        # The clock stops with the result in hand; freeing it is timed apart ("free").
        t0 = time.perf_counter(); extra, result = fn(); t = time.perf_counter() - t0
        t1 = time.perf_counter(); del result; extra = dict(extra, free=time.perf_counter() - t1)
        if k not in best or t < best[k][0]:
            best[k] = (t, extra)
print("%d tensors, %d shards, %.2f GB on %s, best of %d" % (a.tensors, len(files), sum(sizes) / 1e9, a.device, a.rounds))
for k, (t, extra) in best.items():
    print("%-22s %8.1f ms  %s" % (k, t * 1e3, "  ".join("%s %.1f" % (x, y * 1e3) for x, y in extra.items())))
