#!/usr/bin/env python3
"""One side of bench/probes/python_ab.sh: the ferry on PYTHONPATH loads a checkpoint or a zarr
array into GPU memory, hot, and prints "<what> <GB/s>" (best of --repeat).

  python_ab_probe.py write DIR            # the checkpoint and the arrays (once, with any ferry)
  python_ab_probe.py checkpoint DIR       # ferry.load_checkpoint(DIR/ckpt, device="cuda")
  python_ab_probe.py zarr-raw|zarr-zstd DIR   # ferry.zarr Store + CodecPipeline, zarr's GPU mode
"""
import os
import sys
import time

import numpy as np


def write(d, ckpt_gib=4, tensors=800, zarr_mib=2048):
    import ferry
    import zarr
    rng = np.random.default_rng(0)
    per = (ckpt_gib << 30) // tensors // 2
    state = {"layers.%d.weight" % i: rng.integers(0, 1 << 16, per, dtype=np.uint16) for i in range(tensors)}
    ferry.save_checkpoint(os.path.join(d, "ckpt"), state, max_shard_size="700MB")
    data = rng.standard_normal((zarr_mib << 20) // 4, dtype=np.float32)
    chunk = (64 << 20) // 4
    zarr.create_array(os.path.join(d, "raw.zarr"), data=data, chunks=(chunk,), compressors=None, overwrite=True)
    zarr.create_array(os.path.join(d, "zstd.zarr"), data=data, chunks=(chunk,),
                      compressors=zarr.codecs.ZstdCodec(level=1), overwrite=True)


def best(fn, nbytes, repeat):
    import cupy
    fn()
    cupy.cuda.Device().synchronize()
    t = []
    for _ in range(repeat):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        out = fn()
        cupy.cuda.Device().synchronize()
        t.append(time.perf_counter() - t0)
        del out
    return nbytes / min(t) / 1e9


def main():
    what, d = sys.argv[1], sys.argv[2]
    repeat = int(os.environ.get("REPEAT", "3"))
    if what == "write":
        return write(d, ckpt_gib=int(os.environ.get("CKPT_GIB", "4")), zarr_mib=int(os.environ.get("ZARR_MIB", "2048")))
    import ferry
    if what == "checkpoint":
        p = os.path.join(d, "ckpt")
        nbytes = sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p) if f.endswith(".safetensors"))
        gbps = best(lambda: ferry.load_checkpoint(p, device="cuda"), nbytes, repeat)
    else:
        import zarr
        import ferry.zarr as fz
        p = os.path.join(d, what.split("-")[1] + ".zarr")
        fz.enable()

        def read():
            with zarr.config.enable_gpu():
                return zarr.open_array(store=fz.Store(p), mode="r")[...]
        gbps = best(read, zarr.open_array(p, mode="r").nbytes, repeat)
    print("%s %.2f" % (what, gbps))


if __name__ == "__main__":
    main()
