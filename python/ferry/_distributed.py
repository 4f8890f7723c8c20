"""Distributed checkpoint loads over a torch.distributed process group: each rank reads only
its tensor-parallel slices and its share of the replicated tensors, and broadcasts complete the
replicated tensors on every rank. See docs/design/distributed.md.

The steps of one load, on every rank of the group:

1. open the checkpoint headers and compute the group plan (ferry._group_plan over libferry's
   plan_group, a pure function: every rank gets the same plan); an agreement step (one
   all_reduce) checks that every rank opened it and planned the same thing; with a layout of
   several nodes, the plan's subgroups (one per node, one per local index) become process
   groups;
2. a reader thread reads chunk i+1 of the replicated bytes (this rank's pieces only, through
   load_checkpoint's dim slices into the final tensors) while the main thread runs chunk i's
   agreement and broadcasts (overlap); the sliced tensors are read last, behind the last
   broadcasts;
3. before each chunk's broadcasts, an all_reduce of every rank's status: if one rank failed to
   read, every rank raises GroupLoadError naming that rank and the file instead of waiting in a
   broadcast that will never come. A collective that does not finish in ``timeout`` raises
   GroupTimeoutError. A chunk's broadcasts run in the plan's stages: across nodes first (from
   each reader to the ranks of its local index on the other nodes), then within each node.

NCCL moves GPU tensors, gloo host tensors: whichever backend the group has.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from . import _checkpoint as _ck
from . import _ferry
from ._errors import Error, UsageError
from ._convert import dtype_text
from ._group_plan import DEFAULT_CHUNK_BYTES, Layout, TensorEntry, plan_group


class GroupLoadError(Error, RuntimeError):
    """A distributed load failed on some rank; raised on every rank of the group.

    ``rank`` is the failing rank (None when unknown), ``file`` the file it was reading,
    ``reason`` what it raised, ``failed_ranks`` every rank that reported a failure, ``step``
    the step ("open", "chunk 3", "slices")."""

    def __init__(self, message: str, *, rank: int | None = None, file: str | None = None,
                 reason: str = "", failed_ranks: tuple = (), step: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.file = file
        self.reason = reason
        self.failed_ranks = tuple(failed_ranks)
        self.step = step


class GroupTimeoutError(GroupLoadError, TimeoutError):
    """A collective of a distributed load did not complete within the timeout (a rank stalled
    or died)."""


def _torch():
    import torch
    import torch.distributed as dist

    return torch, dist


def _torch_dtype(torch: Any, name: str):
    dt = getattr(torch, name, None)
    if dt is None or not isinstance(dt, torch.dtype):
        raise UsageError("dtype %s has no torch equivalent" % name)
    return dt


def _rule_for(name: str, rules: Mapping) -> Any:
    """The slice rule the loader applies to ``name``: by exact name, else the first glob."""
    if name in rules:
        return rules[name]
    import fnmatch
    return next(r for p, r in rules.items() if fnmatch.fnmatchcase(name, p))


def _slice_shape(shape: tuple, rule: Any) -> tuple:
    """The shape of ``rule`` (ferry.split(...) or (dim, start, stop)) applied to ``shape``."""
    if isinstance(rule, _ck.Split):
        dim, parts, part = rule
        dim = dim % len(shape)
        n = shape[dim]
        size = (part + 1) * n // parts - part * n // parts
    else:
        dim, start, stop = rule
        dim = dim % len(shape)
        size = stop - start
    return shape[:dim] + (size,) + shape[dim + 1:]


def _entries(info: dict) -> list:
    paths = [s["path"] for s in info["shards"]]
    return [TensorEntry(t["name"], t["dtype"], tuple(t["shape"]), paths[t["shard"]], t["offset"],
                        t["bytes"]) for t in info["tensors"]]


def _digest(plan: Any, entries: list, loaded: list, as_type: Any) -> int:
    h = hashlib.blake2b(digest_size=7)
    for t in sorted(entries, key=lambda t: t.name):
        h.update(repr((t.name, t.dtype, t.shape, t.file.rsplit("/", 1)[-1], t.offset,
                       t.nbytes)).encode())
    h.update(repr((plan.sliced, plan.read_bytes, plan.subgroups, loaded, as_type)).encode())
    return int.from_bytes(h.digest(), "little")


def _chosen(srcs: list, info: dict, tensors: Any) -> set | None:
    if tensors is None:
        return None
    kind, patterns = _ck._selection(srcs, tensors)
    names = [t["name"] for t in info["tensors"]]
    if kind == "names":
        return set(patterns)
    if kind == "glob":
        import fnmatch
        return {n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)}
    if kind == "regex":
        import re
        return {n for n in names if any(re.search(p, n) for p in patterns)}
    return None


class _Group:
    """The collectives of one load on one process group, each bounded by ``timeout``."""

    def __init__(self, torch: Any, dist: Any, group: Any, device: Any, timeout: float) -> None:
        self.torch, self.dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group)).lower()
        self.device = device
        self.timeout = timeout
        self.collective_seconds = 0.0
        self.subs: list = [group]       # process group of each plan subgroup (None: not in it)
        self.made: list = []            # the ones made here, destroyed after the load

    def make_subgroups(self, subgroups: tuple) -> None:
        """Process groups for the plan's subgroups (0 is the load's own group). Every rank makes
        them in the plan's order: with the default group every rank calls new_group for each;
        with another group, each rank only for its own (one node, one local index), which
        torch's local synchronization allows because each rank is in one subgroup of each
        kind."""
        dist = self.dist
        world_group = self.group is None or self.group == dist.group.WORLD
        for ranks in subgroups[1:]:
            mine = self.rank in ranks
            ranks_g = [self.global_rank(r) for r in ranks]
            if world_group:
                pg = dist.new_group(ranks_g, timeout=timedelta(seconds=self.timeout))
            elif mine:
                pg = dist.new_group(ranks_g, timeout=timedelta(seconds=self.timeout),
                                    use_local_synchronization=True)
            else:
                pg = None
            if mine:
                self.made.append(pg)
                self.subs.append(pg)
            else:
                self.subs.append(None)

    def destroy_subgroups(self) -> None:
        for pg in self.made:
            try:
                self.dist.destroy_process_group(pg)
            except Exception:  # a group broken by a failed load: nothing left to free
                pass
        self.made = []

    def global_rank(self, r: int) -> int:
        return self.dist.get_global_rank(self.group, r) if self.group is not None else r

    def wait(self, work: Any, step: str) -> None:
        t0 = time.perf_counter()
        try:
            ok = work.wait(timedelta(seconds=self.timeout))
        except Exception as e:  # gloo and NCCL report timeouts and dead peers as RuntimeError
            raise self._collective_error(e, step) from e
        finally:
            self.collective_seconds += time.perf_counter() - t0
        if ok is False:
            raise GroupTimeoutError(
                "distributed load: %s did not complete within %.1f s on rank %d" %
                (step, self.timeout, self.rank), step=step)

    def _collective_error(self, e: BaseException, step: str) -> GroupLoadError:
        text = str(e)
        if "timed out" in text.lower() or "timeout" in text.lower():
            return GroupTimeoutError(
                "distributed load: %s timed out after %.1f s on rank %d (a rank stalled or "
                "died): %s" % (step, self.timeout, self.rank, text.splitlines()[0] if text else ""),
                reason=text, step=step)
        return GroupLoadError("distributed load: %s failed on rank %d: %s" %
                              (step, self.rank, text.splitlines()[0] if text else type(e).__name__),
                              reason=text, step=step)

    def agree(self, step: str, error: BaseException | None, file: str | None,
              digest: int = 0) -> None:
        """Every rank's status (and plan digest): raises the same GroupLoadError on every rank
        when one failed, before any rank enters the step's data collectives."""
        torch = self.torch
        v = torch.zeros(2 * self.world, dtype=torch.int64, device=self.device)
        v[self.rank] = 1 if error is not None else 0
        v[self.world + self.rank] = digest
        self.wait(self.dist.all_reduce(v, group=self.group, async_op=True), step + " (agreement)")
        status = v.tolist()
        failed = tuple(r for r in range(self.world) if status[r])
        if failed:
            src = failed[0]
            payload = [None]
            if self.rank == src:
                fname = getattr(error, "filename", None) or file
                payload = [(fname, "%s: %s" % (type(error).__name__, error))]
            try:
                self.dist.broadcast_object_list(payload, src=self.global_rank(src),
                                                group=self.group)
            except Exception as e:
                raise self._collective_error(e, step + " (error report)") from e
            fname, reason = payload[0]
            err = GroupLoadError(
                "distributed load: rank %d failed at %s%s: %s%s" %
                (src, step, (" reading %s" % fname) if fname else "", reason,
                 ("; ranks %s failed" % list(failed)) if len(failed) > 1 else ""),
                rank=src, file=fname, reason=reason, failed_ranks=failed, step=step)
            if error is not None and self.rank == src:
                raise err from error
            raise err
        digests = status[self.world:]
        if digest and any(d != digests[0] for d in digests):
            odd = [r for r in range(self.world) if digests[r] != digests[0]]
            raise GroupLoadError(
                "distributed load: ranks %s see a different checkpoint or plan than rank 0 "
                "(headers, files or tensor-parallel rules differ)" % odd,
                rank=odd[0], failed_ranks=tuple(odd), step=step)


def load_group(src: Any, *, group: Any = None, tp: Any = None, device: Any = None,
               tensors: Any = None, into: Any = None, strict: bool = True,
               layout: Layout | None = None, chunk_bytes: int | None = None,
               timeout: float = 300.0, route: str = "auto", progress: Any = None,
               dtype: Any = None, replicated: str = "group"):
    """Loads a checkpoint on every rank of ``group`` (a torch.distributed process group; None
    means the default group), reading each replicated byte once across the group.

    ``tp`` holds the tensor-parallel rules of this rank (``ferry.tensor_parallel(rank, world,
    column=..., row=...)``, or any ``slices=`` mapping): the tensors it matches are *sliced*,
    each rank reading only its own slice; every other selected tensor is *replicated*. Returns
    what :func:`ferry.load_checkpoint` returns, with torch tensors on ``device`` (default: the
    current CUDA device for an NCCL group, host memory for gloo), and ``stats`` per rank:
    ``bytes_read`` (file bytes this rank read), ``replicated_bytes_read``,
    ``sliced_bytes_read``, ``bytes_received`` and ``bytes_sent`` (by broadcast), ``seconds``,
    ``read_seconds``, ``collective_seconds``, ``chunks``, ``plan_read_bytes`` (replicated bytes
    per rank as planned).

    ``layout`` (ferry.Layout) says which node each rank is on and which node's storage holds
    which file: replicated chunks of a file are then read by that node's ranks, and broadcasts
    go across nodes once per node (per-node subgroups). ``replicated`` is "group" (each
    replicated byte read once by the whole group) or "node" (once by each node of the layout,
    broadcast within the node only). ``dtype`` converts floating-point tensors as in a
    single-process load.
    ``chunk_bytes`` (default 64 MiB per rank of the group) is the unit of read/broadcast
    overlap. ``timeout``
    bounds each collective; ``progress(done, total)`` is called after each chunk.
    """
    torch, dist = _torch()
    if not dist.is_available() or not dist.is_initialized():
        raise UsageError("load_checkpoint(group=...): torch.distributed is not initialized")
    t_start = time.perf_counter()
    backend = str(dist.get_backend(group)).lower()
    if device is None:
        device = ("cuda:%d" % torch.cuda.current_device()) if backend == "nccl" else "cpu"
    dev = torch.device(device)
    if backend == "nccl" and dev.type != "cuda":
        raise UsageError("an NCCL group moves GPU tensors: use device='cuda:N' (gloo for host)")
    if backend == "gloo" and dev.type == "cuda":
        raise UsageError("a gloo group moves host tensors here: use an NCCL group for the GPU")
    if replicated not in ("group", "node"):
        raise UsageError("replicated= is 'group' or 'node', not %r" % (replicated,))
    load = _GroupLoad(torch, dist, _Group(torch, dist, group, dev, float(timeout)), backend,
                      _ck._sources(src), dict(tp or {}), into, strict, route,
                      None if dtype is None else dtype_text(dtype)[0])
    load.open(tensors, layout, chunk_bytes, replicated)
    load.run(progress)
    stats = load.stats
    stats["collective_seconds"] = load.g.collective_seconds
    stats["seconds"] = time.perf_counter() - t_start
    if into is not None:
        return _ck.LoadResult(load.missing, load.unexpected, stats)
    result = _ck.CheckpointTensors(sorted({**load.out, **load.sliced_result}.items()))
    result.stats = stats
    return result


class _GroupLoad:
    """One group load on this rank, in its steps: open (headers, plan, destinations, then one
    agreement that every rank is ready with the same plan), then run (each chunk read one chunk
    ahead of its broadcasts, an agreement before each chunk's broadcasts, the slices last)."""

    def __init__(self, torch: Any, dist: Any, g: _Group, backend: str, srcs: list, rules: dict,
                 into: Any, strict: bool, route: str, as_type: Any):
        self.torch, self.dist, self.g, self.backend = torch, dist, g, backend
        self.dev = g.device
        self.srcs, self.rules, self.into, self.strict, self.route = srcs, rules, into, strict, route
        self.as_type = as_type
        self.rank, self.world = g.rank, g.world
        self.plan, self.opened, self.nodes = None, None, None
        self.by_name: dict = {}
        self.targets: dict = {}
        self.missing: list = []
        self.unexpected: list = []
        self.out: dict = {}
        self.sliced_result: dict = {}
        self.stop = threading.Event()

    def out_dtype(self, e: Any) -> str:
        return e.dtype if self.as_type is None else _ferry.converted_dtype(e.dtype, self.as_type)

    # 1. open + plan + destinations, then one agreement: every rank ready, same plan
    def destinations(self) -> None:
        """The caller's tensors (into=) or fresh ones of the full shape, checked."""
        torch, plan, into = self.torch, self.plan, self.into
        if into is not None:
            self.targets = _ck._targets(into)
            names = set(plan.sliced) | set(plan.replicated)
            self.missing = sorted(k for k in self.targets if k not in names)
            self.unexpected = sorted(n for n in names if n not in self.targets)
            if self.strict and (self.missing or self.unexpected):
                raise UsageError("load_checkpoint(into=...): missing key(s) %s; unexpected key(s) "
                                 "%s" % (self.missing[:20], self.unexpected[:20]))
        for name in plan.replicated:
            e = self.by_name[name]
            want = _torch_dtype(torch, self.out_dtype(e))
            if into is None:
                self.out[name] = torch.empty(e.shape, dtype=want, device=self.dev)
            elif name in self.targets:
                t = self.out[name] = self.targets[name]
                if (tuple(t.shape) != e.shape or t.dtype != want
                        or not t.is_contiguous() or t.device != self.dev):
                    raise UsageError("into[%r]: needs a contiguous %s tensor of shape %s on %s, "
                                     "got %s %s on %s" % (name, self.out_dtype(e), e.shape, self.dev,
                                                          t.dtype, tuple(t.shape), t.device))

    def open(self, tensors: Any, layout: Layout | None, chunk_bytes: int | None, replicated: str) -> None:
        err, digest = None, 0
        try:
            self.opened = _ferry.OpenCheckpoint(self.srcs)  # headers read once for every chunk's reads
            info = _ck.info_checkpoint(self.srcs)
            chosen = _chosen(self.srcs, info, tensors)
            entries = [e for e in _entries(info) if chosen is None or e.name in chosen]
            self.plan = plan_group(entries, self.world, sliced=self.rules, layout=layout,
                                   chunk_bytes=chunk_bytes or DEFAULT_CHUNK_BYTES * self.world,
                                   replicated=replicated)
            self.by_name = {e.name: e for e in entries}
            self.destinations()
            loaded = sorted(self.out) + sorted(n for n in self.plan.sliced
                                               if self.into is None or n in self.targets)
            digest = _digest(self.plan, entries, loaded, self.as_type) or 1
        except Exception as e:  # reported to every rank by the agreement below
            err = e
        self.g.agree("open", err, self.srcs[0] if len(self.srcs) == 1 else ", ".join(self.srcs), digest)
        self.nodes = list(layout.node_of_rank) if layout is not None else None
        plan = self.plan
        self.stats = {"rank": self.rank, "world": self.world, "backend": self.backend, "bytes_read": 0,
                      "replicated_bytes_read": 0, "sliced_bytes_read": 0, "bytes_received": 0,
                      "bytes_sent": 0, "read_seconds": 0.0, "requests": 0, "chunks": len(plan.chunks),
                      "plan_read_bytes": list(plan.read_bytes),
                      "replicated_bytes": plan.replicated_bytes, "bytes_from_other_nodes": 0,
                      "subgroups": len(plan.subgroups), "collectives": plan.collectives}

    def view(self, p: Any) -> Any:
        t = self.out[p.name]
        return t.narrow(p.dim, p.start, p.stop - p.start) if p.dim >= 0 else t

    def read_chunk(self, i: int) -> int:
        """This rank's pieces of chunk i, straight into their destinations."""
        if self.stop.is_set():
            return 0
        t0 = time.perf_counter()
        mine = [p for p in self.plan.pieces_of(self.rank, i) if p.nbytes and p.name in self.out]
        if not mine:
            return 0
        into_pairs = [(p.name, _ck._destination(p.name, self.view(p))) for p in mine]
        ranges = [(p.name, p.dim, p.start, p.stop) for p in mine
                  if p.dim >= 0 and (p.start, p.stop) != (0, self.by_name[p.name].shape[p.dim])]
        st = self.opened.load(ranges, into_pairs, self.route)
        self.stats["read_seconds"] += time.perf_counter() - t0
        self.stats["requests"] += st["requests"]
        return st["bytes_read"]

    def read_slices(self) -> int:
        """This rank's slices of the sliced tensors, one single-process load."""
        if self.stop.is_set():
            return 0
        torch, by_name = self.torch, self.by_name
        names = [n for n in self.plan.sliced if self.into is None or n in self.targets]
        if not names:
            return 0
        t0 = time.perf_counter()
        if self.into is not None:
            dest = {n: self.targets[n] for n in names}
        else:  # fresh torch tensors of the slice shapes, filled in place
            dest = {n: torch.empty(_slice_shape(by_name[n].shape, _rule_for(n, self.rules)),
                                   dtype=_torch_dtype(torch, self.out_dtype(by_name[n])), device=self.dev)
                    for n in names}
            self.sliced_result.update(dest)
        st = _ck.load_checkpoint(self.srcs, device=str(self.dev), tensors=names, slices=self.rules, into=dest,
                                 route=self.route, dtype=self.as_type).stats
        self.stats["read_seconds"] += time.perf_counter() - t0
        self.stats["requests"] += st["requests"]
        return st["bytes_read"]

    def post(self, chunk: Any, stage: int) -> list:
        """This rank's share of one stage of a chunk's broadcasts, posted asynchronously."""
        works = []
        stats, rank, nodes = self.stats, self.rank, self.nodes
        for b in chunk.broadcasts:
            pg = self.g.subs[b.subgroup]
            p = chunk.pieces[b.piece]
            if b.stage != stage or pg is None or p.name not in self.out:
                continue
            buf = self.view(p).reshape(-1).view(self.torch.uint8)
            works.append(self.dist.broadcast(buf, src=self.g.global_rank(b.root), group=pg, async_op=True))
            if b.root == rank:
                stats["bytes_sent"] += buf.numel()
            else:
                stats["bytes_received"] += buf.numel()
                if nodes is not None and nodes[b.root] != nodes[rank]:
                    stats["bytes_from_other_nodes"] += buf.numel()
        return works

    # 2-3. reads one chunk ahead of the broadcasts, an agreement before each chunk's broadcasts
    def run(self, progress: Any) -> None:
        g, plan, stats = self.g, self.plan, self.stats
        try:
            g.make_subgroups(plan.subgroups)
        except Exception as e:
            g.destroy_subgroups()
            raise g._collective_error(e, "subgroups") from e
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ferry-group-read")
        n = len(plan.chunks)
        futures = [pool.submit(self.read_chunk, 0)] if n else []
        slices_future = None if n else pool.submit(self.read_slices)
        pending: list = []
        done_bytes = 0
        try:
            for i, chunk in enumerate(plan.chunks):
                step = "chunk %d of %d (%s)" % (i, n, chunk.file)
                err = None
                try:
                    got = futures[i].result()
                    stats["bytes_read"] += got
                    stats["replicated_bytes_read"] += got
                except Exception as e:
                    err = e
                if err is None:  # read ahead: the next chunk (or the slices) while this one moves
                    if i + 1 < n:
                        futures.append(pool.submit(self.read_chunk, i + 1))
                    else:
                        slices_future = pool.submit(self.read_slices)
                g.agree(step, err, chunk.file)
                prev = pending
                pending = self.post(chunk, 0)
                if any(b.stage == 1 for b in chunk.broadcasts):
                    for w in pending:  # a relay forwards within its node what stage 0 brought
                        g.wait(w, "broadcast across nodes of chunk %d" % i)
                    pending = self.post(chunk, 1)
                for w in prev:  # at most two chunks' broadcasts in flight
                    g.wait(w, "broadcast of chunk %d" % (i - 1))
                done_bytes += chunk.nbytes
                if progress is not None:
                    progress(done_bytes, plan.replicated_bytes)
            err = None
            try:
                got = slices_future.result() if slices_future is not None else 0
                stats["bytes_read"] += got
                stats["sliced_bytes_read"] += got
            except Exception as e:
                err = e
            g.agree("slices", err, None)
            for w in pending:
                g.wait(w, "broadcast of chunk %d" % (n - 1))
            if self.dev.type == "cuda":
                self.torch.cuda.synchronize(self.dev)
        finally:
            self.stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            g.destroy_subgroups()


def load_group_call(src: Any, *, group: Any, tp: Any, like: Any, slices: Any, dtype: Any,
                    **kw: Any):
    """load_checkpoint(group=...): the arguments a group load does not take are refused here."""
    if group is None:
        raise UsageError("tp=, layout=, replicated=, chunk_bytes= and timeout= are options of a "
                         "group load: "
                         "pass group= (a torch.distributed process group)")
    unknown = set(kw) - {"device", "tensors", "into", "strict", "progress", "route", "layout",
                         "chunk_bytes", "timeout", "replicated"}
    if unknown:
        raise UsageError("load_checkpoint(group=...): unknown option(s) %s" % sorted(unknown))
    if slices:
        raise UsageError("load_checkpoint(group=...): give the slices as tp= (this rank's rules)")
    if like not in (None, "torch") and getattr(like, "__module__", "").split(".")[0] != "torch":
        raise UsageError("load_checkpoint(group=...) returns torch tensors: like= must be torch")
    return load_group(src, group=group, tp=tp, dtype=dtype, **kw)


__all__ = ["GroupLoadError", "GroupTimeoutError", "Layout", "load_group"]
