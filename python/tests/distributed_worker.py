"""One rank of a distributed-load test (python/tests/test_distributed.py starts several of these
as real processes joined by torch.distributed over 127.0.0.1). Runs the loads of ``--jobs`` in
order on one process group, each ``ferry.load_checkpoint(group=...)`` checked tensor by tensor,
byte for byte, against safetensors on this rank, and writes what happened as a JSON list to
``--out`` (after each job). Starting torch is the slow part of a test, so one group runs
several loads; after a load that failed on every rank the group is still usable.

A job's fault makes its fault_rank fail on purpose, through public interfaces only: ``bad-open``
points this rank at a corrupt copy of the checkpoint; ``truncate`` truncates this rank's own
copy of a shard after the first chunk (a real read failure in the middle of the load);
``stall`` sleeps in the progress callback after the first chunk (the others' collectives time
out); ``bad-into`` gives this rank a destination of the wrong shape.

A job's ``layout`` (ranks per node) puts the ranks on pretend nodes (ferry.Layout.uniform), with
``own`` the shards alternately on node 0's and node 1's storage; ``replicated`` is the group
load's option of that name; ``dtype`` converts, and is then checked against a single-process
ferry load with the same dtype and slices; ``copy`` loads over a group of every rank made with
new_group instead of the default group.
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
    ap.add_argument("--jobs", required=True, help="JSON list of loads, run in order")
    ap.add_argument("--backend", default="gloo")
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    import ferry

    jobs = json.loads(a.jobs)
    timeout = max(float(j.get("timeout", 60)) for j in jobs)
    dist.init_process_group(a.backend, init_method="tcp://127.0.0.1:%d" % a.port, rank=a.rank,
                            world_size=a.world, timeout=timedelta(seconds=max(timeout, 5)))
    device = "cuda:%d" % a.rank if a.backend == "nccl" else "cpu"
    if a.backend == "nccl":
        torch.cuda.set_device(a.rank)
    # A group of every rank that is not the default group object: subgroups are then made with
    # torch's local synchronization.
    copy = dist.new_group(list(range(a.world))) if any(j.get("copy") for j in jobs) else None
    ref = {}
    for name in sorted(os.listdir(a.ckpt)):
        if name.endswith(".safetensors"):
            ref.update(load_file(os.path.join(a.ckpt, name)))
    results = []
    for k, job in enumerate(jobs):
        group = copy if job.get("copy") else dist.group.WORLD
        results.append(run_job(a, k, job, ref, device, torch, dist, ferry, group))
        with open(a.out, "w") as f:
            json.dump(results, f)
    try:
        if results[-1]["ok"]:
            dist.barrier()
        dist.destroy_process_group()
    except Exception:
        pass
    return 0


def run_job(a, k, job, ref, device, torch, dist, ferry, group):
    fault, fault_rank = job.get("fault", ""), job.get("fault_rank", -1)
    job_timeout = float(job.get("timeout", 60))
    result = {"rank": a.rank, "ok": False, "job": job}
    ckpt = a.ckpt
    faulty = a.rank == fault_rank
    progress = None
    if faulty and fault in ("bad-open", "truncate"):
        ckpt = os.path.join(os.path.dirname(a.out), "rank%d-job%d-ckpt" % (a.rank, k))
        shutil.copytree(a.ckpt, ckpt)
        shards = sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))
        victim = os.path.join(ckpt, shards[-1])
        result["victim"] = victim
        if fault == "bad-open":
            with open(victim, "r+b") as f:
                f.write(b"\xff" * 8)   # a header length past the end of the file
        else:
            def progress(done, total, victim=victim):
                with open(victim, "r+b") as f:
                    f.truncate(os.path.getsize(victim) // 2)
    elif faulty and fault == "stall":
        def progress(done, total):
            time.sleep(3 * job_timeout)

    rules = None
    if job.get("tp"):
        rules = ferry.tensor_parallel(
            a.rank, a.world,
            column=["*.q_proj.weight", "*.k_proj.weight", "*.v_proj.weight", "*.up_proj.weight",
                    "*embed_tokens.weight"],
            row=["*.o_proj.weight", "*.down_proj.weight"])

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

    as_type = job.get("dtype")
    if as_type:  # the single-process load with the same conversion and slices is the reference
        # numpy arrays (bfloat16 through ml_dtypes), moved to torch by their bytes: host
        # bfloat16 does not pass through DLPack from numpy.
        single = ferry.load_checkpoint(a.ckpt, dtype=as_type, slices=rules)
        want = {n: torch.frombuffer(bytearray(single[n].tobytes()),
                                    dtype=getattr(torch, str(single[n].dtype))
                                    ).reshape(single[n].shape) for n in want}

    t0 = time.perf_counter()
    try:
        kw = dict(group=group, tp=rules, device=device,
                  chunk_bytes=job.get("chunk_bytes", 64 << 20), timeout=job_timeout,
                  progress=progress, route="segments")
        if as_type:
            kw["dtype"] = as_type
        if job.get("layout"):
            owners = {}
            if job.get("own"):
                shards = sorted(f for f in os.listdir(a.ckpt) if f.endswith(".safetensors"))
                owners = {f: i % 2 for i, f in enumerate(shards)}
            kw["layout"] = ferry.Layout.uniform(a.world, job["layout"], owners)
        if job.get("replicated"):
            kw["replicated"] = job["replicated"]
        if job.get("into"):
            into = {n: torch.zeros_like(t, device=device) for n, t in want.items()}
            if faulty and fault == "bad-into":
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
                      want_bytes={n: t.numel() * t.element_size() for n, t in want.items()},
                      dtypes={n: str(got[n].dtype) for n in want})
    except ferry.GroupLoadError as e:
        result.update(error=type(e).__name__, failing_rank=e.rank, file=e.file, step=e.step,
                      message=str(e), timeout=isinstance(e, ferry.GroupTimeoutError))
    except Exception as e:
        result.update(error=type(e).__name__, message=str(e), trace=traceback.format_exc())
    result["seconds"] = time.perf_counter() - t0
    return result


if __name__ == "__main__":
    sys.exit(main())
