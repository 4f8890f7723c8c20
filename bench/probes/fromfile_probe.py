"""`ferry.fromfile` of one hot file into GPU memory, as one installed ferry runs it: the
source build on PYTHONPATH or a wheel in a virtual environment. Prints one JSON line with
where ferry was imported from, every round's GB/s and the best. Run once per ferry, several
times in turn, on the same file (bench/probes/wheel_gpu.sh does), so that the figures share
the page cache and the machine's state.

    python3 bench/probes/fromfile_probe.py FILE [--rounds 5] [--device cuda]
"""
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    import numpy as np
    import ferry

    size = os.path.getsize(args.file)
    sync = lambda: None  # noqa: E731
    if args.device != "cpu":
        import cupy
        sync = cupy.cuda.runtime.deviceSynchronize
        cupy.zeros(1)  # the context, before the clock
    rates = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        a = ferry.fromfile(args.file, dtype=np.uint8, device=args.device)
        sync()
        seconds = time.perf_counter() - t0
        if a.nbytes != size:
            sys.exit("fromfile read %d of %d bytes" % (a.nbytes, size))
        del a
        rates.append(size / seconds / 1e9)
    print(json.dumps({"label": args.label, "ferry": os.path.dirname(ferry.__file__),
                      "bytes": size, "gbps": [round(r, 2) for r in rates],
                      "best": round(max(rates), 2)}))


if __name__ == "__main__":
    main()
