"""The read side shared by ferry.dcp's readers: DCP read items resolved to byte ranges of files,
read by ferry straight into the tensors DCP resolves.

A read item's source is a tensor stored in a file at ``base`` (the first byte of its storage)
with a layout (dtype, shape, strides, storage offset; a tensor on the meta device). The part the
item asks for (``storage_offsets`` and ``lengths``) is one byte range when it is contiguous in
the file; when the destination is contiguous too and of the same dtype, the range is read
straight into it. Anything else (a reshard along an inner dimension, a dtype the planner
converts, a destination that is a strided view) is read into a staging buffer on the
destination's device and copied from there. Staging buffers of one round stay under the
memory budget; the reads of a round go to ferry as one batch per device. With a ``checker``
(ferry.dcp._checksums.Checker), each round's bytes are checked against their recorded checksums
before its items are committed.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, NamedTuple

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.utils.dlpack import to_dlpack

from .. import _ferry
from ._record import checkpoint_error

DEFAULT_MEMORY_BUDGET = 1 << 30


class Source(NamedTuple):
    path: str           # absolute path of the file
    base: int           # file offset of the storage's first byte
    layout: torch.Tensor  # meta tensor: dtype, shape, strides, storage offset
    name: str           # the tensor's name, for errors


def item_name(req: Any) -> str:
    """The tensor a read item is part of, for errors: its name, and the chunk's offsets when it
    is one chunk of a sharded tensor."""
    idx = req.storage_index
    return idx.fqn if not idx.offset or not any(idx.offset) else "%s@%s" % (idx.fqn, list(idx.offset))


def bytes_view(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


class _Staged(NamedTuple):
    req: Any
    target: torch.Tensor
    buf: torch.Tensor
    view: torch.Tensor   # the part asked for, relative to buf's first element


class Files:
    """ferry Files opened once per load, closed at its end."""

    def __init__(self) -> None:
        self.open: dict = {}

    def get(self, path: str) -> Any:
        f = self.open.get(path)
        if f is None:
            f = self.open[path] = _ferry.File(path, "r")
        return f

    def close(self) -> None:
        for f in self.open.values():
            f.close()
        self.open = {}


class Prefetch:
    """The bytes of a checkpoint's records read ahead, while DCP plans the load, into one buffer
    on ``device``: the spans of each file that records lie in (``spans``: path -> [(start,
    end)], merged), in order, until ``budget`` bytes. The reads run on ferry's threads from
    the start; ``take`` hands out a part of the buffer once they are done, None for bytes not
    read ahead (or when the read ahead failed: those bytes are then read as without it, and
    any error is that read's)."""

    def __init__(self, spans: dict, device: torch.device, budget: int) -> None:
        self.device, self.files = device, Files()
        self.at: dict = {}  # path -> [(start, end, offset in buf)]
        self.nbytes, self.failed, self.future, self.thread = 0, False, None, None
        plan = []
        for path, ranges in spans.items():
            for start, end in ranges:
                n = min(end - start, budget - self.nbytes)
                if n <= 0:
                    break
                self.at.setdefault(path, []).append((start, start + n, self.nbytes))
                plan.append((path, start, self.nbytes, n))
                self.nbytes += n
        self.waited = 0.0  # seconds the load waited for the reads ahead
        try:
            self.buf = torch.empty(self.nbytes, dtype=torch.uint8, device=device)
            pieces = [(self.files.get(p), start, self.buf[o:o + n]) for p, start, o, n in plan]
        except Exception:
            # No memory for it, or a file missing: nothing is read ahead, and the load's own
            # reads say what is wrong.
            self.files.close()
            self.buf, self.at, self.nbytes, self.failed = torch.empty(0, dtype=torch.uint8), {}, 0, True
            return
        # Submitted from a thread of its own: a batch's submission may wait for room in the
        # engine's queues, and DCP's planning should not wait with it.
        self.thread = threading.Thread(target=self._submit, args=(pieces,), name="ferry-dcp-prefetch", daemon=True)
        self.thread.start()

    def _submit(self, pieces: list) -> None:
        try:
            self.future = _ferry.read_batch(pieces)
        except Exception:  # a file gone or unreadable: the load's own reads say so
            self.failed = True

    def ready(self) -> bool:
        """Waits for the reads ahead; False where they failed."""
        if self.thread is not None:
            t0 = time.perf_counter()
            self.thread.join()
            self.thread = None
            if self.future is not None:
                future, self.future = self.future, None
                try:
                    future.result()
                except Exception:
                    self.failed = True
            self.waited += time.perf_counter() - t0
        return not self.failed

    def take(self, path: str, offset: int, n: int) -> torch.Tensor | None:
        for start, end, o in self.at.get(path, ()):
            if start <= offset and offset + n <= end:
                return self.buf[o + offset - start:o + offset - start + n]
        return None

    def close(self) -> None:
        """Waits for reads in flight, then lets the buffer and the files go."""
        self.ready()
        self.files.close()
        self.buf, self.at = torch.empty(0, dtype=torch.uint8), {}


def exported(bufs: list) -> list:
    """Tensors as ferry takes them at least cost, in order: host uint8 tensors as NumPy arrays
    (the buffer protocol), other tensors as DLPack capsules from torch's C exporter, GPU ones
    once each of their devices has finished its queued work. Through torch's ``__dlpack__``
    instead, a GPU tensor builds stream and event objects to order ferry's access after its
    producer's, each time, as the reader did for every item and every checksum; one wait per
    device then capsules is what ``ferry.load_checkpoint(into=...)`` does for the same reason.
    Anything else (a tensor that needs grad, another library's array) is left as it is."""
    for d in sorted({b.get_device() for b in bufs if isinstance(b, torch.Tensor) and b.is_cuda}):
        torch.cuda.synchronize(d)
    out = []
    for b in bufs:
        if isinstance(b, torch.Tensor) and not b.requires_grad:
            if not b.is_cuda and b.dtype == torch.uint8:
                b = b.numpy()
            else:
                b = to_dlpack(b)
        out.append(b)
    return out


class Pending:
    """Reads submitted and not yet waited for: ferry futures and the copies due from a read
    ahead."""

    def __init__(self) -> None:
        self.futures: list = []
        self.copies: list = []  # ((path, offset, buf), part of the read ahead)

    def wait(self, files: Files, prefetch: Prefetch | None) -> int:
        """Waits for every read and does the copies; raises the first read's error, after all
        have ended. Returns the bytes copied from ``prefetch``."""
        copies, self.copies = self.copies, []
        copied = 0
        error = None
        try:
            if copies:
                if prefetch.ready():
                    torch._foreach_copy_([bytes_view(buf) for (_, _, buf), _ in copies], [part for _, part in copies])
                    if prefetch.device.type == "cuda":
                        torch.cuda.current_stream(prefetch.device).synchronize()
                    copied = sum(part.numel() for _, part in copies)
                else:  # the read ahead failed: these bytes are read as without it
                    submit_pieces(files, [piece for piece, _ in copies], None, self)
        except Exception as e:
            error = e
        futures, self.futures = self.futures, []
        for fut in futures:
            try:
                fut.result()
            except Exception as e:
                error = error or e
        if error is not None:
            raise error
        return copied


def _read_batch(group: list) -> Any:
    bufs = exported([buf for _, _, buf in group])
    return _ferry.read_batch([(f, offset, buf) for (f, offset, _), buf in zip(group, bufs)])


def submit_pieces(files: Files, pieces: list, prefetch: Prefetch | None, pending: Pending) -> None:
    """Submits (path, offset, buffer) pieces to ferry, one batch per kind of memory (host, each
    GPU); the pieces ``prefetch`` holds, on its device, are left to ``pending.wait`` to copy
    from it."""
    by_device: dict = {}
    ahead = prefetch is not None and prefetch.nbytes > 0 and not prefetch.failed
    for path, offset, buf in pieces:
        if buf.numel():
            device = buf.device
            if ahead and device == prefetch.device:
                part = prefetch.take(path, offset, buf.numel() * buf.element_size())
                if part is not None:
                    pending.copies.append(((path, offset, buf), part))
                    continue
            by_device.setdefault(str(device), []).append((files.get(path), offset, buf))
    for group in by_device.values():
        pending.futures.append(_read_batch(group))


def read_pieces(files: Files, pieces: list, prefetch: Prefetch | None = None) -> int:
    """Reads (path, offset, buffer) pieces, one batch per kind of memory (host, each GPU); the
    pieces ``prefetch`` holds, on its device, are copied from it (one batched copy). Returns
    the bytes copied from ``prefetch``."""
    pending = Pending()
    submit_pieces(files, pieces, prefetch, pending)
    return pending.wait(files, prefetch)


def plain_tensor(state_dict: dict, index: Any) -> torch.Tensor | None:
    """The state dict's tensor at ``index`` (a MetadataIndex) when it is a plain tensor (no
    subclass such as DTensor, no attributes of its own, such as a checkpointable shard's) asked
    for from its origin: what torch's default planners resolve the index to, found without their
    lookup, which tests each tensor against runtime-checkable Protocols (a third of a
    2,048-tensor load's time under Python 3.11 on the CPU machine, about 45 µs an item of a
    save). None otherwise: the planner resolves it."""
    obj = state_dict.get(index.fqn)
    if type(obj) is torch.Tensor and not obj.__dict__ and (index.offset is None or not any(index.offset)):
        return obj
    return None


def resolve_tensor(planner: Any, req: Any) -> torch.Tensor:
    """The tensor a read item lands in: ``planner.resolve_tensor(req)``, made here for torch's
    own planner (not a subclass, which may resolve otherwise) and a plain tensor (plain_tensor):
    the tensor narrowed to the item."""
    if type(planner) is DefaultLoadPlanner:
        obj = plain_tensor(planner.state_dict, req.dest_index)
        if obj is not None:
            return narrow_tensor_by_index(obj, req.dest_offsets, req.lengths)
    return planner.resolve_tensor(req)


def whole_target(planner: Any, req: Any, layout: torch.Tensor) -> torch.Tensor | None:
    """The destination of a read item when the item is its whole stored tensor, contiguous, and
    lands in a plain contiguous tensor (plain_tensor) of the same dtype and shape, through
    torch's own planner: ``resolve_tensor`` would return that tensor itself. None otherwise."""
    if type(planner) is not DefaultLoadPlanner or any(req.storage_offsets) or any(req.dest_offsets):
        return None
    obj = plain_tensor(planner.state_dict, req.dest_index)
    if (obj is not None and not obj.requires_grad and obj.dtype == layout.dtype
            and obj.size() == req.lengths == layout.size() and obj.is_contiguous() and layout.is_contiguous()):
        return obj
    return None


def check_ranges(ranges: list) -> None:
    """Each (path, offset, length, name) lies inside its file: a truncated or missing file is
    named, with the tensor, before any byte is read."""
    sizes: dict = {}
    for path, offset, length, name in ranges:
        if path not in sizes:
            try:
                sizes[path] = os.stat(path).st_size
            except FileNotFoundError:
                raise checkpoint_error(path, name, "the file is missing") from None
        if offset + length > sizes[path]:
            raise checkpoint_error(path, name, "needs bytes [%d, %d) but the file has %d bytes: "
                                   "it is truncated" % (offset, offset + length, sizes[path]))


class ItemReader:
    """Reads a plan's tensor items in rounds under ``budget`` bytes of staging memory; the
    round's end (``flush``) reads what was added, checks the bytes, copies the staged parts and
    commits every item. The reads of a round go to ferry at its end, all at once: handing them
    over in batches while the rest of the plan was resolved made loads slower on an H100 (4 GiB:
    383 ms against 296 ms; docs/benchmarks.md). ``close`` waits for reads still in flight
    (after an error)."""

    def __init__(self, planner: Any, files: Files, budget: int, checker: Any = None,
                 prefetch: Prefetch | None = None) -> None:
        self.planner, self.files, self.budget = planner, files, max(1, int(budget))
        self.checker, self.prefetch = checker, prefetch
        self.prefetched = 0
        self.pending = Pending()
        self.direct: list = []     # (path, offset, buf), not yet submitted
        self.commits: list = []    # (req, target) whose bytes land directly
        self.staged: list = []
        self.staged_bytes = 0
        self.bytes_read = 0

    def add(self, req: Any, src: Source) -> None:
        target = whole_target(self.planner, req, src.layout)
        if target is not None:  # the common case, without the views below
            layout = src.layout
            nbytes = target.numel() * target.element_size()
            first = layout.storage_offset() * target.element_size()
            if nbytes:
                self.direct.append((src.path, src.base + first, bytes_view(target)))
                self.bytes_read += nbytes
                self._check(src, first, nbytes, self.direct[-1][2])
            self.commits.append((req, target))
            return
        view = narrow_tensor_by_index(src.layout, req.storage_offsets, req.lengths)
        target = resolve_tensor(self.planner, req).detach()
        if target.size() != view.size():
            raise checkpoint_error(src.path, src.name, "the checkpoint holds a %s chunk where the "
                                   "state dict wants %s" % (list(view.size()), list(target.size())))
        item = view.element_size()
        if view.numel() == 0:
            self.commits.append((req, target))
        elif view.is_contiguous() and target.is_contiguous() and target.dtype == view.dtype:
            self.direct.append((src.path, src.base + view.storage_offset() * item, bytes_view(target)))
            self.commits.append((req, target))
            self.bytes_read += view.numel() * item
            self._check(src, view.storage_offset() * item, view.numel() * item, self.direct[-1][2])
        else:
            first = view.storage_offset()
            last = first + sum((n - 1) * s for n, s in zip(view.size(), view.stride()))
            span = (last - first + 1) * item
            if self.staged and self.staged_bytes + span > self.budget:
                self.flush()
            buf = torch.empty(span, dtype=torch.uint8, device=target.device)
            rel = buf.view(view.dtype).as_strided(view.size(), view.stride(), 0)
            self.direct.append((src.path, src.base + first * item, buf))
            self.staged.append(_Staged(req, target, buf, rel))
            self.staged_bytes += span
            self.bytes_read += span
            self._check(src, first * item, span, buf)

    def _check(self, src: Source, first: int, nbytes: int, buf: torch.Tensor) -> None:
        """Queues the check of bytes [first, first + nbytes) of the source's storage, read into
        ``buf``: on ``buf`` itself when they are the whole storage, else by their chunks."""
        if self.checker is None:
            return
        length = src.layout.untyped_storage().nbytes()
        if first == 0 and nbytes == length:
            self.checker.whole(src.path, src.base, length, src.name, buf)
        else:
            self.checker.part(src.path, src.base, length, src.name, first, first + nbytes)

    def add_loaded(self, req: Any, tensor: torch.Tensor, src: Source) -> None:
        """An item whose whole record was read already (small records): copied from host."""
        target = resolve_tensor(self.planner, req).detach()
        part = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
        if target.size() != part.size():
            raise checkpoint_error(src.path, src.name, "the checkpoint holds a %s chunk where the "
                                   "state dict wants %s" % (list(part.size()), list(target.size())))
        target.copy_(part)
        self.planner.commit_tensor(req, target)

    def flush(self) -> None:
        """Reads what was added, checks it, copies the staged parts and commits every item."""
        submit_pieces(self.files, self.direct, self.prefetch, self.pending)
        self.prefetched += self.pending.wait(self.files, self.prefetch)
        if self.checker is not None:
            self.checker.run()
        for s in self.staged:
            s.target.copy_(s.view)
            self.planner.commit_tensor(s.req, s.target)
        for req, target in self.commits:
            self.planner.commit_tensor(req, target)
        self.direct, self.commits, self.staged, self.staged_bytes = [], [], [], 0

    def close(self) -> None:
        """Waits for the reads in flight (their errors are the load's only when it flushed)."""
        self.pending.copies = []
        try:
            self.pending.wait(self.files, None)
        except Exception:
            pass
