"""The group plan of a distributed checkpoint load: which rank reads which bytes, and which
broadcasts complete the replicated tensors.

The plan is computed by libferry's ``ferry::plan_group`` (src/distributed/group_plan.cpp), the
one implementation, which this package's torch.distributed group load follows; this module
gives its result Python names. A pure function of the checkpoint's
tensor table (from the headers alone), the world (its size and, optionally, which node each
rank is on and which node owns each file's storage) and the tensor-parallel rules: every rank
computes the same plan from the same inputs, so the ranks agree on it without exchanging a
byte.

Each tensor is either

* *sliced*: every rank reads only its own slice, straight into its own tensor; no collective;
* *replicated*: read once by the group (or once per node, ``replicated="node"``), in chunks of
  about ``chunk_bytes`` taken per file in file order; each chunk's bytes are water-filled over
  its readers at row granularity (a row is one index of the first dimension longer than 1, so
  every piece is one byte range), the least-loaded readers first. The readers of a chunk are
  the ranks on the node that owns its file when a layout says so, else every rank. After a
  chunk is read, broadcasts (``Chunk.broadcasts``) complete it on every rank: from each
  piece's reader to the group, or, across nodes, first to the ranks of the same local index on
  the other nodes (stage 0) and then within each node (stage 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from . import _ferry
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
    file_node: Mapping = {}

    @classmethod
    def uniform(cls, world: int, ranks_per_node: int, file_node: Mapping | None = None) -> "Layout":
        """``ranks_per_node`` consecutive ranks per node (torchrun's numbering): node r // k."""
        if ranks_per_node < 1:
            raise UsageError("Layout.uniform: ranks_per_node %d is not positive" % ranks_per_node)
        return cls([r // ranks_per_node for r in range(world)], dict(file_node or {}))


class Piece(NamedTuple):
    """Rows [start, stop) along ``dim`` of tensor ``name``: one byte range of the file."""

    name: str
    dim: int       # -1 for a tensor that is not split (a scalar, or every dimension 1)
    start: int
    stop: int
    offset: int    # file offset of the first byte
    nbytes: int
    reader: int    # the rank that reads it


class Broadcast(NamedTuple):
    """``root`` sends piece ``piece`` (an index into Chunk.pieces) to the ranks of
    ``GroupPlan.subgroups[subgroup]``; stage 1 starts when stage 0 has finished."""

    piece: int
    root: int
    subgroup: int
    stage: int


class Chunk(NamedTuple):
    file: str
    nbytes: int
    readers: tuple         # ranks allowed to read this chunk
    pieces: tuple          # Piece, in file order
    broadcasts: tuple      # Broadcast, stage 0 first


class GroupPlan(NamedTuple):
    world: int
    sliced: tuple              # names every rank reads its own slice of
    replicated: tuple          # names the group reads once
    chunks: tuple              # Chunk, in the order they are read and broadcast
    replicated_bytes: int
    read_bytes: tuple          # replicated bytes each rank reads (index = rank)
    subgroups: tuple           # rank tuples; 0 is the whole group
    collectives: str           # how the broadcasts are arranged, in words
    slice_bytes: tuple         # each rank's slice bytes (slices of `world` parts)
    bytes_received: tuple      # by broadcast, per rank
    bytes_sent: tuple
    bytes_from_other_nodes: tuple

    def pieces_of(self, rank: int, chunk: int) -> list:
        return [p for p in self.chunks[chunk].pieces if p.reader == rank]


def split_dim(shape: Sequence[int]) -> int:
    """The dimension a replicated tensor is cut along: the first one longer than 1, so that
    every run of its indices is one byte range. -1 when there is none (scalars, all ones)."""
    return _ferry.group_split_dim(list(shape))


def _rule_dim(rule) -> int:
    """The dimension a tensor-parallel rule splits (ferry.split(...) or (dim, start, stop))."""
    dim = getattr(rule, "dim", None)
    if dim is None and isinstance(rule, tuple) and rule:
        dim = rule[0]
    return int(dim) if isinstance(dim, int) else 0


def _nodes(layout: Layout, world: int):
    """The layout's nodes as ids (first appearance order), and file owners as those ids (an
    owner no rank is on gets an id of its own: every rank reads its files)."""
    ids: dict = {}
    node_of_rank = [ids.setdefault(n, len(ids)) for n in layout.node_of_rank]
    file_node = {}
    for f, n in dict(layout.file_node).items():
        file_node[str(f)] = ids[n] if n in ids else ids.setdefault(("owner", n), len(ids))
    return node_of_rank, file_node


def plan_group(tensors: Sequence[TensorEntry], world: int, *, sliced: Mapping | Sequence = (),
               layout: Layout | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
               replicated: str = "group") -> GroupPlan:
    """The group plan (see the module doc). ``sliced`` holds the tensor-parallel rules (names
    or globs; a mapping's keys count, its values say the dimension); every other tensor is
    replicated. ``replicated`` is "group" (read once across the group) or "node" (once per node
    of the layout). Deterministic: the same inputs give the same plan on every rank."""
    if world < 1:
        raise UsageError("plan_group: world size %d is not positive" % world)
    if chunk_bytes < 1:
        raise UsageError("plan_group: chunk_bytes %d is not positive" % chunk_bytes)
    if isinstance(sliced, Mapping):
        rules = [(str(p), _rule_dim(r)) for p, r in sliced.items()]
    else:
        rules = [(str(p), 0) for p in sliced]
    node_of_rank, file_node = (None, {}) if layout is None else _nodes(layout, world)
    raw = _ferry.plan_group([(t.name, list(t.shape), t.file, t.offset, t.nbytes) for t in tensors],
                            world, rules, node_of_rank, file_node, int(chunk_bytes), replicated)
    (w, sl, rep, chunks, rep_bytes, read, subgroups, collectives, slice_bytes, received, sent,
     other) = raw
    return GroupPlan(w, sl, rep,
                     tuple(Chunk(f, n, readers, tuple(Piece(*p) for p in pieces),
                                 tuple(Broadcast(*b) for b in casts))
                           for f, n, readers, pieces, casts in chunks),
                     rep_bytes, read, subgroups, collectives, slice_bytes, received, sent, other)


__all__ = ["Broadcast", "Chunk", "GroupPlan", "Layout", "Piece", "TensorEntry", "plan_group",
           "split_dim"]
