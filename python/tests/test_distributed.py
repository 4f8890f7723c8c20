"""Distributed checkpoint loads: the group plan's tables (the plan is libferry's plan_group; the
same cases run as GoogleTest tables in tests/distributed/group_plan_test.cpp), then real
processes (2, 3 and 4 ranks) joined by torch.distributed's gloo backend on 127.0.0.1, loading a
checkpoint written by huggingface_hub and safetensors, checked byte for byte on every rank;
byte counters prove that each replicated byte was read once across the group (or once per
node) and each rank read only its slices; 4 ranks as 2 nodes of 2 go through per-node
subgroups; a rank failing or stalling makes every rank raise a typed error within a bounded
time."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

import ferry
from ferry._group_plan import Layout, TensorEntry, plan_group, split_dim

from conftest import GPU_REASON, HAVE_GPU

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_worker.py")
PROCESS_TIMEOUT = 120


# ---------------------------------------------------------------------------- the plan, as tables

def _t(name, shape, file="a", offset=0, itemsize=2, dtype="bfloat16"):
    n = itemsize
    for s in shape:
        n *= s
    return TensorEntry(name, dtype, tuple(shape), file, offset, n)


def _file(names_shapes, file="a", itemsize=2):
    out, off = [], 8
    for name, shape in names_shapes:
        t = _t(name, shape, file, off, itemsize)
        out.append(t)
        off += t.nbytes
    return out


def _covered(plan, tensors):
    """Every replicated byte in exactly one piece; pieces are single byte ranges."""
    by = {t.name: t for t in tensors}
    seen = {}
    for c in plan.chunks:
        for p in c.pieces:
            t = by[p.name]
            row = t.nbytes // t.shape[p.dim] if p.dim >= 0 else t.nbytes
            assert p.nbytes == (p.stop - p.start) * row if p.dim >= 0 else t.nbytes
            assert p.offset == t.offset + (p.start * row if p.dim >= 0 else 0)
            seen.setdefault(p.name, []).append((p.offset, p.offset + p.nbytes))
    for name in plan.replicated:
        t = by[name]
        ranges = sorted(seen[name])
        assert ranges[0][0] == t.offset and ranges[-1][1] == t.offset + t.nbytes, name
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), name
    assert sum(plan.read_bytes) == plan.replicated_bytes == sum(by[n].nbytes for n in plan.replicated)


@pytest.mark.parametrize("shape,dim", [((), -1), ((1,), -1), ((1, 1, 5), 2), ((4, 3), 0),
                                       ((1, 7, 2), 1), ((0, 5), 1)])
def test_split_dim_is_the_first_dimension_longer_than_one(shape, dim):
    assert split_dim(shape) == dim


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_plan_reads_every_replicated_byte_once_balanced(world):
    tensors = _file([("embed", (1000, 64))] + [("norm%d" % i, (64,)) for i in range(10)] +
                    [("bias", (3,)), ("scalar", ()), ("w", (1, 500))])
    plan = plan_group(tensors, world, chunk_bytes=1 << 20)
    _covered(plan, tensors)
    total = plan.replicated_bytes
    # Balanced: within one row of the largest tensor (128 bytes) plus a small tensor of the ideal.
    for b in plan.read_bytes:
        assert abs(b - total / world) <= 2 * 128 + 1000, plan.read_bytes


def test_plan_cases_table():
    # (tensors, world, sliced rules, expected sliced names, expected replicated names)
    f = _file([("a.q_proj.weight", (8, 4)), ("a.norm", (4,)), ("b.o_proj.weight", (4, 8))])
    cases = [
        (f, 2, {}, (), ("a.norm", "a.q_proj.weight", "b.o_proj.weight")),
        (f, 2, {"*.q_proj.weight": None, "*.o_proj.weight": None},
         ("a.q_proj.weight", "b.o_proj.weight"), ("a.norm",)),
        (f, 1, ["a.norm"], ("a.norm",), ("a.q_proj.weight", "b.o_proj.weight")),
    ]
    for tensors, world, rules, sliced, replicated in cases:
        plan = plan_group(tensors, world, sliced=rules)
        assert plan.sliced == sliced and plan.replicated == replicated
        _covered(plan, tensors)


def test_plan_splits_large_tensors_into_row_chunks():
    tensors = _file([("embed", (1024, 256))])          # 512 KiB of bf16, 512-byte rows
    plan = plan_group(tensors, 4, chunk_bytes=64 << 10)
    assert len(plan.chunks) == 8
    for c in plan.chunks:
        assert c.nbytes == 64 << 10
        assert sorted(p.reader for p in c.pieces) == [0, 1, 2, 3]   # each chunk split four ways
        assert all(p.nbytes == 16 << 10 for p in c.pieces)
    _covered(plan, tensors)
    assert plan.read_bytes == (128 << 10,) * 4


def test_plan_gives_small_chunks_to_the_least_loaded_rank():
    # Ten tiny tensors, each its own chunk: they go round the ranks instead of all to rank 0.
    tensors = _file([("n%d" % i, (2,)) for i in range(10)])
    plan = plan_group(tensors, 3, chunk_bytes=4)
    assert len(plan.chunks) == 10
    assert sorted(plan.read_bytes) == [12, 14, 14]   # as even as 2-byte rows allow
    _covered(plan, tensors)


def test_plan_prefers_the_node_that_owns_the_file():
    a = _file([("a%d" % i, (64, 8)) for i in range(4)], file="/ckpt/s1.safetensors")
    b = _file([("b%d" % i, (64, 8)) for i in range(4)], file="/ckpt/s2.safetensors")
    layout = Layout(node_of_rank=["n0", "n0", "n1", "n1"],
                    file_node={"s1.safetensors": "n0", "/ckpt/s2.safetensors": "n1"})
    plan = plan_group(a + b, 4, layout=layout)
    for c in plan.chunks:
        want = {0, 1} if c.file.endswith("s1.safetensors") else {2, 3}
        assert set(c.readers) == want
        assert {p.reader for p in c.pieces} == want
    assert plan.read_bytes == (2048,) * 4
    _covered(plan, a + b)
    # A file no node owns is read by all ranks.
    plan = plan_group(a + b, 4, layout=Layout(["n0", "n0", "n1", "n1"], {"s1.safetensors": "n0"}))
    assert set(plan.chunks[-1].readers) == {0, 1, 2, 3}
    _covered(plan, a + b)


def test_plan_is_the_same_for_the_same_inputs_in_any_order():
    tensors = _file([("x%d" % i, (17 + i, 3)) for i in range(20)], file="f1") + \
        _file([("y%d" % i, (5, 11 + i)) for i in range(7)], file="f0")
    p1 = plan_group(tensors, 3, chunk_bytes=500)
    p2 = plan_group(list(reversed(tensors)), 3, chunk_bytes=500)
    assert p1 == p2
    _covered(p1, tensors)
    assert max(p1.read_bytes) - min(p1.read_bytes) <= 2 * 66


def test_plan_two_nodes_go_across_once_then_within():
    tensors = _file([("embed", (512, 64))] + [("norm%d" % i, (96,)) for i in range(6)])
    plan = plan_group(tensors, 4, layout=Layout.uniform(4, 2), chunk_bytes=16 << 10)
    _covered(plan, tensors)
    # The group, node 0, node 1, then one subgroup per local index (a rail across the nodes).
    assert plan.subgroups == ((0, 1, 2, 3), (0, 1), (2, 3), (0, 2), (1, 3))
    assert "2 nodes of 2 ranks" in plan.collectives
    for c in plan.chunks:
        assert c.broadcasts and c.broadcasts[0].stage == 0
        for b in c.broadcasts:
            if b.stage == 0:
                assert b.root == c.pieces[b.piece].reader and b.subgroup in (3, 4)
            else:
                assert b.stage == 1 and b.subgroup in (1, 2)
    # Each byte enters each node once: a node receives from the other what the other read.
    for node in (0, 1):
        own = plan.read_bytes[2 * node] + plan.read_bytes[2 * node + 1]
        across = plan.bytes_from_other_nodes[2 * node] + plan.bytes_from_other_nodes[2 * node + 1]
        assert across == plan.replicated_bytes - own
    assert all(plan.bytes_received[r] == plan.replicated_bytes - plan.read_bytes[r]
               for r in range(4))


def test_plan_once_per_node_reads_everything_on_each_node():
    tensors = _file([("embed", (300, 32))] + [("norm%d" % i, (50,)) for i in range(5)])
    plan = plan_group(tensors, 4, layout=Layout(["a", "b", "a", "b"]), chunk_bytes=4096,
                      replicated="node")
    assert plan.subgroups == ((0, 1, 2, 3), (0, 2), (1, 3))
    r = plan.read_bytes
    assert r[0] + r[2] == r[1] + r[3] == plan.replicated_bytes
    assert plan.bytes_from_other_nodes == (0, 0, 0, 0)
    assert all(plan.bytes_received[k] == plan.replicated_bytes - r[k] for k in range(4))
    with pytest.raises(ferry.UsageError, match="replicated"):
        plan_group(tensors, 4, layout=Layout(["a", "b", "a", "b"]), replicated="rack")


def test_plan_rejects_a_bad_world_and_layout():
    with pytest.raises(ferry.UsageError):
        plan_group([], 0)
    with pytest.raises(ferry.UsageError, match="node_of_rank"):
        plan_group(_file([("a", (4,))]), 2, layout=Layout(["n0"], {}))


# ---------------------------------------------------------------------------- real processes

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/deps.sh installs it)")
hub = pytest.importorskip("huggingface_hub")
pytest.importorskip("safetensors.torch")


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state():
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g).to(dtype)

    sd = {"model.embed_tokens.weight": r(96, 48)}
    for i in range(3):
        p = "model.layers.%d." % i
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + "self_attn.%s.weight" % n] = r(48, 48)
        sd[p + "self_attn.q_proj.bias"] = r(48, dtype=torch.float32)
        sd[p + "mlp.up_proj.weight"] = r(72, 48)
        sd[p + "mlp.down_proj.weight"] = r(48, 72)
        sd[p + "input_layernorm.weight"] = r(48, dtype=torch.float16)
        sd[p + "post_attention_layernorm.weight"] = r(48)
    sd["model.norm.weight"] = r(48, dtype=torch.float32)
    sd["lm_head.weight"] = r(96, 48)          # replicated: no rule names it
    sd["step"] = torch.tensor([7], dtype=torch.int64)
    sd["scale"] = torch.tensor(0.5, dtype=torch.float64)
    return sd


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dist") / "ckpt"
    folder.mkdir()
    hub.save_torch_state_dict(_state(), str(folder), max_shard_size=20_000)
    assert os.path.exists(folder / "model.safetensors.index.json")
    assert len([f for f in os.listdir(folder) if f.endswith(".safetensors")]) >= 3
    return str(folder)


def _run(tmp_path, ckpt, world, jobs, backend="gloo", limit=PROCESS_TIMEOUT):
    """Starts `world` ranks running `jobs` in order; results[rank][job]."""
    port = _free_port()
    procs, outs = [], []
    for rank in range(world):
        out = tmp_path / ("rank%d.json" % rank)
        outs.append(out)
        cmd = [sys.executable, WORKER, "--rank", str(rank), "--world", str(world), "--port",
               str(port), "--ckpt", ckpt, "--out", str(out), "--jobs", json.dumps(jobs),
               "--backend", backend]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    t0 = time.monotonic()
    logs = []
    try:
        for p in procs:
            left = max(1.0, limit - (time.monotonic() - t0))
            logs.append(p.communicate(timeout=left)[0].decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for rank, out in enumerate(outs):
        assert out.exists(), "rank %d wrote no result:\n%s" % (rank, logs[rank][-3000:])
        results.append(json.loads(out.read_text()))
        assert len(results[-1]) == len(jobs), (rank, results[-1], logs[rank][-3000:])
    return results


def _file_bytes(ckpt):
    info = ferry.info_checkpoint(ckpt)
    return {t["name"]: t["bytes"] for t in info["tensors"]}


SLICED = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "up_proj.weight",
          "embed_tokens.weight", "o_proj.weight", "down_proj.weight")


def _check_replicated(results, sizes):
    total = sum(sizes.values())
    world = len(results)
    for r in results:
        assert r["ok"], r
        s = r["stats"]
        assert s["world"] == world and s["backend"] == "gloo"
        assert s["sliced_bytes_read"] == 0
        assert s["bytes_read"] == s["replicated_bytes_read"] == s["plan_read_bytes"][r["rank"]]
        # What it did not read itself came by broadcast, and nothing more.
        assert s["bytes_received"] == total - s["bytes_read"]
        assert s["bytes_sent"] == s["bytes_read"]
        assert s["chunks"] > 3
    read = [r["stats"]["bytes_read"] for r in results]
    assert sum(read) == total                    # every byte read exactly once in the group
    assert max(read) - min(read) <= 2 * 96 * 48 * 2  # balanced within about two rows


def _check_tp(results, sizes):
    sliced = [n for n in sizes if n.endswith(SLICED)]
    replicated_total = sum(b for n, b in sizes.items() if n not in sliced)
    rep_read = 0
    for r in results:
        assert r["ok"], r
        s = r["stats"]
        own_slices = sum(r["want_bytes"][n] for n in sliced)
        assert s["sliced_bytes_read"] == own_slices    # only its slices, no more
        assert s["replicated_bytes_read"] == s["plan_read_bytes"][r["rank"]]
        assert s["bytes_received"] == replicated_total - s["replicated_bytes_read"]
        rep_read += s["replicated_bytes_read"]
    assert rep_read == replicated_total
    assert sum(r["stats"]["sliced_bytes_read"] for r in results) == sum(sizes[n] for n in sliced)


@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_gets_exact_bytes_and_each_byte_is_read_once(tmp_path, ckpt, world):
    jobs = [{"chunk_bytes": 8192},                          # data parallel: all replicated
            {"tp": True, "chunk_bytes": 4096},              # tensor parallel + replicated rest
            {"tp": True, "into": True, "chunk_bytes": 16384},  # into existing tensors
            {"tp": True, "dtype": "bfloat16", "chunk_bytes": 4096}]  # converted on the way
    results = _run(tmp_path, ckpt, world, jobs)
    sizes = _file_bytes(ckpt)
    _check_replicated([r[0] for r in results], sizes)
    _check_tp([r[1] for r in results], sizes)
    _check_tp([r[2] for r in results], sizes)
    for r in (rr[3] for rr in results):
        assert r["ok"], r
        assert r["dtypes"]["model.norm.weight"] == "torch.bfloat16"   # float32 in the file
        assert r["dtypes"]["model.layers.0.input_layernorm.weight"] == "torch.float16"  # no f16->bf16
        assert r["dtypes"]["step"] == "torch.int64"


def _check_nodes(results, sizes, per_node):
    """4 ranks as 2 nodes of 2: what each node read and what crossed between the nodes."""
    total = sum(sizes.values())
    for r in results:
        assert r["ok"], r
        s = r["stats"]
        assert s["bytes_received"] == total - s["bytes_read"]
        assert s["subgroups"] == (3 if per_node else 5)
    read = [r["stats"]["bytes_read"] for r in results]
    across = [r["stats"]["bytes_from_other_nodes"] for r in results]
    node = [read[0] + read[1], read[2] + read[3]]
    if per_node:  # every node reads everything once; nothing crosses
        assert node == [total, total] and across == [0, 0, 0, 0]
    else:  # the group reads every byte once; each byte enters the other node once
        assert sum(node) == total
        assert across[0] + across[1] == total - node[0]
        assert across[2] + across[3] == total - node[1]


def test_four_ranks_as_two_nodes_go_through_per_node_subgroups(tmp_path, ckpt):
    jobs = [{"layout": 2, "chunk_bytes": 8192},
            {"layout": 2, "replicated": "node", "chunk_bytes": 8192},
            {"layout": 2, "own": True, "tp": True, "dtype": "float32", "chunk_bytes": 4096},
            {"layout": 2, "copy": True, "chunk_bytes": 16384}]   # not the default group
    results = _run(tmp_path, ckpt, 4, jobs)
    sizes = _file_bytes(ckpt)
    _check_nodes([r[0] for r in results], sizes, per_node=False)
    _check_nodes([r[1] for r in results], sizes, per_node=True)
    _check_nodes([r[3] for r in results], sizes, per_node=False)
    for r in (rr[2] for rr in results):
        assert r["ok"], r
        assert r["stats"]["sliced_bytes_read"] > 0
        assert set(r["dtypes"].values()) <= {"torch.float32", "torch.int64"}


def test_a_failing_rank_makes_every_rank_raise_and_the_group_survives(tmp_path, ckpt):
    jobs = [{"fault": "bad-open", "fault_rank": 1, "timeout": 20},
            {"into": True, "fault": "bad-into", "fault_rank": 0, "timeout": 20},
            {"chunk_bytes": 2048, "fault": "truncate", "fault_rank": 2, "timeout": 20},
            {"tp": True, "chunk_bytes": 4096}]              # the same group loads afterwards
    t0 = time.monotonic()
    results = _run(tmp_path, ckpt, 3, jobs)
    assert time.monotonic() - t0 < PROCESS_TIMEOUT
    # A corrupt shard on rank 1: every rank raises at the open step, naming rank 1 and the file.
    victim = results[1][0]["victim"]
    for r in (rr[0] for rr in results):
        assert r["error"] == "GroupLoadError", r
        assert r["failing_rank"] == 1 and r["step"] == "open"
        assert victim in r["message"], r["message"]
    # A destination of the wrong shape on rank 0: named before any byte moves.
    for r in (rr[1] for rr in results):
        assert r["error"] == "GroupLoadError", r
        assert r["failing_rank"] == 0 and r["step"] == "open"
        assert "model.norm.weight" in r["message"], r["message"]
    # Rank 2's shard truncated after the first chunk moved: every rank raises at a later chunk.
    victim = results[2][2]["victim"]
    for r in (rr[2] for rr in results):
        assert r["error"] == "GroupLoadError", r
        assert r["failing_rank"] == 2 and r["step"].startswith("chunk ")
        assert not r["step"].startswith("chunk 0 "), r["step"]
        assert r["file"] == victim or victim in r["message"], r
    _check_tp([rr[3] for rr in results], _file_bytes(ckpt))


def test_a_stalled_rank_is_reported_as_a_timeout(tmp_path, ckpt):
    results = _run(tmp_path, ckpt, 2, [{"chunk_bytes": 2048, "fault": "stall", "fault_rank": 1,
                                        "timeout": 3}], limit=60)
    r0 = results[0][0]
    assert r0["error"] == "GroupTimeoutError" and r0["timeout"], r0
    assert r0["seconds"] < 30
    # The stalled rank, once it wakes, finds its peer gone and raises too (never hangs).
    assert results[1][0].get("error"), results[1][0]


def test_group_options_need_a_group(ckpt):
    with pytest.raises(ferry.UsageError, match="group="):
        ferry.load_checkpoint(ckpt, tp={})
    with pytest.raises(ferry.UsageError, match="group="):
        ferry.load_checkpoint(ckpt, chunk_bytes=1024)


def test_world_size_one_over_nccl(tmp_path, ckpt):
    if not HAVE_GPU:
        pytest.skip(GPU_REASON)
    if not torch.cuda.is_available() or not torch.distributed.is_nccl_available():
        pytest.skip("torch has no CUDA or no NCCL here")
    results = _run(tmp_path, ckpt, 1, [{"chunk_bytes": 8192}, {"tp": True, "chunk_bytes": 4096},
                                       {"tp": True, "into": True}], backend="nccl")
    for r in results[0]:
        assert r["ok"], "%s at %s: %s" % (r.get("error"), r.get("step"), r.get("message"))
        assert r["stats"]["backend"] == "nccl"
        assert r["stats"]["bytes_received"] == 0
        assert r["stats"]["bytes_read"] == sum(r["want_bytes"].values())
