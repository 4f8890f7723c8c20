"""One rank of a ferry.dcp test (python/tests/test_dcp.py starts several of these as real
processes joined by torch.distributed's gloo backend on 127.0.0.1).

Each rank saves, with ferry.dcp.FileSystemWriter, a state dict of replicated tensors (the same
on every rank), rank-local tensors (one name per rank), non-tensor values and, where torch has
DTensor, a tensor sharded over the ranks along dimension 0. It then loads it back with
ferry.dcp.FileSystemReader, read once across the group (``dedup`` on) and each rank alone
(``dedup`` off), the DTensor resharded along dimension 1, and checks every value. The bytes
each load read from storage and the results go to ``--out`` as JSON. Then rank 0 flips one byte
of a replicated tensor and of a DTensor shard: every rank's load must fail with
ferry.IntegrityError, read once across the group and resharded alike.
"""

import argparse
import json
import traceback
from datetime import timedelta


def state(torch, rank, world, replicate_seed=7):
    g = torch.Generator().manual_seed(replicate_seed)
    sd = {
        "model": {"embed": torch.randn(64, 48, generator=g).to(torch.bfloat16),
                  "norm": torch.randn(48, generator=g),
                  "empty": torch.empty(0, 4)},
        "step": 11,
        "rank_%d" % rank: torch.full((100 + rank,), float(rank)),
    }
    return sd


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    import ferry.dcp

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port, rank=a.rank,
                            world_size=a.world, timeout=timedelta(seconds=60))
    result = {"rank": a.rank, "ok": False}
    try:
        run(a, torch, dist, dcp, ferry, result)
        result["ok"] = True
    except Exception:
        result["error"] = traceback.format_exc()
    with open(a.out, "w") as f:
        json.dump(result, f)
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    return 0


def dtensor_parts(torch, world):
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:
        return None
    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(24 * 20, dtype=torch.float32).reshape(24, 20)
    return full, distribute_tensor(full, mesh, [Shard(0)]), \
        distribute_tensor(torch.zeros(24, 20), mesh, [Shard(1)])


def run(a, torch, dist, dcp, ferry, result):
    sd = state(torch, a.rank, a.world)
    parts = dtensor_parts(torch, a.world)
    if parts is not None:
        sd["sharded"] = parts[1]
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(a.ckpt))
    result["loads"] = {}
    for dedup in (True, False):
        out = {"model": {k: torch.zeros_like(v) for k, v in sd["model"].items()}, "step": 0,
               "rank_%d" % a.rank: torch.zeros(100 + a.rank)}
        if parts is not None:
            out["sharded"] = parts[2]
            out["sharded"].to_local().zero_()
        # A small budget: shared records span several chunks of the group plan.
        reader = ferry.dcp.FileSystemReader(a.ckpt, dedup=dedup, memory_budget=4096 if dedup else 1 << 30)
        dcp.load(out, storage_reader=reader)
        for k, v in sd["model"].items():
            assert torch.equal(out["model"][k], v), k
        assert out["step"] == 11, out["step"]
        assert torch.equal(out["rank_%d" % a.rank], sd["rank_%d" % a.rank])
        if parts is not None:
            assert torch.equal(out["sharded"].full_tensor(), parts[0]), "resharded DTensor"
        result["loads"]["dedup" if dedup else "alone"] = reader.stats
    result["dtensor"] = parts is not None
    for victim, dedup in (("model.embed", True), ("sharded", False)):
        if victim == "sharded" and parts is None:
            continue
        result["corrupt_" + victim] = corrupted_load(a, torch, dist, dcp, ferry, sd, parts, victim, dedup)
    truncated_load(a, torch, dist, dcp, ferry, sd, result)


def corrupted_load(a, torch, dist, dcp, ferry, sd, parts, victim, dedup):
    """Rank 0 flips the first byte of the storage of ``victim`` (every saved shard of it); each
    rank's load then fails (the error's type and text returned); the bytes are restored."""
    import os

    manifest = json.load(open(os.path.join(a.ckpt, ".ferry-checksums.json")))
    spots = [(os.path.join(a.ckpt, f), e[0]) for f, entries in manifest["files"].items()
             for e in entries if e[2].split("@")[0] == victim]
    assert spots, "no checksums recorded for %s" % victim
    dist.barrier()
    if a.rank == 0:
        for path, at in spots:
            with open(path, "r+b") as f:
                f.seek(at)
                b = f.read(1)
                f.seek(at)
                f.write(bytes([b[0] ^ 0x10]))
    dist.barrier()
    out = {"model": {k: torch.zeros_like(v) for k, v in sd["model"].items()}, "step": 0}
    if victim == "sharded":
        out = {"sharded": parts[2]}
    try:
        dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(a.ckpt, dedup=dedup, timeout=30))
        got = "loaded"
    except BaseException as e:  # DCP's CheckpointException is a BaseException
        failures = getattr(e, "failures", None) or {0: (e,)}
        inner = next(iter(failures.values()))[0]
        got = "%s: %s" % (type(inner).__name__, inner)
    dist.barrier()
    if a.rank == 0:
        for path, at in spots:
            with open(path, "r+b") as f:
                f.seek(at)
                b = f.read(1)
                f.seek(at)
                f.write(bytes([b[0] ^ 0x10]))
    dist.barrier()
    return got


def truncated_load(a, torch, dist, dcp, ferry, sd, result):
    """Rank 0 cuts the largest data file in half; every rank's shared load must then fail with
    an error naming it, none left waiting in a broadcast."""
    import os

    dist.barrier()
    if a.rank == 0:
        files = [os.path.join(a.ckpt, f) for f in os.listdir(a.ckpt) if f.endswith(".distcp")]
        victim = max(files, key=os.path.getsize)
        os.truncate(victim, os.path.getsize(victim) // 2)
    dist.barrier()
    out = {"model": {k: torch.zeros_like(v) for k, v in sd["model"].items()}, "step": 0}
    try:
        dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(a.ckpt, timeout=30))
        result["truncated"] = "loaded"
    except BaseException as e:  # DCP's CheckpointException is a BaseException
        failures = getattr(e, "failures", None) or {0: (e,)}
        inner = next(iter(failures.values()))[0]
        result["truncated"] = "%s: %s" % (type(inner).__name__, inner)


if __name__ == "__main__":
    raise SystemExit(main())
