#!/usr/bin/env python3
"""What a tensor costs, apart from its bytes: checkpoints of many small tensors.

For each count in --tensors, writes (once, reused) a checkpoint of that many float32 tensors of
--tensor-bytes each in --shards shards, Hugging Face layout (safetensors files and
model.safetensors.index.json), names shaped like a mixture-of-experts model's. Then, the page
cache hot, the readers taking turns for --rounds rounds, best of each:

  load   ferry.load_checkpoint(dir) (numpy arrays) against a loop of
         safetensors.numpy.load_file over the shards; ferry's own figures beside the call's:
         stats["seconds"] (the library's load, with the making of the result's Python
         objects while the reads run: stats["wrap_seconds"]), stats["open_seconds"] (index and
         headers)
  into   ferry.load_checkpoint(dir, into=arrays) into numpy arrays made beforehand (no peer)
  save   ferry.save_checkpoint(dir, state, max_shard_size) against safetensors.numpy.save_file
         of the same shards (each into a fresh folder; ferry's save is durable, fsync and
         rename per file, safetensors' leaves the bytes in the page cache)

--moe shapes the checkpoint like a mixture-of-experts model's instead: of the --tensors, all but
--matrices are bfloat16 scales of 4 KiB (weight_scale_inv beside each expert's matrix) and
--matrices are bfloat16 matrices of --matrix-bytes, written by safetensors.torch; loads are as
torch tensors (like="torch") against safetensors.torch.load_file (on a GPU both of its
documented ways, device="cuda" and to the host then .to(device), the faster in the table). --device cuda loads into GPU
memory (no saves), and adds ferry's raw read of the same shards (every byte of every shard in
one ferry.read_batch into one GPU buffer: the ceiling of a load; a loop of ferry.fromfile over
the shards beside it) and InstantTensor where it is installed: all shards in one safe_open, at
its defaults (once: its O_DIRECT default reads at the disk's speed) and over the backends and
chunk sizes of bench/peer_configs.py (every round), the best reported with its settings.

Each group of readers runs in a process of its own (ferry's load; ferry's raw reads; safetensors;
InstantTensor; the saves), the checkpoint written and read once before, libraries imported and
the CUDA context made before any clock: what one reader leaves behind (a caching allocator
holding gigabytes, a heap of 50,000 freed objects) never slows the next. `--one-process` runs
them all in this one, interleaved by round, as before.

Each reader's clock stops when its result is in hand (GPU work synchronized); freeing the result
comes after, for every reader alike (ferry's is reported as "teardown").
Per tensor: microseconds of the whole call divided by the count.

  python3 bench/many_tensors_bench.py --dir /tmp/mt --tensors 1000,10000,100000
  python3 bench/many_tensors_bench.py --dir /data/mt --moe --device cuda --tensors 60032
"""

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as bc  # noqa: E402

SHARD_NAME = "model-%05d-of-%05d.safetensors"


def names(n):
    return ["model.layers.%d.mlp.experts.%d.down_proj.weight" % (i // 256, i % 256) for i in range(n)]


def state(n, tensor_bytes):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(tensor_bytes // 4, dtype=np.float32) for k in names(n)}


def moe_state(n, matrices, matrix_bytes):
    """n torch bfloat16 tensors: `matrices` of matrix_bytes, each expert's scale of 4 KiB beside."""
    import torch
    g = torch.Generator().manual_seed(0)
    out = {}
    side = max(1, int((matrix_bytes // 2) ** 0.5))
    for i in range(n):
        layer, expert = i // 256, i % 256
        if i < matrices:
            out["model.layers.%d.mlp.experts.%d.down_proj.weight" % (layer, expert)] = torch.randn(
                side, matrix_bytes // 2 // side, generator=g).to(torch.bfloat16)
        else:
            out["model.layers.%d.mlp.experts.%d.down_proj.weight_scale_inv" % (layer, expert)] = torch.randn(
                2048, generator=g).to(torch.bfloat16)
    return out


def shard_groups(keys, shards):
    per = (len(keys) + shards - 1) // shards
    return [keys[k * per:(k + 1) * per] for k in range(shards) if keys[k * per:(k + 1) * per]]


def write(folder, sd, shards):
    if sd and not isinstance(next(iter(sd.values())), np.ndarray):
        from safetensors.torch import save_file
    else:
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


def make_state(n, a):
    return moe_state(n, a.matrices, a.matrix_bytes) if a.moe else state(n, a.tensor_bytes)


def prepare(root, n, a):
    shape = "moe-%d-%d" % (a.matrices, a.matrix_bytes) if a.moe else str(a.tensor_bytes)
    folder = os.path.join(root, "ckpt-%d-%s-%d" % (n, shape, a.shards))
    marker = os.path.join(folder, ".complete")
    if not os.path.exists(marker):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        write(folder, make_state(n, a), a.shards)
        open(marker, "w").close()
    return folder


def shard_files(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors"))


def moe_probe_setup(doc, more=None):
    """The probes' shared start: their arguments (an MoE checkpoint of --tensors tensors, --matrices
    large matrices among them), the checkpoint written once under --dir and read once so that it is
    hot. `more(parser)` adds a probe's own arguments. Returns (arguments, folder, shard files)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/moe-probe")
    ap.add_argument("--tensors", type=int, default=50000)
    ap.add_argument("--matrices", type=int, default=64)
    ap.add_argument("--matrix-bytes", type=int, default=64 << 20)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rounds", type=int, default=5)
    if more:
        more(ap)
    a = ap.parse_args()
    a.moe, a.tensor_bytes = True, 1024
    folder = prepare(a.dir, a.tensors, a)
    files = shard_files(folder)
    for p in files:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    return a, folder, files


def timed(fn):
    """Seconds until fn's result is in hand, and the result: (count, what it loaded). The clock
    stops before that is freed, for every reader alike (a result of 50,000 tensors takes
    tens of milliseconds to free; a caller frees it later, or never)."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def loaders(files, folder, a):
    """name -> a function that loads the checkpoint and returns how many tensors it gave."""
    import ferry
    gpu = a.device != "cpu"
    sync = (lambda: __import__("torch").cuda.synchronize()) if gpu else (lambda: None)
    like = "torch" if (a.moe or gpu) else None
    stats = {}

    def ferry_load():
        got = ferry.load_checkpoint(folder, device=a.device, like=like)
        sync()
        stats.update(library=got.stats["seconds"], open=got.stats["open_seconds"],
                     wrap=got.stats.get("wrap_seconds", 0.0), first_read=got.stats.get("first_read_seconds", 0.0))
        return len(got), got

    out = {"ferry_load": (ferry_load, stats)}
    if not gpu and not a.moe:
        # Into existing arrays (load_state_dict's use): the destinations made once, outside the clock.
        dst = {k: np.empty_like(v) for k, v in ferry.load_checkpoint(folder).items()}
        into_stats = {}

        def ferry_into():
            got = ferry.load_checkpoint(folder, into=dst)
            into_stats.update(library=got.stats["seconds"])
            return len(dst) - len(got.missing_keys), got
        out["ferry_into"] = (ferry_into, into_stats)
    if a.moe or gpu:
        from safetensors.torch import load_file as torch_load_file

        def st_load():
            got = [torch_load_file(p, device=a.device) for p in files]
            sync()
            return sum(map(len, got)), got
        if gpu:
            # safetensors' other documented way onto a GPU (bench/peer_configs.py's grid): into
            # host memory, then .to(device); the table takes the faster of the two.
            def st_load_then_to():
                got = [{k: v.to(a.device) for k, v in torch_load_file(p, device="cpu").items()} for p in files]
                sync()
                return sum(map(len, got)), got
            out["safetensors_cpu_then_to"] = (st_load_then_to, {"config": "device='cpu', then .to(device)"})
    else:
        from safetensors.numpy import load_file

        def st_load():
            got = [load_file(p) for p in files]
            return sum(map(len, got)), got
    out["safetensors_load"] = (st_load, {"config": "device=%r" % a.device})
    if gpu:
        import torch
        sizes = [os.path.getsize(p) for p in files]
        count = n_tensors(files)

        def raw_read():
            # Every byte of every shard in one batch, into one fresh buffer: the ceiling.
            raw = torch.empty(sum(sizes), dtype=torch.uint8, device=a.device)
            bc.read_whole(ferry, files, sizes, raw)
            sync()
            return count, raw

        def fromfile_loop():
            got = [ferry.fromfile(p, dtype=np.uint8, device=a.device) for p in files]
            sync()
            return count, got
        out["ferry_raw_read"] = (raw_read, None)
        out["ferry_fromfile_loop"] = (fromfile_loop, None)
        # InstantTensor at its defaults and over its documented backends and chunk sizes
        # (bench/peer_configs.py), all shards in one safe_open: each configuration a reader of
        # its own, every round; the table reports the best beside the defaults.
        try:
            import instanttensor
            import peer_configs as pc
        except Exception as e:  # not installed here: said, not hidden
            print("instanttensor: not measured (%s)" % e, file=sys.stderr)
        else:
            for k, cfg in enumerate([None] + pc.instanttensor_grid()):
                def it_load(cfg=cfg):
                    got = pc.instanttensor_load(instanttensor, files, cfg)
                    sync()
                    return len(got), got
                out["instanttensor_%d" % k] = (it_load, {"config": pc.describe(cfg or {})})
    return out


def n_tensors(files):
    from safetensors import safe_open
    total = 0
    for p in files:
        with safe_open(p, framework="np") as f:
            total += len(f.keys())
    return total


def measure(root, n, a):
    import ferry
    folder = prepare(root, n, a)
    files = shard_files(folder)
    for p in files:  # hot
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    saves = a.device == "cpu" and not a.no_save and chosen("ferry_save", a)
    sd = make_state(n, a) if saves else {}
    groups = shard_groups(list(sd), a.shards)
    nbytes = (lambda v: v.nbytes) if not a.moe else (lambda v: v.numel() * v.element_size())
    shard_bytes = max(sum(nbytes(sd[k]) for k in g) for g in groups) + 1 if saves else 0
    if a.moe and saves:
        from safetensors.torch import save_file
    else:
        from safetensors.numpy import save_file
    best = {}

    def keep(key, seconds, extra=None):
        if key not in best or seconds < best[key][0]:
            best[key] = (seconds, dict(extra or {}))

    out_dir = os.path.join(root, "saves")
    readers = {k: v for k, v in loaders(files, folder, a).items() if chosen(k, a)}
    want = n_tensors(files)
    failed = {}
    for rnd in range(a.rounds):
        for key, (fn, extra) in readers.items():
            # InstantTensor's defaults read with O_DIRECT, at the disk's speed hot or cold: once.
            if key in failed or (key == "instanttensor_0" and rnd > 0):
                continue
            try:
                t, (got, result) = timed(fn)
            except Exception as e:  # a peer's configuration this machine refuses: reported, not hidden
                if not key.startswith("instanttensor_"):
                    raise
                failed[key] = "%s: %s" % (type(e).__name__, e)
                continue
            if got != want:
                raise SystemExit("%s loaded %d tensors of %d" % (key, got, want))
            t0 = time.perf_counter()
            del result
            extra = dict(extra or {}, teardown=time.perf_counter() - t0) if key == "ferry_load" else extra
            keep(key, t, extra)
        if not saves:
            continue
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
    res = {k: {"seconds": v[0], **v[1]} for k, v in best.items()}
    its = {k: v for k, v in res.items() if k.startswith("instanttensor_")}
    if its:  # the best configuration, and the defaults (instanttensor_0)
        top = min(its, key=lambda k: its[k]["seconds"])
        res["instanttensor_best"] = its[top]
        if "instanttensor_0" in its:
            res["instanttensor_default"] = its["instanttensor_0"]
    if "safetensors_cpu_then_to" in res and res["safetensors_cpu_then_to"]["seconds"] < res["safetensors_load"]["seconds"]:
        res["safetensors_device"] = res["safetensors_load"]  # the slower way, kept beside
        res["safetensors_load"] = res.pop("safetensors_cpu_then_to")  # the table's figure: its best
    for k, why in failed.items():
        res[k] = {"error": why}
    res["bytes"] = sum(os.path.getsize(p) for p in files)
    return res


# The groups of readers, one process each: a group's readers share what they compare (the
# raw reads, safetensors' two ways, InstantTensor's configurations, the two saves).
GROUPS = ["ferry_load,ferry_into", "ferry_raw_read,ferry_fromfile_loop", "safetensors", "instanttensor",
          "ferry_save,safetensors_save"]


def chosen(key, a):
    return not a.readers or any(key.startswith(p) for p in a.readers.split(","))


def measure_apart(n, a):
    """measure() with each group of GROUPS in a child process of this script; their results merged."""
    import subprocess
    import tempfile
    prepare(a.dir, n, a)  # written once, before any child
    res = {}
    for group in GROUPS:
        if a.device != "cpu" and group.startswith("ferry_save"):
            continue  # saves are measured on the CPU only
        if not any(chosen(k, a) for k in group.split(",")):
            continue
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            # This run's own arguments, then those of the child (argparse keeps an option's last).
            args = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + [
                "--tensors", str(n), "--json", tmp.name, "--one-process", "--readers", group]
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
            with open(tmp.name) as f:
                got = json.load(f)["results"][str(n)]
        res.update(got)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/ferry-many-tensors")
    ap.add_argument("--tensors", default="1000,10000,100000", help="tensor counts, comma-separated")
    ap.add_argument("--tensor-bytes", type=int, default=1024)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--moe", action="store_true", help="4 KiB bf16 scales beside large bf16 matrices")
    ap.add_argument("--matrices", type=int, default=32, help="--moe: large matrices among the tensors")
    ap.add_argument("--matrix-bytes", type=int, default=64 << 20, help="--moe: bytes of each matrix")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda[:N] (loads as torch tensors, no saves)")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--one-process", action="store_true", help="every reader in this process, not one process a group")
    ap.add_argument("--readers", default="", help="only the readers whose names start so (comma-separated)")
    a = ap.parse_args()
    if a.device != "cpu":
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("--device %s: torch sees no CUDA GPU here" % a.device)
        torch.empty(1, device=a.device)  # the context made before any clock starts
    os.makedirs(a.dir, exist_ok=True)
    rows, res = [], {}
    for n in [int(x) for x in a.tensors.split(",") if x]:
        r = res[n] = measure(a.dir, n, a) if a.one_process else measure_apart(n, a)
        if a.readers:  # a group's child: its results for the parent, no table
            print("tensors %d done" % n, file=sys.stderr, flush=True)
            continue
        fl, sl = r["ferry_load"], r["safetensors_load"]
        gb = r["bytes"] / 1e9
        row = "| %d | %.1f | %.2f | %.2f | %.2f | %.1f | %.2f | %.1f%s | %.2fx |" % (
            n, fl["seconds"] * 1e3, fl["seconds"] / n * 1e6, fl["library"] / n * 1e6, fl["wrap"] / n * 1e6,
            fl["open"] * 1e3, gb / fl["seconds"], sl["seconds"] * 1e3,
            " (%s)" % sl["config"] if "safetensors_device" in r or a.device != "cpu" else "", sl["seconds"] / fl["seconds"])
        if "ferry_save" in r:
            fs, ss = r["ferry_save"], r["safetensors_save"]
            row += " %.1f | %.1f | %.2fx |" % (fs["seconds"] * 1e3, ss["seconds"] * 1e3, ss["seconds"] / fs["seconds"])
        if "ferry_into" in r:
            row += " into= %.1f ms (%.2f us/tensor, library %.2f) |" % (
                r["ferry_into"]["seconds"] * 1e3, r["ferry_into"]["seconds"] / n * 1e6, r["ferry_into"]["library"] / n * 1e6)
        for key in ("ferry_raw_read", "ferry_fromfile_loop", "instanttensor_best", "instanttensor_default"):
            if "seconds" in r.get(key, {}):
                row += " %s%s %.1f ms (%.2f GB/s, ferry %.2fx) |" % (
                    key, " (%s)" % r[key]["config"] if "config" in r[key] else "", r[key]["seconds"] * 1e3,
                    gb / r[key]["seconds"], r[key]["seconds"] / fl["seconds"])
        rows.append(row)
        for key, v in r.items():
            if isinstance(v, dict) and "error" in v:
                print("tensors %d: %s failed: %s" % (n, key, v["error"]))
        print("tensors %d done" % n, file=sys.stderr, flush=True)
    # The columns after the load's are those the rows carry: the save's where it was measured,
    # then into= and the baselines, each cell naming itself.
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tensor_bytes": a.tensor_bytes, "shards": a.shards, "rounds": a.rounds, "moe": a.moe,
                       "device": a.device, "results": res}, f, indent=1)
    if a.readers:
        return
    first = res[min(res)] if res else {}
    head = ["tensors", "ferry load ms", "us/tensor (call)", "us/tensor (library)", "of which wrapping", "open ms",
            "GB/s", "safetensors loop ms", "load ratio"]
    if "ferry_save" in first:
        head += ["ferry save ms", "safetensors save ms", "save ratio"]
    head += ["more" for key in ("ferry_into", "ferry_raw_read", "ferry_fromfile_loop", "instanttensor_best",
                                "instanttensor_default") if key in first]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
