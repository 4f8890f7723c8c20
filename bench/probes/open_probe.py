"""Time to open a checkpoint: its index and shard headers read and checked, before any tensor
byte moves (the part of every load that the library's load time does not count).

    python3 bench/probes/open_probe.py CHECKPOINT_DIR [--rounds 15]

Prints min and median over the rounds of `checkpoint_info` of the folder (index and headers),
of its shard files alone (headers only), of one shard, and of opening and closing each shard.
"""
import argparse
import os
import time

from ferry import _ferry


def timed(fn, rounds):
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return "min %.3f ms, median %.3f ms" % (ts[0] * 1e3, ts[len(ts) // 2] * 1e3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    files = sorted(os.path.join(a.dir, f) for f in os.listdir(a.dir) if f.endswith(".safetensors"))
    if not files:
        raise SystemExit("open_probe: no .safetensors files in %s" % a.dir)
    tensors = len(_ferry.checkpoint_info([a.dir])["tensors"])

    def opens():
        for f in files:
            _ferry.File(f, "r").close()

    print("%s: %d shards, %d tensors" % (a.dir, len(files), tensors))
    print("checkpoint_info(folder: index and headers)  ", timed(lambda: _ferry.checkpoint_info([a.dir]), a.rounds))
    print("checkpoint_info(the shard files: headers)   ", timed(lambda: _ferry.checkpoint_info(files), a.rounds))
    print("checkpoint_info(one shard)                  ", timed(lambda: _ferry.checkpoint_info(files[:1]), a.rounds))
    print("open and close each shard                   ", timed(opens, a.rounds))


if __name__ == "__main__":
    main()
