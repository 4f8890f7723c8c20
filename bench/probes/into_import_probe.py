#!/usr/bin/env python3
"""What importing PyTorch tensors as into= destinations costs, per way of handing them over, in
one process: N tensors of 64 x 64 bf16 on --device, best of --repeat.

  objects    ferry's import of each tensor object (torch's Python __dlpack__ and
             __dlpack_device__)
  capsules   the same tensors as torch.utils.dlpack.to_dlpack capsules, made in the loop
  into=      ferry._checkpoint._destinations, the Python part of an into= load (capsules where
             nothing is left to wait for)

    python3 bench/probes/into_import_probe.py                      # host tensors, 819 of them
    python3 bench/probes/into_import_probe.py --device cuda        # GPU parameters
"""
import argparse
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tensors", type=int, default=819)
    ap.add_argument("--repeat", type=int, default=30)
    a = ap.parse_args()
    import torch
    from torch.utils.dlpack import to_dlpack

    import ferry
    from ferry import _ferry
    from ferry._checkpoint import _destinations

    gpu = a.device != "cpu"
    ts = {"t%d" % i: torch.empty(64, 64, dtype=torch.bfloat16, device=a.device) for i in range(a.tensors)}
    objs = list(ts.values())
    if gpu:
        torch.cuda.synchronize()

    def best(fn):
        b = float("inf")
        for _ in range(a.repeat):
            t = time.perf_counter()
            fn()
            b = min(b, time.perf_counter() - t)
        return b * 1e3

    rows = [("objects", best(lambda: _ferry.as_arrays(objs, True, gpu))),
            ("capsules", best(lambda: _ferry.as_arrays([to_dlpack(t) for t in objs], True, gpu))),
            ("into=", best(lambda: _destinations(ts)))]
    print("%d tensors on %s, ferry %s, torch %s, best of %d" % (a.tensors, a.device, ferry.__version__,
                                                                torch.__version__, a.repeat))
    for name, ms in rows:
        print("%-10s %7.2f ms  %5.2f us a tensor" % (name, ms, ms * 1e3 / a.tensors))


if __name__ == "__main__":
    main()
