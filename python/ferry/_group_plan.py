"""The group plan of a distributed checkpoint load: which rank reads which bytes.

A pure function of the checkpoint's tensor table (from the headers alone), the world (its size
and, optionally, which node each rank is on and which node owns each file's storage) and the
set of tensor-parallel (sliced) tensors. Every rank computes the same plan from the same
inputs, so the ranks agree on it without exchanging a byte.

Each tensor is either

* *sliced*: every rank reads only its own slice, straight into its own tensor; no collective;
* *replicated*: the group reads it once. Replicated tensors are taken in file order (so that a
  rank's share of a chunk is one file byte range the loader reads as one request), cut into
  chunks of about ``chunk_bytes``, and each chunk's bytes are partitioned among its readers at
  row granularity (a row is one index of the first dimension longer than 1, so every piece is a
  single byte range). The readers of a chunk are the ranks on the node that owns the chunk's
  file when a layout says so, else every rank. Shares are water-filled: a chunk goes first to
  the readers that have read least so far, so bytes per rank stay balanced over the whole load
  even when chunks are small or uneven. After each chunk is read, every piece is broadcast from
  its reader to the group.

The plan lives in Python because its only executor today is the torch.distributed one; it
needs nothing but the header table, costs O(tensors + chunks × world) and runs once per load.
When the C++ NCCL executor lands it moves to src/distributed/ with these table tests.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ._errors import UsageError

DEFAULT_CHUNK_BYTES = 64 << 20


class TensorEntry(NamedTuple):
    """One tensor of the checkpoint, as info_checkpoint reports it."""

    name: str
    dtype: str
    shape: tuple
    file: str
    offset: int   # absolute file offset of the first byte
    nbytes: int


class Layout(NamedTuple):
    """Where ranks and storage are. ``node_of_rank[r]`` is rank r's node (any hashable);
    ``file_node`` maps a shard path (or its base name) to the node whose local storage holds
    it. Files without an owner are read by every rank."""

    node_of_rank: Sequence
    file_node: Mapping


class Piece(NamedTuple):
    """Rows [start, stop) along ``dim`` of tensor ``name``: one byte range of the file."""

    name: str
    dim: int       # -1 for a tensor that is not split (a scalar, or every dimension 1)
    start: int
    stop: int
    offset: int    # file offset of the first byte
    nbytes: int
    reader: int    # the rank that reads it and broadcasts it


class Chunk(NamedTuple):
    file: str
    nbytes: int
    readers: tuple         # ranks allowed to read this chunk
    pieces: tuple          # Piece, in file order


class GroupPlan(NamedTuple):
    world: int
    sliced: tuple              # names every rank reads its own slice of
    replicated: tuple          # names the group reads once
    chunks: tuple              # Chunk, in the order they are read and broadcast
    replicated_bytes: int
    read_bytes: tuple          # replicated bytes each rank reads (index = rank)

    def pieces_of(self, rank: int, chunk: int) -> list:
        return [p for p in self.chunks[chunk].pieces if p.reader == rank]


def split_dim(shape: Sequence[int]) -> int:
    """The dimension a replicated tensor is cut along: the first one longer than 1, so that
    every run of its indices is one byte range. -1 when there is none (scalars, all ones)."""
    for d, n in enumerate(shape):
        if n > 1:
            return d
    return -1


def _row_bytes(t: TensorEntry, dim: int) -> int:
    if dim < 0:
        return t.nbytes
    return t.nbytes // t.shape[dim] if t.shape[dim] else 0


def matches(name: str, rules: Mapping) -> bool:
    """Whether a tensor-parallel rule (an exact name or a glob) covers ``name``."""
    return name in rules or any(fnmatch.fnmatchcase(name, p) for p in rules)


def _readers(file: str, world: int, layout: Layout | None) -> tuple:
    if layout is None:
        return tuple(range(world))
    if len(layout.node_of_rank) != world:
        raise UsageError("layout: node_of_rank has %d entries for a world of %d" %
                         (len(layout.node_of_rank), world))
    owner = layout.file_node.get(file)
    if owner is None:
        owner = layout.file_node.get(file.rsplit("/", 1)[-1])
    if owner is None:
        return tuple(range(world))
    ranks = tuple(r for r in range(world) if layout.node_of_rank[r] == owner)
    return ranks or tuple(range(world))


def _water_fill(loads: Mapping[int, int], total: int) -> dict:
    """Shares of ``total`` bytes that bring the least-loaded readers up to a common level
    first: reader r gets max(0, level - loads[r]), the shares summing to ``total``."""
    order = sorted(loads, key=lambda r: (loads[r], r))
    shares = {r: 0 for r in order}
    if total <= 0:
        return shares
    # Find the level: fill the k least-loaded readers to a common height.
    k, level = len(order), 0.0
    acc = 0
    for i, r in enumerate(order):
        acc += loads[r]
        lvl = (total + acc) / (i + 1)
        nxt = loads[order[i + 1]] if i + 1 < len(order) else math.inf
        if lvl <= nxt:
            k, level = i + 1, lvl
            break
    raw = {r: max(0.0, level - loads[r]) for r in order[:k]}
    given = 0
    for r in order[:k]:
        shares[r] = int(raw[r])
        given += shares[r]
    for r in order[:k]:  # rounding leftovers, least loaded first
        if given >= total:
            break
        shares[r] += 1
        given += 1
    return shares


def _chunks_of(entries: list, chunk_bytes: int) -> list:
    """Runs of one file's replicated tensors (in file order) of about chunk_bytes; a tensor
    larger than that is cut into row ranges. Yields lists of (entry, dim, start, stop)."""
    out, cur, cur_bytes = [], [], 0
    for t in entries:
        dim = split_dim(t.shape)
        rows = t.shape[dim] if dim >= 0 else 1
        row = _row_bytes(t, dim)
        if t.nbytes > chunk_bytes and dim >= 0 and rows > 1:
            if cur:
                out.append(cur)
                cur, cur_bytes = [], 0
            per = max(1, chunk_bytes // max(row, 1))
            for a in range(0, rows, per):
                out.append([(t, dim, a, min(rows, a + per))])
            continue
        if cur and cur_bytes + t.nbytes > chunk_bytes:
            out.append(cur)
            cur, cur_bytes = [], 0
        cur.append((t, dim, 0, rows))
        cur_bytes += t.nbytes
    if cur:
        out.append(cur)
    return out


def plan_group(tensors: Sequence[TensorEntry], world: int, *, sliced: Mapping | Sequence = (),
               layout: Layout | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> GroupPlan:
    """The group plan (see the module doc). ``sliced`` holds the tensor-parallel rules (names
    or globs; a mapping's keys count); every other tensor is replicated. Deterministic: the
    same inputs give the same plan on every rank."""
    if world < 1:
        raise UsageError("plan_group: world size %d is not positive" % world)
    if chunk_bytes < 1:
        raise UsageError("plan_group: chunk_bytes %d is not positive" % chunk_bytes)
    rules = dict.fromkeys(sliced)
    sliced_names, rep = [], []
    for t in sorted(tensors, key=lambda t: t.name):
        (sliced_names if matches(t.name, rules) else rep).append(t)
    by_file: dict = {}
    for t in rep:
        by_file.setdefault(t.file, []).append(t)
    loads = [0] * world
    chunks = []
    for file in sorted(by_file):
        entries = sorted(by_file[file], key=lambda t: t.offset)
        readers = _readers(file, world, layout)
        for run in _chunks_of(entries, chunk_bytes):
            total = sum(_row_bytes(t, d) * (b - a) if d >= 0 else t.nbytes for t, d, a, b in run)
            shares = _water_fill({r: loads[r] for r in readers}, total)
            # Readers take consecutive byte ranges of the chunk, least loaded first.
            order = [r for r in sorted(readers, key=lambda r: (loads[r], r)) if shares[r] > 0]
            pieces = []
            ri, left = 0, shares[order[0]] if order else 0
            for t, d, a, b in run:
                row = _row_bytes(t, d)
                if d < 0 or row == 0:
                    r = order[min(ri, len(order) - 1)] if order else readers[0]
                    pieces.append(Piece(t.name, d, 0, 1 if d < 0 else 0, t.offset, t.nbytes, r))
                    loads[r] += t.nbytes
                    left -= t.nbytes
                    while left <= 0 and ri + 1 < len(order):
                        ri += 1
                        left += shares[order[ri]]
                    continue
                pos = a
                while pos < b:
                    r = order[min(ri, len(order) - 1)]
                    last = ri >= len(order) - 1
                    n = b - pos if last else min(b - pos, max(1, round(left / row)))
                    pieces.append(Piece(t.name, d, pos, pos + n,
                                        t.offset + pos * row, n * row, r))
                    loads[r] += n * row
                    left -= n * row
                    pos += n
                    while left <= row / 2 and ri + 1 < len(order):
                        ri += 1
                        left += shares[order[ri]]
            chunks.append(Chunk(file, total, tuple(readers), tuple(pieces)))
    return GroupPlan(world, tuple(t.name for t in sliced_names), tuple(t.name for t in rep),
                     tuple(chunks), sum(c.nbytes for c in chunks), tuple(loads))


__all__ = ["Chunk", "GroupPlan", "Layout", "Piece", "TensorEntry", "plan_group", "split_dim"]
