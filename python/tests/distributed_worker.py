"""One rank of a distributed-load test (python/tests/test_distributed.py starts several of these
as real processes joined by torch.distributed over 127.0.0.1). Loads a checkpoint with
``ferry.load_checkpoint(group=...)``, checks every tensor byte for byte against safetensors on
this rank, and writes what happened as JSON to ``--out``.

A fault mode makes this rank fail on purpose, through public interfaces only: ``bad-open``
points this rank at a corrupt copy of the checkpoint; ``truncate`` truncates this rank's own
copy of a shard after the first chunk (a real read failure in the middle of the load);
``stall`` sleeps in the progress callback after the first chunk (the others' collectives time
out); ``bad-into`` gives this rank a destination of the wrong shape.
"""

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from datetime import timedelta


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tp", action="store_true")
    ap.add_argument("--into", action="store_true")
    ap.add_argument("--chunk-bytes", type=int, default=64 << 20)
    ap.add_argument("--fault", default="")
    ap.add_argument("--fault-rank", type=int, default=-1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--backend", default="gloo")
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    import ferry

    dist.init_process_group(a.backend, init_method="tcp://127.0.0.1:%d" % a.port, rank=a.rank,
                            world_size=a.world, timeout=timedelta(seconds=max(a.timeout, 5)))
    device = "cuda:%d" % a.rank if a.backend == "nccl" else "cpu"
    if a.backend == "nccl":
        torch.cuda.set_device(a.rank)
    result = {"rank": a.rank, "ok": False}
    ckpt = a.ckpt
    faulty = a.rank == a.fault_rank
    progress = None
    if faulty and a.fault in ("bad-open", "truncate"):
        ckpt = os.path.join(os.path.dirname(a.out), "rank%d-ckpt" % a.rank)
        shutil.copytree(a.ckpt, ckpt)
        shards = sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))
        victim = os.path.join(ckpt, shards[-1])
        result["victim"] = victim
        if a.fault == "bad-open":
            with open(victim, "r+b") as f:
                f.write(b"\xff" * 8)   # a header length past the end of the file
        else:
            def progress(done, total, victim=victim):
                with open(victim, "r+b") as f:
                    f.truncate(os.path.getsize(victim) // 2)
    elif faulty and a.fault == "stall":
        def progress(done, total):
            time.sleep(3 * a.timeout)

    rules = None
    if a.tp:
        rules = ferry.tensor_parallel(
            a.rank, a.world,
            column=["*.q_proj.weight", "*.k_proj.weight", "*.v_proj.weight", "*.up_proj.weight",
                    "*embed_tokens.weight"],
            row=["*.o_proj.weight", "*.down_proj.weight"])

    ref = {}
    for name in sorted(os.listdir(a.ckpt)):
        if name.endswith(".safetensors"):
            ref.update(load_file(os.path.join(a.ckpt, name)))
    # What this rank must end up with: its slices of the sliced tensors, the rest whole.
    want = {}
    for name, t in ref.items():
        rule = None
        if rules:
            import fnmatch
            rule = next((s for p, s in rules.items() if fnmatch.fnmatchcase(name, p)), None)
        if rule is not None:
            dim = rule.dim % t.dim()
            n = t.shape[dim]
            lo, hi = rule.part * n // rule.parts, (rule.part + 1) * n // rule.parts
            t = t.narrow(dim, lo, hi - lo).contiguous()
        want[name] = t

    t0 = time.perf_counter()
    try:
        kw = dict(group=dist.group.WORLD, tp=rules, device=device, chunk_bytes=a.chunk_bytes,
                  timeout=a.timeout, progress=progress, route="segments")
        if a.into:
            into = {n: torch.zeros_like(t, device=device) for n, t in want.items()}
            if faulty and a.fault == "bad-into":
                into["model.norm.weight"] = torch.zeros(3, dtype=torch.float32, device=device)
            r = ferry.load_checkpoint(ckpt, into=into, **kw)
            got, stats = into, r.stats
        else:
            got = ferry.load_checkpoint(ckpt, **kw)
            stats = got.stats
        bad = []
        for name, t in want.items():
            g = got[name].cpu()
            if g.dtype != t.dtype or tuple(g.shape) != tuple(t.shape) or not torch.equal(
                    g.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)):
                bad.append(name)
        if sorted(got) != sorted(want):
            bad.append("names differ: %s" % sorted(set(got) ^ set(want)))
        result.update(ok=not bad, mismatched=bad, stats=stats,
                      want_bytes={n: t.numel() * t.element_size() for n, t in want.items()})
    except ferry.GroupLoadError as e:
        result.update(error=type(e).__name__, failing_rank=e.rank, file=e.file, step=e.step,
                      message=str(e), timeout=isinstance(e, ferry.GroupTimeoutError))
    except Exception as e:
        result.update(error=type(e).__name__, message=str(e), trace=traceback.format_exc())
    result["seconds"] = time.perf_counter() - t0
    with open(a.out, "w") as f:
        json.dump(result, f)
    try:
        if result["ok"]:
            dist.barrier()
        dist.destroy_process_group()
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
