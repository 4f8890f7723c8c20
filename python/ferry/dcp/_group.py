"""Read once across ranks: a DCP load where several ranks need the same records (replicated
tensors, a full state dict loaded on every rank) reads each of those bytes once in the group
and shares them over the group's backend.

The steps, on every rank of the group:

1. every rank's needed records (file, offset, length) are gathered (one all_gather_object);
   a record two or more ranks need is *shared*, the others each rank reads alone as usual;
2. the shared records go through ferry's group-load planner (ferry._group_plan.plan_group,
   each record a byte tensor): chunks of about ``chunk_bytes``, each chunk's bytes split over
   the ranks, each piece read by one rank into a record buffer (host memory on gloo, GPU memory
   on NCCL) and broadcast from it;
3. before each chunk's broadcasts an agreement (ferry._distributed._Group.agree) turns a read
   failure on any rank into the same error on every rank instead of a hung broadcast;
4. after a chunk's broadcasts, each rank checks the records the chunk completed against their
   recorded checksums (every rank holds the same bytes, so every rank reaches the same verdict)
   and copies the items it needs from the record buffers into their destinations; the buffers
   are dropped chunk by chunk (memory: about two chunks).
"""

from __future__ import annotations

import io
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.planner import LoadItemType

from .._distributed import _Group
from .._group_plan import TensorEntry, plan_group
from ._record import HEAD_BYTES, checkpoint_error, tensor_of
from ._reads import Files, check_ranges, item_name, read_pieces, resolve_tensor

_CHUNK_BYTES = 64 << 20


def group_for(reader: Any) -> Any:
    """The collectives of a shared read, or None to read alone (no process group, one rank,
    or DCP told the reader not to use collectives)."""
    import torch.distributed as dist

    if not getattr(reader, "use_collectives", True) or not (dist.is_available() and dist.is_initialized()):
        return None
    if dist.get_world_size(reader.group) < 2:
        return None
    backend = str(dist.get_backend(reader.group)).lower()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    return _Group(torch, dist, reader.group, device, reader.timeout)


def _needed(reader: Any, items: list) -> list:
    keys = []
    for req in items:
        info = reader.storage_data[req.storage_index]
        keys.append((info.relative_path, info.offset, info.length))
    return sorted(set(keys))


def read_shared(reader: Any, plan: Any, planner: Any, files: Files, g: _Group) -> dict:
    """The load of ``plan`` on this rank with the shared records read once by the group."""
    mine = _needed(reader, plan.items)
    everyone: list = [None] * g.world
    g.dist.all_gather_object(everyone, mine, group=g.group)
    counts: dict = {}
    for keys in everyone:
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
    shared = sorted(k for k, n in counts.items() if n > 1)
    shared_set = set(shared)
    local = [r for r in plan.items if _key(reader, r) not in shared_set]
    by_record: dict = {}
    for req in plan.items:
        k = _key(reader, req)
        if k in shared_set:
            by_record.setdefault(k, []).append(req)
    stats, err = {"bytes_read": 0}, None
    try:  # a failure here (a truncated or missing file) reaches every rank through the agreement
        check_ranges([(reader._source_path(k[0]), k[1], k[2], _entry_name(k)) for k in shared])
        if local:
            stats = reader._read_local(local, planner, files)
    except Exception as e:
        err = e
    g.agree("open", err, None)
    names = {_entry_name(k): k for k in shared}
    entries = [TensorEntry(_entry_name(k), "uint8", (k[2],), reader._source_path(k[0]), k[1], k[2])
               for k in shared]
    gplan = plan_group(entries, g.world, chunk_bytes=min(reader.memory_budget, _CHUNK_BYTES * g.world))
    shared_read = 0
    pending: dict = {}   # record name -> [buffer, bytes still to come]; a record may span chunks
    checker = reader.checker(files)
    for i in range(len(gplan.chunks)):
        shared_read += _chunk(reader, planner, files, g, gplan, i, names, by_record, pending, checker)
    stats["bytes_read"] += shared_read
    stats["shared_bytes_read"] = shared_read
    stats["shared_bytes"] = sum(k[2] for k in shared)
    stats["verified_bytes"] = stats.get("verified_bytes", 0) + (checker.bytes if checker is not None else 0)
    return stats


def _key(reader: Any, req: Any) -> tuple:
    info = reader.storage_data[req.storage_index]
    return (info.relative_path, info.offset, info.length)


def _entry_name(k: tuple) -> str:
    return "%s@%d" % (k[0], k[1])


def _chunk(reader: Any, planner: Any, files: Files, g: _Group, gplan: Any, i: int, names: dict,
           by_record: dict, pending: dict, checker: Any = None) -> int:
    """One chunk: this rank's pieces read, an agreement, the broadcasts, then the copies out of
    each record the chunk completed."""
    chunk = gplan.chunks[i]
    for p in chunk.pieces:
        if p.name not in pending:
            length = names[p.name][2]
            pending[p.name] = [torch.empty(length, dtype=torch.uint8, device=g.device), length]
    bufs = {name: pending[name][0] for name in {p.name for p in chunk.pieces}}
    mine = [p for p in chunk.pieces if p.reader == g.rank and p.nbytes]
    err = None
    try:
        read_pieces(files, [(chunk.file, p.offset, _piece(bufs[p.name], p)) for p in mine])
    except Exception as e:  # reported to every rank by the agreement
        err = e
    g.agree("chunk %d of %d (%s)" % (i, len(gplan.chunks), chunk.file), err, chunk.file)
    works = [g.dist.broadcast(_piece(bufs[chunk.pieces[b.piece].name], chunk.pieces[b.piece]),
                              src=g.global_rank(b.root), group=g.group, async_op=True)
             for b in chunk.broadcasts if chunk.pieces[b.piece].nbytes]
    for w in works:
        g.wait(w, "broadcast of chunk %d" % i)
    for p in chunk.pieces:
        pending[p.name][1] -= p.nbytes
    done = [name for name in bufs if pending[name][1] == 0]
    if checker is not None:
        for name in done:
            _check_record(reader, checker, names[name], bufs[name], by_record.get(names[name], []))
        checker.run()
    for name, buf in bufs.items():
        if pending[name][1] == 0:
            for req in by_record.get(names[name], []):
                _deliver(reader, planner, req, names[name], buf)
            del pending[name]
    return sum(p.nbytes for p in mine)


def _piece(buf: torch.Tensor, p: Any) -> torch.Tensor:
    return buf if p.dim < 0 else buf[p.start:p.stop]


def _layout(reader: Any, key: tuple, buf: torch.Tensor, name: str) -> Any:
    length = key[2]
    head = buf[:HEAD_BYTES].cpu().numpy().tobytes()
    def tail() -> bytes:  # read only where the head's layout is not known yet
        return buf[length - HEAD_BYTES:].cpu().numpy().tobytes() if length > HEAD_BYTES else b""
    return reader.layouts.layout(head, tail, length, reader._source_path(key[0]), name)


def _check_record(reader: Any, checker: Any, key: tuple, buf: torch.Tensor, reqs: list) -> None:
    """Queues the check of a tensor record's storage, whole in ``buf``."""
    if not reqs or reqs[0].type == LoadItemType.BYTE_IO:
        return
    name = item_name(reqs[0])
    layout = _layout(reader, key, buf, name)
    checker.whole(reader._source_path(key[0]), key[1] + layout.data_offset, layout.storage_bytes, name,
                  buf[layout.data_offset:layout.data_offset + layout.storage_bytes])


def _deliver(reader: Any, planner: Any, req: Any, key: tuple, buf: torch.Tensor) -> None:
    """One item copied from its record's bytes in memory into its destination."""
    path = reader._source_path(key[0])
    if req.type == LoadItemType.BYTE_IO:
        planner.load_bytes(req, io.BytesIO(buf.cpu().numpy().tobytes()))
        return
    layout = _layout(reader, key, buf, item_name(req))
    src = tensor_of(buf, layout)
    part = narrow_tensor_by_index(src, req.storage_offsets, req.lengths)
    target = resolve_tensor(planner, req).detach()
    if target.size() != part.size():
        raise checkpoint_error(path, item_name(req), "the checkpoint holds a %s chunk where the state "
                               "dict wants %s" % (list(part.size()), list(target.size())))
    target.copy_(part)
    planner.commit_tensor(req, target)
