#!/usr/bin/env python3
"""Time ferry.dcp's reader spends finding each read item's destination: ferry.dcp's
resolve_tensor (torch's default planner's result made directly for plain tensors) against the
planner's own resolve_tensor, over the same loads of bench/dcp_bench.py's state dict, taking turns.
The reader's shortcut for items that are their whole tensor (whole_target, which finds the
destination without resolving a view) is turned off, so that every item resolves.
    python3 bench/probes/dcp_resolve_probe.py [--size 64M] [--tensors 512] [--rounds 3]
"""
import argparse, os, shutil, sys, tempfile, time, warnings
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import dcp_bench as b  # noqa: E402

warnings.filterwarnings("ignore")
ap = argparse.ArgumentParser()
ap.add_argument("--size", default="64M")
ap.add_argument("--tensors", type=int, default=512)
ap.add_argument("--rounds", type=int, default=3)
a = ap.parse_args()
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import ferry.dcp  # noqa: E402
import ferry.dcp._reads as reads  # noqa: E402
import bench_common as bc  # noqa: E402

sd = b.state_dict(torch, bc.parse_size(a.size), a.tensors, "cpu")
folder = tempfile.mkdtemp(prefix="ferry-dcp-resolve-")
try:
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder, sync_files=False))
    out = b.blank(torch, sd)
    reads.whole_target = lambda planner, req, layout: None
    ways = {"ferry.dcp resolve_tensor": reads.resolve_tensor,
            "planner.resolve_tensor": lambda planner, req: planner.resolve_tensor(req)}
    spent = {k: [] for k in ways}
    load = {k: [] for k in ways}
    items = 0
    for _ in range(a.rounds):
        for name, fn in ways.items():
            acc = [0.0, 0]

            def timed(planner, req, fn=fn, acc=acc):
                t = time.perf_counter()
                got = fn(planner, req)
                acc[0] += time.perf_counter() - t
                acc[1] += 1
                return got
            reads.resolve_tensor = timed
            t0 = time.perf_counter()
            dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(folder))
            load[name].append(time.perf_counter() - t0)
            spent[name].append(acc[0])
            items = acc[1]
    b.check(torch, sd, out)
    print("%d read items, best of %d" % (items, a.rounds))
    for name in ways:
        print("%-26s resolve %7.1f ms   whole dcp.load %7.1f ms" % (name, min(spent[name]) * 1e3, min(load[name]) * 1e3))
finally:
    shutil.rmtree(folder, ignore_errors=True)
