#!/usr/bin/env python3
"""Cold reads (page cache dropped before each run) of one file into GPU memory by `ferry load`
under several settings, interleaved round by round with the ceiling the bars use: a parallel
buffered pread of the same file (16 threads, 4 MiB pieces).

    python3 bench/probes/cold_sweep.py FILE [--ferry build/tools/ferry] [--rounds 2]
        [--config NAME=VAR=VALUE,VAR=VALUE ...] [--cache-drop auto] [--json out.json]

Without --config: the defaults (a cold file takes the workers' own buffered streams), the
staged route forced (FERRY_LANE_THRESHOLD=off) and O_DIRECT with 4 and 8 MiB staging buffers.
Prints GB/s per reader (mean over rounds), the ratio to the pread ceiling paired round by round,
and the route each took. The page cache is dropped by drop_caches as root, else by
posix_fadvise on the file (--cache-drop).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import bench_common as bc  # noqa: E402

DEFAULT_CONFIGS = [
    "default=",
    "staged=FERRY_LANE_THRESHOLD=off",
    "direct-4M=FERRY_DIRECT_IO=on,FERRY_STAGING_BUFFER_SIZE=4M",
    "direct-8M=FERRY_DIRECT_IO=on,FERRY_STAGING_BUFFER_SIZE=8M",
]


def parse_config(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition("=")
    env = {}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        if not k.startswith("FERRY_") or not v:
            raise SystemExit("cold_sweep: --config %r: expected NAME=FERRY_VAR=VALUE,..." % text)
        env[k] = v
    return name, env


def run_ferry(cli: str, path: str, env: dict[str, str]) -> tuple[float, list[str]]:
    e = dict(os.environ, **env)
    p = subprocess.run([cli, "load", path, "--json"], capture_output=True, text=True, env=e, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("ferry load failed: " + (p.stderr.strip().splitlines() or ["?"])[-1])
    d = json.loads(p.stdout)
    return float(d["seconds"]), sorted(d.get("io", {}).get("routes", {}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--ferry", default="build/tools/ferry")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--cache-drop", default="auto", choices=["auto", "drop_caches", "fadvise"],
                    help="auto: drop_caches as root, else posix_fadvise on the file")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    configs = [parse_config(c) for c in (a.config or DEFAULT_CONFIGS)]
    n = os.path.getsize(a.file)
    method = bc.cache_drop_method(a.cache_drop)
    times: dict[str, list[float]] = {"pread": []}
    routes: dict[str, list[str]] = {}
    for name, _ in configs:
        times[name] = []
    for rnd in range(a.rounds):
        method = bc.evict([a.file], method)
        t = time.perf_counter()
        bc.parallel_pread([a.file], 16)
        times["pread"].append(time.perf_counter() - t)
        print("round %d pread %.2f GB/s" % (rnd, n / times["pread"][-1] / 1e9), flush=True)
        for name, env in configs:
            method = bc.evict([a.file], method)
            s, r = run_ferry(a.ferry, a.file, env)
            times[name].append(s)
            routes[name] = r
            print("round %d %-12s %.2f GB/s %s" % (rnd, name, n / s / 1e9, ",".join(r)), flush=True)
    print("\ncold, %.2f GiB, page cache dropped by %s, %d rounds" % (n / 2**30, method, a.rounds))
    print("%-14s %8s %10s  %s" % ("reader", "GB/s", "vs pread", "routes"))
    out = {"bytes": n, "method": method, "rows": {}}
    for name, ts in times.items():
        gbps = sum(n / t / 1e9 for t in ts) / len(ts)
        paired = sum(p / t for p, t in zip(times["pread"], ts)) / len(ts)
        out["rows"][name] = {"GBps": gbps, "vs_pread": paired, "routes": routes.get(name, [])}
        print("%-14s %8.2f %9.2fx  %s" % (name, gbps, paired, ",".join(routes.get(name, []))))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
