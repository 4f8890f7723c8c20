#!/usr/bin/env python3
"""Checkpoint loading on the GPU machine, one unattended run, no network.

Writes (once, reused) a checkpoint of LLM-like bf16 tensors: embedding, per layer q/k/v/o
attention weights and biases, gate/up/down MLP weights and two norms, a final norm and an
LM head; >= 4 GiB in 6 shards and >= 800 tensors at the default size, saved with
huggingface_hub's sharded torch save (else safetensors per shard with ferry's index). Then, each
measurement in a fresh process that imports everything and makes its CUDA context before the
clock starts:

  sweep  each peer's documented knobs (bench/peer_configs.py), hot, all shards, a process per
         configuration: InstantTensor's backends and chunk sizes through one safe_open,
         fastsafetensors' threads and bounce buffer, safetensors straight to the device or
         through the host.
         The fastest configuration is "its best" below; a configuration it refuses is listed
         with its error.
  hot    (the readers taking turns for --hot-rounds rounds (2), the best process of each)
         ferry.load_checkpoint(dir, device="cuda", like="torch")
         vs a pinned host -> device copy of the same bytes (the ceiling) bar >= 0.95x
         vs ferry.fromfile of each shard (raw bytes, the same total)   bar >= 0.95x
         vs InstantTensor at its best and at its defaults              (reported)
         vs fastsafetensors (nogds) at its best and its defaults       (reported)
         vs safetensors.torch.load_file over the shards, at its best  bar >= 6x
  cold   page cache dropped (root: /proc/sys/vm/drop_caches; else posix_fadvise DONTNEED), the
         readers taking turns for --cold-rounds rounds (2), the best of each
         ferry vs a parallel buffered read of the files (16 threads)  bar >= 0.95x
         vs InstantTensor, the faster of its default backend (O_DIRECT)
         and its hot best                                             bar >= 1.5x
  into   ferry.load_checkpoint(dir, into=model) vs the dict load      bar >= 0.95x,
         peak extra device memory <= 64 MiB
  tp     half tensor-parallel slices (column: dim 0, row: dim 1)       bar <= 55% bytes,
                                                                       <= 0.55x time
  first  time to first read and whole time of the first ferry call in a fresh process

  python3 bench/checkpoint_bench.py --dir /root/ferry-ckpt --size 4.6G       # the figures
  python3 bench/checkpoint_bench.py --dir /tmp/ck --size 256M --layers 4     # a quick run

Prints a table with ratios against the bars, then one JSON object (also written to --json).
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peer_configs as pc  # noqa: E402
from bench_common import (  # noqa: E402
    evict as drop_caches,
    gpu_numa_nodes,
    numa_nodes,
    parse_size,
    placement,
    warm,
)


def shapes(size, layers):
    """LLM-like shapes whose bf16 total is about `size`: hidden h, MLP 3.5h, vocab 32k."""
    vocab = 32000
    per_layer = lambda h: 4 * h * h + 3 * h + 3 * h * int(3.5 * h) + 2 * h  # noqa: E731
    h = 256
    while 2 * (layers * per_layer(h + 128) + 2 * vocab * (h + 128)) <= size:
        h += 128
    m = int(3.5 * h) // 128 * 128
    out = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = "model.layers.%d." % i
        for n in ("q_proj", "k_proj", "v_proj"):
            out.append((p + "self_attn.%s.weight" % n, (h, h)))
            out.append((p + "self_attn.%s.bias" % n, (h,)))
        out.append((p + "self_attn.o_proj.weight", (h, h)))
        out.append((p + "mlp.gate_proj.weight", (m, h)))
        out.append((p + "mlp.up_proj.weight", (m, h)))
        out.append((p + "mlp.down_proj.weight", (h, m)))
        out.append((p + "input_layernorm.weight", (h,)))
        out.append((p + "post_attention_layernorm.weight", (h,)))
    out.append(("model.norm.weight", (h,)))
    out.append(("lm_head.weight", (vocab, h)))
    return out


COLUMN = ["*.q_proj.*", "*.k_proj.*", "*.v_proj.*", "*.gate_proj.weight", "*.up_proj.weight",
          "*embed_tokens.weight", "lm_head.weight"]
ROW = ["*.o_proj.weight", "*.down_proj.weight"]


def write_checkpoint(folder, size, layers, shards):
    import torch
    marker = os.path.join(folder, ".complete-%d-%d-%d" % (size, layers, shards))
    if os.path.exists(marker):
        return
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.unlink(os.path.join(folder, f))
    sd = {}
    g = torch.Generator().manual_seed(0)
    for name, shape in shapes(size, layers):
        sd[name] = (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)
    total = sum(t.numel() * 2 for t in sd.values())
    max_shard = total // shards + 1
    try:
        from huggingface_hub import save_torch_state_dict
        save_torch_state_dict(sd, folder, max_shard_size=max_shard)
    except ImportError:  # safetensors per shard, the index in the same layout
        from safetensors.torch import save_file
        names, shard, size_now, weight_map, k = list(sd), {}, 0, {}, 0
        groups = []
        for n in names:
            b = sd[n].numel() * 2
            if shard and size_now + b > max_shard:
                groups.append(shard)
                shard, size_now = {}, 0
            shard[n] = sd[n]
            size_now += b
        groups.append(shard)
        for k, grp in enumerate(groups):
            fn = "model-%05d-of-%05d.safetensors" % (k + 1, len(groups))
            save_file(grp, os.path.join(folder, fn), metadata={"format": "pt"})
            weight_map.update({n: fn for n in grp})
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    open(marker, "w").close()


def shard_files(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors"))


# ---- workers: each runs in its own process -------------------------------------------------

PEER_MODULE = {"instanttensor": "instanttensor", "fastsafetensors": "fastsafetensors",
               "safetensors": "safetensors.torch"}


def peer_load(peer, mod, files, cfg):
    """One load of every shard onto the GPU by a peer at configuration cfg (None: its defaults);
    returns what it loaded, or its byte count where the tensors are views of its own buffers."""
    if peer == "instanttensor":
        return pc.instanttensor_load(mod, files, cfg)
    if peer == "fastsafetensors":
        return pc.fastsafetensors_load(mod, files, cfg, lambda d: sum(t.numel() * t.element_size()
                                                                      for t in d.values()))
    return pc.safetensors_load(mod, files, cfg)


def loaded_bytes(out):
    return out if isinstance(out, int) else sum(t.numel() * t.element_size() for t in out.values())


def worker(kind, folder, repeat, cfg=None):
    import torch
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the CUDA context exists before the clock starts
    files = shard_files(folder)
    nbytes = sum(os.path.getsize(p) for p in files)
    result = {"kind": kind}
    peer = next((p for p in PEER_MODULE if kind.startswith(p)), None)
    if peer:
        import importlib
        mod = importlib.import_module(PEER_MODULE[peer])
        if cfg and peer == "instanttensor":
            pc.instanttensor_backend(mod, cfg["backend"])  # a name it does not know fails here, named
    import ferry
    if kind == "ceiling":
        src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")

    def once():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        extra = {}
        if kind == "ferry":
            out = ferry.load_checkpoint(folder, device="cuda", like="torch")
            extra = {"bytes": out.stats["bytes_read"], "first_read_s": out.stats["first_read_seconds"],
                     "requests": out.stats["requests"], "library_s": out.stats["seconds"],
                     "open_s": out.stats["open_seconds"]}
        elif kind == "raw":
            out = [ferry.fromfile(p, "uint8", device="cuda", like="torch") for p in files]
            extra = {"bytes": nbytes}
        elif kind == "buffered":
            from concurrent.futures import ThreadPoolExecutor
            chunk = 64 << 20
            jobs = [(p, o) for p in files for o in range(0, os.path.getsize(p), chunk)]

            def read(job):
                with open(job[0], "rb", buffering=0) as f:
                    return len(os.pread(f.fileno(), chunk, job[1]))
            with ThreadPoolExecutor(16) as ex:
                extra = {"bytes": sum(ex.map(read, jobs))}
            out = None
        elif peer:
            out = peer_load(peer, mod, files, cfg)
            extra = {"bytes": loaded_bytes(out)}
        elif kind == "ceiling":
            dst.copy_(src, non_blocking=True)
            out, extra = None, {"bytes": nbytes}
        elif kind in ("into", "dict"):
            info = ferry.info_checkpoint(folder)
            if kind == "into":
                # A module whose state_dict names are the checkpoint's, parameters on the GPU.
                model = torch.nn.Module()
                for t in info["tensors"]:
                    *path, leaf = t["name"].split(".")
                    m = model
                    for part in path:
                        if not hasattr(m, part):
                            m.add_module(part, torch.nn.Module())
                        m = getattr(m, part)
                    m.register_parameter(leaf, torch.nn.Parameter(
                        torch.empty(t["shape"], dtype=torch.bfloat16, device="cuda"), requires_grad=False))
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                t0 = time.perf_counter()
                r = ferry.load_checkpoint(folder, into=model)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                # torch's allocator sees its own peak; ferry's device temporaries come from
                # its stats (a load into existing tensors of the file's dtype needs none).
                return {"seconds": dt, "bytes": r.stats["bytes_read"], "library_s": r.stats["seconds"],
                        "peak_extra_device": torch.cuda.max_memory_allocated() - base
                        + r.stats["device_temp_bytes"],
                        "peak_temp": r.stats["peak_temp_bytes"]}
            out = ferry.load_checkpoint(folder, device="cuda", like="torch")
            extra = {"bytes": out.stats["bytes_read"], "library_s": out.stats["seconds"]}
        elif kind == "tp":
            rules = ferry.tensor_parallel(0, 2, column=COLUMN, row=ROW)
            out = ferry.load_checkpoint(folder, device="cuda", like="torch", slices=rules)
            extra = {"bytes": out.stats["bytes_read"], "requests": out.stats["requests"],
                     "library_s": out.stats["seconds"], "open_s": out.stats["open_seconds"],
                     "routes": sorted({p["route"] for p in out.stats["plan"]})}
        else:
            raise SystemExit("unknown worker " + kind)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        del out
        return dict(extra, seconds=dt)

    runs = [once() for _ in range(repeat)]
    best = min(runs, key=lambda r: r["seconds"])
    result.update(best)
    result["placement"] = placement()
    result["first_call"] = runs[0]
    return result


def run_worker(kind, folder, repeat, cold=False, env=None, cfg=None):
    files = shard_files(folder)
    how = None
    if cold:
        how = drop_caches(files)
    else:
        warm(files)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--dir", folder,
           "--repeat", str(repeat)] + (["--config-json", json.dumps(cfg)] if cfg else [])
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["failed"]
        return {"kind": kind, "skipped": tail[0][:200]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if how:
        r["cache_drop"] = how
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/ferry-ckpt-bench")
    ap.add_argument("--size", default="4.6G")
    ap.add_argument("--layers", type=int, default=68)
    ap.add_argument("--shards", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hot-rounds", type=int, default=2, help="turns of the hot readers (best of each)")
    ap.add_argument("--cold-rounds", type=int, default=2, help="turns of the cold readers (best of each)")
    ap.add_argument("--json", default="")
    ap.add_argument("--sweep-repeat", type=int, default=2,
                    help="runs per configuration in a peer's sweep, each configuration a process (default 2)")
    ap.add_argument("--peers", default="instanttensor,fastsafetensors,safetensors",
                    help="the peers to sweep and run (default: all three)")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--config-json", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.dir, a.repeat, json.loads(a.config_json) if a.config_json else None)))
        return
    size = parse_size(a.size)
    write_checkpoint(a.dir, size, a.layers, a.shards)
    files = shard_files(a.dir)
    total = sum(os.path.getsize(p) for p in files)
    import ferry
    info = ferry.info_checkpoint(a.dir)
    print("checkpoint: %s, %d shards, %d tensors, %.2f GiB" % (a.dir, len(files), len(info["tensors"]),
                                                              total / (1 << 30)))
    R = {}

    def keep_best(key, r):
        """The faster of r and what R[key] holds, with every round's time in "rounds"."""
        best = R.get(key)
        rounds = (best or {}).get("rounds", []) + [r.get("seconds")]
        if best is None or ("seconds" in r and r["seconds"] < best.get("seconds", float("inf"))):
            best = r
        R[key] = dict(best, rounds=rounds)

    # Each peer's knobs first, hot: its fastest configuration is "<peer>_best" below.
    peers = [p for p in a.peers.split(",") if p]
    best_cfg, R["sweeps"] = {}, {}
    grids = {"instanttensor": pc.instanttensor_grid, "fastsafetensors": pc.fastsafetensors_grid,
             "safetensors": pc.safetensors_grid}
    for peer in peers:
        if importlib.util.find_spec(PEER_MODULE[peer].split(".")[0]) is None:
            sw = {"unavailable": "not importable: No module named %r" % PEER_MODULE[peer].split(".")[0]}
        else:
            sw = {"rows": pc.sweep(grids[peer](), lambda cfg: run_worker(peer + "_best", a.dir, a.sweep_repeat,
                                                                         cfg=cfg))}
        R["sweeps"][peer] = sw
        b = pc.best_of(sw.get("rows", []))
        best_cfg[peer] = b["config"] if b else None
        print("sweep %-16s %s" % (peer, "best %.1f GB/s at %s" % (total / b["seconds"] / 1e9, b["label"]) if b
                                  else sw.get("unavailable") or "no configuration ran"), flush=True)
        for r in sw.get("rows", []):
            print("    %-60s %s" % (r["label"], "%.2f GB/s" % (total / r["seconds"] / 1e9) if "seconds" in r
                                   else "failed: " + r["failed"]), flush=True)

    def run_peer(kind, cold=False):
        """A peer's reader: '<peer>_default' as installed, '<peer>_best' at its sweep's best."""
        peer, which = kind.rsplit("_", 1)
        if which == "default":
            return run_worker(kind, a.dir, 1 if cold else a.repeat, cold=cold)
        if best_cfg.get(peer) is None:
            sw = R["sweeps"].get(peer, {})
            return {"kind": kind, "skipped": sw.get("unavailable") or "its sweep found no configuration that runs"}
        r = run_worker(kind, a.dir, 1 if cold else a.repeat, cold=cold, cfg=best_cfg[peer])
        return dict(r, config=best_cfg[peer], settings=pc.describe(best_cfg[peer]))

    # A hot load's time moves by several percent from one process to the next (where its
    # memory lands), more than some bars' margins: the readers take turns for --hot-rounds
    # rounds, each keeping its best process.
    hot = ["ferry", "ceiling", "raw"] + ["%s_%s" % (p, w) for p in peers for w in ("default", "best")] + \
        ["dict", "into", "tp"]
    for _ in range(max(1, a.hot_rounds)):
        for k in hot:
            if "skipped" in R.get(k, {}):
                continue
            r = run_peer(k) if k.rsplit("_", 1)[0] in PEER_MODULE else run_worker(k, a.dir, a.repeat)
            if "skipped" in r:
                R[k] = r
            else:
                keep_best(k, r)
    R["first"] = run_worker("ferry", a.dir, 1)
    # Cold reads are disk-bound and vary from one read to the next: the readers take turns,
    # round after round, and each keeps its best (every round is in the JSON). InstantTensor
    # documents O_DIRECT (its default) for loads done once, buffered for loads repeated: both run.
    cold = ["ferry", "buffered"] + (["instanttensor_default", "instanttensor_best"] if "instanttensor" in peers else [])
    for _ in range(max(1, a.cold_rounds)):
        for k in cold:
            r = run_peer(k, cold=True) if k.startswith("instanttensor") else run_worker(k, a.dir, 1, cold=True)
            keep_best("cold_" + k, r)
    for it in ("cold_instanttensor_default", "cold_instanttensor_best"):  # InstantTensor's best cold
        if "seconds" in R.get(it, {}) and R[it]["seconds"] < R.get("cold_instanttensor", {}).get("seconds", 1e18):
            R["cold_instanttensor"] = dict(R[it], which=it)

    def gbps(k):
        r = R.get(k, {})
        return total / r["seconds"] / 1e9 if "seconds" in r else None

    def ratio(a_, b_, invert=False):
        x, y = R.get(a_, {}).get("seconds"), R.get(b_, {}).get("seconds")
        if not x or not y:
            return None
        return (x / y) if invert else (y / x)

    def settings(k):
        return " (%s)" % R[k]["settings"] if R.get(k, {}).get("settings") else ""

    rows = [
        ("hot: ferry vs the pinned copy ceiling", ratio("ferry", "ceiling"), ">= 0.95"),
        ("hot: ferry vs raw read", ratio("ferry", "raw"), ">= 0.95"),
        ("hot: ferry vs InstantTensor at its best" + settings("instanttensor_best"),
         ratio("ferry", "instanttensor_best"), "(reported)"),
        ("hot: ferry vs InstantTensor, defaults", ratio("ferry", "instanttensor_default"), "(reported)"),
        ("hot: ferry vs fastsafetensors at its best" + settings("fastsafetensors_best"),
         ratio("ferry", "fastsafetensors_best"), "(reported)"),
        ("hot: ferry vs fastsafetensors, defaults", ratio("ferry", "fastsafetensors_default"), "(reported)"),
        ("hot: ferry vs safetensors at its best" + settings("safetensors_best"),
         ratio("ferry", "safetensors_best"), ">= 6"),
        ("hot: ferry vs safetensors, load_file(device='cuda')", ratio("ferry", "safetensors_default"), "(reported)"),
        ("cold: ferry vs parallel buffered read", ratio("cold_ferry", "cold_buffered"), ">= 0.95"),
        ("cold: ferry vs InstantTensor at its best (%s)" % R.get("cold_instanttensor", {}).get("which", "-"),
         ratio("cold_ferry", "cold_instanttensor"), ">= 1.5"),
        ("into=: speed vs dict load", ratio("into", "dict"), ">= 0.95"),
    ]
    print("\n%-72s %10s %10s" % ("measure", "ratio", "bar"))
    for name, r, bar in rows:
        print("%-72s %10s %10s" % (name, "skipped" if r is None else "%.2fx" % r, bar))
    into = R.get("into", {})
    if "peak_extra_device" in into:
        print("%-42s %9.1fM %10s" % ("into=: peak extra device memory", into["peak_extra_device"] / 2**20, "<= 64M"))
    tp = R.get("tp", {})
    if "bytes" in tp and "seconds" in R.get("ferry", {}):
        print("%-42s %9.1f%% %10s" % ("tp half: bytes read", 100 * tp["bytes"] / total, "<= 55%"))
        print("%-42s %9.2fx %10s" % ("tp half: time vs whole", tp["seconds"] / R["ferry"]["seconds"], "<= 0.55"))
    for k in ("ferry", "dict", "into", "tp"):
        r = R.get(k, {})
        if "library_s" in r:  # the C++ load against the whole Python call
            print("%-42s %8.1fms %8.1fms" % (k + ": load in the library / whole call", r["library_s"] * 1e3,
                                               r["seconds"] * 1e3))
        if "open_s" in r:  # the index and headers, which the call pays and the library's load does not count
            print("%-42s %8.1fms" % (k + ": open (index and headers)", r["open_s"] * 1e3))
    for k in ("ferry", "ceiling", "dict", "into", "tp", "cold_ferry", "cold_buffered", "cold_instanttensor_default",
              "cold_instanttensor_best"):
        secs = [x for x in R.get(k, {}).get("rounds", []) if x]
        if secs:
            print("%-42s %s" % (k + ": rounds (s)", " ".join("%.3f" % x for x in secs)))
    first = R.get("first", {}).get("first_call", {})
    if first:
        print("%-42s %8.1fms %10s" % ("first call: time to first read", first.get("first_read_s", 0) * 1e3, "< 100ms"))
        print("%-42s %9.3fs" % ("first call: whole load", first.get("seconds", 0)))
    print("\nGB/s: " + ", ".join("%s %.1f" % (k, gbps(k)) for k in R if k != "sweeps" and gbps(k)))
    if len(numa_nodes()) > 1:  # each worker's CPU and NUMA node, against the GPU's
        print("NUMA node of each worker (GPU on %s): " % (",".join(map(str, gpu_numa_nodes())) or "?")
              + ", ".join("%s %s" % (k, R[k].get("placement", {}).get("node")) for k in R if k != "sweeps"))
    for k, r in R.items():
        if k != "sweeps" and "skipped" in r:
            print("skipped %s: %s" % (k, r["skipped"]))
    out = {"dir": a.dir, "bytes": total, "shards": len(files), "tensors": len(info["tensors"]), "results": R}
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
