"""What verifying costs a load of many small tensors: a checkpoint of --tensors float32 tensors
of 1 KiB in 8 shards, saved with checksums, then loaded hot into host memory with
verify="never" and verify="always" in turn.

    python3 bench/probes/verify_probe.py --dir /tmp/verify-probe [--tensors 100000] [--rounds 3]

Prints, per round, each load's whole call and the library's own time (stats["seconds"]).
"""
import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import many_tensors_bench as mtb  # noqa: E402

import ferry  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--tensors", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sd = mtb.state(a.tensors, 1024)
    groups = mtb.shard_groups(list(sd), 8)
    shard = max(sum(sd[k].nbytes for k in g) for g in groups) + 1
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    ferry.save_checkpoint(a.dir, sd, max_shard_size=shard, checksums=True)
    del sd
    for r in range(a.rounds):
        for mode in ("never", "always"):
            t = time.perf_counter()
            got = ferry.load_checkpoint(a.dir, verify=mode)
            took = time.perf_counter() - t
            print("round %d verify=%-6s call %7.1f ms  library %7.1f ms" % (r, mode, took * 1e3,
                                                                          got.stats["seconds"] * 1e3), flush=True)
            del got


if __name__ == "__main__":
    main()
