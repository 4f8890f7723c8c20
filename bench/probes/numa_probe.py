#!/usr/bin/env python3
"""`ferry load FILE` into GPU memory (hot) with the process held to the CPUs of one NUMA node at
a time (taskset), rounds interleaved, against the GPU's own node: whether where the process
runs (and so where its pinned buffers are first placed) sets the rate.

    python3 bench/probes/numa_probe.py FILE [--ferry build/tools/ferry] [--rounds 3] [--json out.json]

On a machine of one node it says so and measures that node alone. Needs taskset (util-linux).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import bench_common as bc  # noqa: E402


def cpu_text(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def load_once(cli: str, path: str, cpus: set[int]) -> tuple[float, str]:
    cmd = ["taskset", "-c", cpu_text(cpus), cli, "load", path, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("ferry load failed: " + ((p.stderr.strip().splitlines() or ["?"])[-1]))
    d = json.loads(p.stdout)
    return float(d["gbps"]), ",".join(sorted(d.get("io", {}).get("routes", {})))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--ferry", default="build/tools/ferry")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if not shutil.which("taskset"):
        print("numa_probe: taskset is not installed (util-linux)", file=sys.stderr)
        return 2
    allowed = os.sched_getaffinity(0)
    nodes = {n: c & allowed for n, c in bc.numa_nodes().items() if c & allowed} or {0: allowed}
    gpu = bc.gpu_numa_nodes()
    if len(nodes) == 1:
        print("numa_probe: one NUMA node here: every process runs beside the GPU's memory")
    bc.warm([a.file])
    rates: dict[int, list[float]] = {n: [] for n in nodes}
    routes: dict[int, str] = {}
    for rnd in range(a.rounds):
        for n, cpus in nodes.items():
            g, r = load_once(a.ferry, a.file, cpus)
            rates[n].append(g)
            routes[n] = r
            print("round %d node %d (cpus %s): %.2f GB/s %s" % (rnd, n, cpu_text(cpus), g, r), flush=True)
    print("\nhot, %.2f GiB, the GPU on node %s, best of %d" % (os.path.getsize(a.file) / 2**30,
                                                            ",".join(map(str, gpu)) or "?", a.rounds))
    print("%-6s %8s %8s  %s" % ("node", "best", "mean", "routes"))
    for n in nodes:
        print("%-6d %8.2f %8.2f  %s" % (n, max(rates[n]), sum(rates[n]) / len(rates[n]), routes[n]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu_numa_nodes": gpu, "rates": {str(n): v for n, v in rates.items()},
                       "routes": {str(n): r for n, r in routes.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
