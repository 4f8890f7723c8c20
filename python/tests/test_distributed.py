"""Distributed checkpoint loads: the group plan's tables."""

import pytest

import ferry
from ferry._group_plan import Layout, TensorEntry, plan_group, split_dim


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


def test_plan_rejects_a_bad_world_and_layout():
    with pytest.raises(ferry.UsageError):
        plan_group([], 0)
    with pytest.raises(ferry.UsageError, match="node_of_rank"):
        plan_group(_file([("a", (4,))]), 2, layout=Layout(["n0"], {}))
