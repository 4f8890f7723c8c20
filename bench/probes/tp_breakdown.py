#!/usr/bin/env python3
"""Where a tensor-parallel checkpoint load's time goes: in one process, hot, the whole load and
rank 0 of a TP=2 split of checkpoint_bench.py's checkpoint, cut into its parts:

  whole     every tensor
  col       only the column-parallel slices (dim 0: one byte range per tensor)
  row       only the row-parallel slices (dim 1: row segments, or a span where the planner says)
  tp        both (the bench's "tp half" row)
  row_span  row slices with route="span" (the enclosing span, rows picked on the way)
  tp_seg    both with route="segments" (every row slice read segment by segment)

Each case runs --rounds times interleaved; the best library time is kept, with the whole call,
the time to the first read, bytes read, requests and the routes the plan took.

    python3 bench/probes/tp_breakdown.py --dir /root/ferry-ckpt             # the checkpoint_bench one
    python3 bench/probes/tp_breakdown.py --dir /tmp/ck --device cpu --cases whole,tp
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from checkpoint_bench import COLUMN, ROW  # noqa: E402

CASES = ("whole", "col", "row", "tp", "row_span", "tp_seg")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="a checkpoint (checkpoint_bench.py writes one)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json")
    a = ap.parse_args()
    import ferry
    cases = [c for c in a.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            raise SystemExit("tp_breakdown: unknown case %r (cases: %s)" % (c, ", ".join(CASES)))
    gpu = a.device != "cpu"
    like = None
    if gpu:
        import torch
        torch.empty(1, device=a.device)
        torch.cuda.synchronize()
        like = "torch"
    rules = {
        "col": ferry.tensor_parallel(0, 2, column=COLUMN, row=[]),
        "row": ferry.tensor_parallel(0, 2, column=[], row=ROW),
        "tp": ferry.tensor_parallel(0, 2, column=COLUMN, row=ROW),
    }
    rules["row_span"] = rules["row"]
    rules["tp_seg"] = rules["tp"]
    route = {"row_span": "span", "tp_seg": "segments"}
    best = {}
    for _ in range(a.rounds):
        for c in cases:
            kw = {"slices": rules[c]} if c in rules else {}
            t0 = time.perf_counter()
            out = ferry.load_checkpoint(a.dir, device=a.device, like=like, route=route.get(c, "auto"), **kw)
            if gpu:
                torch.cuda.synchronize()
            call = time.perf_counter() - t0
            s = out.stats
            if c not in best or s["seconds"] < best[c]["library_s"]:
                routes = {}
                for p in s["plan"]:
                    routes[p["route"]] = routes.get(p["route"], 0) + 1
                best[c] = {"library_s": s["seconds"], "call_s": call, "open_s": s["open_seconds"],
                           "first_read_s": s["first_read_seconds"],
                           "bytes": s["bytes_read"], "requests": s["requests"], "routes": routes}
            del out
    print("%-9s %10s %10s %10s %10s %10s %9s %8s  %s" % ("case", "library", "call", "open", "1st read", "MB read",
                                                        "requests", "GB/s", "routes"))
    for c in cases:
        r = best[c]
        print("%-9s %8.1fms %8.1fms %8.2fms %8.2fms %10.0f %9d %8.1f  %s" % (
            c, r["library_s"] * 1e3, r["call_s"] * 1e3, r["open_s"] * 1e3, r["first_read_s"] * 1e3, r["bytes"] / 1e6, r["requests"],
            r["bytes"] / r["library_s"] / 1e9, " ".join("%s %d" % kv for kv in sorted(r["routes"].items()))))
    if "whole" in best and "tp" in best:
        print("tp vs whole: %.2fx in the library, %.2fx by the call" % (
            best["tp"]["library_s"] / best["whole"]["library_s"], best["tp"]["call_s"] / best["whole"]["call_s"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"dir": a.dir, "device": a.device, "cases": best}, f, indent=2)


if __name__ == "__main__":
    main()
