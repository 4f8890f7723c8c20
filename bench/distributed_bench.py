#!/usr/bin/env python3
"""Distributed checkpoint loads on N GPUs of one host, launched by torchrun (one process per
GPU, NCCL). No network needed; works with one GPU (world size 1) as a smoke test.

  torchrun --standalone --nproc_per_node=2 bench/distributed_bench.py --dir /root/ferry-ckpt
  torchrun --standalone --nproc_per_node=1 bench/distributed_bench.py --dir /tmp/ck --size 512M
  torchrun --standalone --nproc_per_node=2 bench/distributed_bench.py --dir /tmp/ck --size 64M \
      --layers 4 --cpu        # the script's logic on a CPU machine: gloo, host memory

Writes (rank 0, once, reused) a checkpoint of LLM-like bf16 tensors (embedding, q/k/v/o,
gate/up/down, norms, LM head) with huggingface_hub's sharded save, then measures, hot (the first pass warms the page cache),
best of --repeat:

  single       rank 0 alone: ferry.load_checkpoint(dir, device="cuda", like="torch")
  replicated   every GPU gets every tensor: load_checkpoint(group=WORLD); each byte is read
               once across the group and broadcast. Aggregate GB/s = world x checkpoint bytes /
               slowest rank's time (the figure InstantTensor publishes: 45 GB/s on 8xH200)
  naive        every rank reads everything itself (what vLLM does), for the same aggregate
  instanttensor  InstantTensor 0.2.2 safe_open with its NCCL process group, when importable
  tp           tensor-parallel slices (column dim 0, row dim 1) + replicated norms: bytes read
               per rank and time against replicated

and checks every tensor of the replicated and tp loads byte for byte against
safetensors.torch.load_file on every rank. Prints a table on rank 0 and one JSON object (also
written to --json).
"""

import argparse
import json
import os
import time

COLUMN = ["*.q_proj.weight", "*.k_proj.weight", "*.v_proj.weight", "*.gate_proj.weight",
          "*.up_proj.weight", "*embed_tokens.weight", "lm_head.weight"]
ROW = ["*.o_proj.weight", "*.down_proj.weight"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", required=True, help="checkpoint folder (written when missing)")
    ap.add_argument("--size", default="4.6G")
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check", choices=["all", "none"], default="all")
    ap.add_argument("--json", default="")
    ap.add_argument("--cpu", action="store_true", help="gloo and host memory (no GPU)")
    a = ap.parse_args()

    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if "MASTER_ADDR" not in os.environ:      # plain `python3 bench/distributed_bench.py`
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29512")
    if a.cpu:
        dev = "cpu"
        dist.init_process_group("gloo", rank=rank, world_size=world)
    else:
        dev = "cuda"
        torch.cuda.set_device(local)
        torch.empty(1, device="cuda")        # the CUDA context exists before any clock starts
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                device_id=torch.device("cuda", local))
    import ferry

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    if rank == 0:
        write_checkpoint(torch, a.dir, parse_size(a.size), a.layers)
    dist.barrier()
    files = sorted(os.path.join(a.dir, f) for f in os.listdir(a.dir) if f.endswith(".safetensors"))
    total = sum(os.path.getsize(p) for p in files)

    def timed(fn):
        best, out = None, None
        for _ in range(a.repeat):
            out = None
            if dev == "cuda":
                torch.cuda.empty_cache()
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            out = fn()
            sync()
            dt = time.perf_counter() - t0
            # The slowest rank's time is the group's time.
            t = torch.tensor([dt], device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            best = t.item() if best is None else min(best, t.item())
        return best, out

    results = {"world": world, "checkpoint_bytes": total, "files": len(files)}

    # single: rank 0 alone
    if rank == 0:
        t0 = None
        best = None
        for _ in range(a.repeat):
            sync()
            t0 = time.perf_counter()
            out = ferry.load_checkpoint(a.dir, device=dev, like="torch" if dev == "cuda" else None)
            sync()
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
            del out
        results["single"] = {"seconds": best, "GBps": total / best / 1e9}
    dist.barrier()

    group = dist.group.WORLD
    dt, rep = timed(lambda: ferry.load_checkpoint(a.dir, group=group))
    results["replicated"] = {"seconds": dt, "aggregate_GBps": world * total / dt / 1e9,
                             "stats": _gather(dist, _small(rep.stats))}
    if a.check == "all":
        results["replicated"]["mismatched"] = _check(torch, dist, files, rep, None)
    del rep

    dt, naive = timed(lambda: ferry.load_checkpoint(a.dir, device=dev,
                                                    like="torch" if dev == "cuda" else None))
    results["naive"] = {"seconds": dt, "aggregate_GBps": world * total / dt / 1e9}
    del naive

    results["instanttensor"] = (_instanttensor(torch, dist, files, timed, world, total)
                                if dev == "cuda" else {"skipped": "--cpu"})

    rules = ferry.tensor_parallel(rank, world, column=COLUMN, row=ROW)
    dt, tp = timed(lambda: ferry.load_checkpoint(a.dir, group=group, tp=rules))
    results["tp"] = {"seconds": dt, "time_vs_replicated": dt / results["replicated"]["seconds"],
                     "stats": _gather(dist, _small(tp.stats))}
    results["tp"]["bytes_read_fraction"] = [s["bytes_read"] / total
                                            for s in results["tp"]["stats"]]
    if a.check == "all":
        results["tp"]["mismatched"] = _check(torch, dist, files, tp, rules)
    del tp

    if rank == 0:
        print("distributed checkpoint load: %d rank(s), %.2f GiB in %d files" %
              (world, total / 2**30, len(files)))
        if "single" in results:
            print("  single GPU (rank 0 alone)     %7.3f s  %6.1f GB/s" %
                  (results["single"]["seconds"], results["single"]["GBps"]))
        for k in ("replicated", "naive", "instanttensor"):
            r = results.get(k) or {}
            if "seconds" in r:
                print("  %-28s  %7.3f s  %6.1f GB/s aggregate" % (k, r["seconds"], r["aggregate_GBps"]))
            elif r:
                print("  %-28s  %s" % (k, r.get("skipped", r)))
        t = results["tp"]
        print("  tp (%d-way slices)            %7.3f s  %.2fx replicated time; bytes read per rank %s"
              % (world, t["seconds"], t["time_vs_replicated"],
                 ["%.0f%%" % (100 * f) for f in t["bytes_read_fraction"]]))
        for k in ("replicated", "tp"):
            if "mismatched" in results[k]:
                print("  byte-exact vs safetensors (%s): %s" %
                      (k, "yes" if not results[k]["mismatched"] else results[k]["mismatched"][:5]))
        print(json.dumps(results))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1)
    dist.destroy_process_group()


def parse_size(text):
    t = text.strip().upper().rstrip("B").rstrip("I")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t[-1:] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def write_checkpoint(torch, folder, size, layers, shards=5):
    """An LLM-like bf16 checkpoint of about `size` bytes (hidden h, MLP 3.5h, vocab 32000),
    in `shards` files by huggingface_hub; kept when a previous run wrote the same."""
    marker = os.path.join(folder, ".distributed-bench-%d-%d-%d" % (size, layers, shards))
    if os.path.exists(marker):
        return
    from huggingface_hub import save_torch_state_dict

    vocab = 32000

    def per_layer(h):
        return 4 * h * h + 3 * h * int(3.5 * h) + 2 * h

    h = 128
    while 2 * (layers * per_layer(h + 128) + 2 * vocab * (h + 128)) <= size:
        h += 128
    m = int(3.5 * h) // 128 * 128
    g = torch.Generator().manual_seed(0)
    sd = {"model.embed_tokens.weight": (vocab, h)}
    for i in range(layers):
        p = "model.layers.%d." % i
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + "self_attn.%s.weight" % n] = (h, h)
        sd[p + "mlp.gate_proj.weight"] = (m, h)
        sd[p + "mlp.up_proj.weight"] = (m, h)
        sd[p + "mlp.down_proj.weight"] = (h, m)
        sd[p + "input_layernorm.weight"] = (h,)
        sd[p + "post_attention_layernorm.weight"] = (h,)
    sd["model.norm.weight"] = (h,)
    sd["lm_head.weight"] = (vocab, h)
    sd = {k: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16) for k, s in sd.items()}
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.unlink(os.path.join(folder, f))
    total = sum(t.numel() * 2 for t in sd.values())
    save_torch_state_dict(sd, folder, max_shard_size=total // shards + 1)
    open(marker, "w").close()


def _small(stats):
    return {k: v for k, v in stats.items() if not isinstance(v, (list, dict))}


def _gather(dist, obj):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _check(torch, dist, files, got, rules):
    """Names of tensors that differ from safetensors on any rank (this rank's slice for tp)."""
    import fnmatch

    from safetensors import safe_open

    bad = []
    for path in files:
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in f.keys():
                want = f.get_tensor(name)
                rule = None
                if rules:
                    rule = next((s for p, s in rules.items() if fnmatch.fnmatchcase(name, p)), None)
                if rule is not None:
                    dim = rule.dim % want.dim()
                    n = want.shape[dim]
                    lo, hi = rule.part * n // rule.parts, (rule.part + 1) * n // rule.parts
                    want = want.narrow(dim, lo, hi - lo).contiguous()
                g = got[name].cpu()
                if g.shape != want.shape or not torch.equal(g.reshape(-1).view(torch.uint8),
                                                            want.reshape(-1).view(torch.uint8)):
                    bad.append(name)
    everyone = _gather(dist, bad)
    return sorted({n for b in everyone for n in b})


def _instanttensor(torch, dist, files, timed, world, total):
    try:
        import inspect

        import instanttensor
        from instanttensor import safe_open
    except Exception as e:
        return {"skipped": "InstantTensor is not importable: %s" % e}
    try:
        params = inspect.signature(safe_open).parameters
    except (TypeError, ValueError) as e:  # a compiled function may carry no signature
        return {"skipped": "cannot inspect instanttensor.safe_open: %s" % e}
    key = next((p for p in params if "group" in p), None)
    if key is None:
        return {"skipped": "instanttensor.safe_open takes no process group (parameters: %s)" %
                           list(params)}

    # Its buffered backends are what InstantTensor documents for a model loaded again soon (the
    # page cache holds it here); INSTANTTENSOR_BACKEND, when set, picks another.
    backend = None if os.environ.get("INSTANTTENSOR_BACKEND") else instanttensor.BackendPolicy.BUFFERED

    def load():
        out = {}
        kw = {key: dist.group.WORLD}
        if backend is not None:
            kw["backend"] = backend
        with safe_open(files, framework="pt", device=torch.cuda.current_device(), **kw) as f:
            for name, t in f.tensors():
                out[name] = t
        return out

    try:
        dt, _ = timed(load)
    except Exception as e:
        return {"skipped": "InstantTensor failed: %s: %s" % (type(e).__name__, e)}
    return {"seconds": dt, "aggregate_GBps": world * total / dt / 1e9}


if __name__ == "__main__":
    main()
