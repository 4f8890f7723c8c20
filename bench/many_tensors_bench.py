#!/usr/bin/env python3
"""What a tensor costs, apart from its bytes: checkpoints of many small tensors, in host memory.

For each count in --tensors, writes (once, reused) a checkpoint of that many float32 tensors of
--tensor-bytes each in --shards shards, Hugging Face layout (safetensors files and
model.safetensors.index.json), names shaped like a mixture-of-experts model's. Then, the page
cache hot, the readers taking turns for --rounds rounds, best of each:

  load   ferry.load_checkpoint(dir) (numpy arrays) against a loop of
         safetensors.numpy.load_file over the shards; ferry's own figures beside the call's:
         stats["seconds"] (the library's load), stats["open_seconds"] (index and headers)
  save   ferry.save_checkpoint(dir, state, max_shard_size) against safetensors.numpy.save_file
         of the same shards (each into a fresh folder, page cache only: no fsync on either side)

Per tensor: microseconds of the whole call divided by the count.

  python3 bench/many_tensors_bench.py --dir /tmp/mt --tensors 2000,20000,100000
"""

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

SHARD_NAME = "model-%05d-of-%05d.safetensors"


def names(n):
    return ["model.layers.%d.mlp.experts.%d.down_proj.weight" % (i // 256, i % 256) for i in range(n)]


def state(n, tensor_bytes):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(tensor_bytes // 4, dtype=np.float32) for k in names(n)}


def shard_groups(keys, shards):
    per = (len(keys) + shards - 1) // shards
    return [keys[k * per:(k + 1) * per] for k in range(shards) if keys[k * per:(k + 1) * per]]


def write(folder, sd, shards):
    from safetensors.numpy import save_file
    groups = shard_groups(list(sd), shards)
    weight_map = {}
    for k, g in enumerate(groups):
        fn = SHARD_NAME % (k + 1, len(groups))
        save_file({n: sd[n] for n in g}, os.path.join(folder, fn), metadata={"format": "pt"})
        weight_map.update({n: fn for n in g})
    total = sum(v.nbytes for v in sd.values())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)


def prepare(root, n, tensor_bytes, shards):
    folder = os.path.join(root, "ckpt-%d-%d-%d" % (n, tensor_bytes, shards))
    marker = os.path.join(folder, ".complete")
    if not os.path.exists(marker):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        write(folder, state(n, tensor_bytes), shards)
        open(marker, "w").close()
    return folder


def shard_files(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors"))


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(root, n, a):
    import ferry
    from safetensors.numpy import load_file, save_file
    folder = prepare(root, n, a.tensor_bytes, a.shards)
    files = shard_files(folder)
    for p in files:  # hot
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    sd = state(n, a.tensor_bytes)
    groups = shard_groups(list(sd), a.shards)
    shard_bytes = max(sum(sd[k].nbytes for k in g) for g in groups) + 1
    best = {}

    def keep(key, seconds, extra=None):
        if key not in best or seconds < best[key][0]:
            best[key] = (seconds, extra or {})

    out_dir = os.path.join(root, "saves")
    for _ in range(a.rounds):
        t, got = timed(lambda: ferry.load_checkpoint(folder))
        if len(got) != n:
            raise SystemExit("ferry loaded %d tensors of %d" % (len(got), n))
        keep("ferry_load", t, {"library": got.stats["seconds"], "open": got.stats["open_seconds"]})
        del got
        t, got = timed(lambda: [load_file(p) for p in files])
        if sum(map(len, got)) != n:
            raise SystemExit("safetensors loaded %d tensors of %d" % (sum(map(len, got)), n))
        keep("safetensors_load", t)
        del got
        for who in ("ferry_save", "safetensors_save"):
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            if who == "ferry_save":
                t, _ = timed(lambda: ferry.save_checkpoint(out_dir, sd, max_shard_size=shard_bytes))
            else:
                t, _ = timed(lambda: [save_file({k: sd[k] for k in g}, os.path.join(out_dir, SHARD_NAME % (i + 1, len(groups))))
                                      for i, g in enumerate(groups)])
            keep(who, t)
    shutil.rmtree(out_dir, ignore_errors=True)
    return {k: {"seconds": v[0], **v[1]} for k, v in best.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/ferry-many-tensors")
    ap.add_argument("--tensors", default="2000,20000,100000", help="tensor counts, comma-separated")
    ap.add_argument("--tensor-bytes", type=int, default=1024)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rows, res = [], {}
    for n in [int(x) for x in a.tensors.split(",") if x]:
        r = res[n] = measure(a.dir, n, a)
        fl, sl = r["ferry_load"], r["safetensors_load"]
        fs, ss = r["ferry_save"], r["safetensors_save"]
        rows.append("| %d | %.1f | %.2f | %.2f | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx |" % (
            n, fl["seconds"] * 1e3, fl["seconds"] / n * 1e6, fl["library"] / n * 1e6, fl["open"] * 1e3,
            sl["seconds"] * 1e3, sl["seconds"] / fl["seconds"], fs["seconds"] * 1e3, ss["seconds"] * 1e3,
            ss["seconds"] / fs["seconds"]))
        print("tensors %d done" % n, file=sys.stderr, flush=True)
    print("| tensors | ferry load ms | us/tensor (call) | us/tensor (library) | open ms | safetensors loop ms "
          "| load ratio | ferry save ms | safetensors save ms | save ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tensor_bytes": a.tensor_bytes, "shards": a.shards, "rounds": a.rounds, "results": res}, f,
                      indent=1)


if __name__ == "__main__":
    main()
