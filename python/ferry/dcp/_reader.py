"""ferry.dcp.FileSystemReader: torch.distributed.checkpoint's FileSystemReader whose reads go
through ferry.

``read_data`` resolves the plan in two passes over all files at once: first the edges of every
tensor record the plan needs (its head and tail, a few KiB; a small record whole) and every
byte record, in one batch; then each item's bytes straight into its destination tensor, GPU or
host (ferry.dcp._reads). With a process group and ``dedup`` (the default), records that several
ranks need are read once across the group and broadcast (ferry.dcp._group). Where ferry's
writer recorded checksums (ferry.dcp._checksums), the bytes read are checked against them.
"""

from __future__ import annotations

import io
import os
import time
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint import filesystem as _fs
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner
from torch.futures import Future

from .. import _ferry
from .._checkpoint import _collector_paused  # a load's per-item objects hold no cycle
from ._checksums import Checker, check_mode, integrity_error, read_manifest
from ._record import HEAD_BYTES, TAIL_BYTES, LayoutCache, checkpoint_error, tensor_of
from ._reads import DEFAULT_MEMORY_BUDGET, Files, ItemReader, Prefetch, Source, check_ranges, item_name


class _Record:
    """One record of a .distcp file: its first bytes, or all of it when it is small. ``head``
    is set by ``FileSystemReader.records``: a view of one buffer for a whole load. The last
    bytes (``tail``) are read only where the record's layout is not known from another record
    with the same first bytes: most records of a checkpoint share a few layouts."""

    def __init__(self, path: str, offset: int, length: int, whole: bool = False) -> None:
        self.path, self.offset, self.length = path, offset, length
        self.whole = whole or length <= HEAD_BYTES + TAIL_BYTES
        self.head_bytes = length if self.whole else HEAD_BYTES
        self.tail_bytes = 0 if self.whole else TAIL_BYTES
        self.head = np.empty(0, np.uint8)
        self.tail_read = 0

    def tail(self, files: Files) -> Any:
        """A function that reads the record's last bytes (b"" for a record read whole)."""
        def read() -> bytes:
            if not self.tail_bytes:
                return b""
            buf = np.empty(self.tail_bytes, np.uint8)
            _ferry.read_batch([(files.get(self.path), self.offset + self.length - self.tail_bytes, buf)]).result()
            self.tail_read += buf.size
            return buf.tobytes()
        return read


class FileSystemReader(_fs.FileSystemReader):
    """A drop-in for ``torch.distributed.checkpoint.FileSystemReader``: ``dcp.load(state_dict,
    storage_reader=ferry.dcp.FileSystemReader(path))``. Reads land in the tensors DCP resolves
    (GPU or host) with at most ``memory_budget`` bytes (default 1 GiB) of staging buffers for
    the parts that cannot (reshards along an inner dimension, dtype conversions).

    With torch.distributed initialized, ``group`` (default: the default group) and ``dedup``
    (default True): bytes that several ranks need are read once by the group and shared over
    its backend (gloo: host memory, NCCL: GPU memory); ``dedup=False`` has every rank read what
    it needs itself. Thread safety: one load at a time per reader.

    ``verify``: ``"auto"`` (default) checks the bytes read against the CRC-32C checksums
    ferry's writer recorded (``.ferry-checksums.json``) where there are some, ``"always"``
    refuses a checkpoint without them, ``"never"`` does not check. A mismatch raises
    ``ferry.IntegrityError`` naming the file, the tensor, the byte range and both checksums,
    before the items of the failed round are committed (tensors of earlier rounds, loaded in
    place, may hold their new values).

    ``prefetch``: where the records' bytes are read ahead, from the moment DCP hands the reader
    the checkpoint's metadata, so that they are read while DCP plans the load. None (default):
    read once the plan is made. ``"auto"``: into the current GPU when this process has
    initialized CUDA and reads alone (no group of several ranks); or a device (``"cuda:1"``,
    ``"cpu"``). Items whose destination is on that device are then copied from what was read
    ahead. What is read ahead counts against ``memory_budget``: at most three quarters of it,
    the rest left for staging; bytes beyond it are read as without prefetch. Off by default:
    the reads ahead share the CPU's cores with DCP's planning, which then takes longer, and on
    an H100 machine the loads measured were not faster with it (docs/benchmarks.md)."""

    def __init__(self, path: str | os.PathLike, _extension_registry: Any = None, *,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET, dedup: bool = True,
                 group: Any = None, timeout: float = 300.0, verify: str = "auto",
                 prefetch: Any = None) -> None:
        super().__init__(path, _extension_registry)
        self.verify = check_mode(verify)
        self.checksums: dict | None = None
        self.unverified_reason = ""
        self.checksum_error: Exception | None = None
        self.memory_budget = int(memory_budget)
        self.dedup = dedup
        self.group = group
        self.timeout = float(timeout)
        if prefetch not in (None, False, "auto"):
            prefetch = torch.device(prefetch)
        self.prefetch = prefetch
        self.ahead: Prefetch | None = None
        self.stats: dict = {}

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)
        self._read_ahead()
        self._set_up_at = time.perf_counter()

    def _prefetch_device(self) -> torch.device | None:
        if self.prefetch in (None, False):
            return None
        import torch.distributed as dist

        if getattr(self, "use_collectives", True) and dist.is_available() and dist.is_initialized() \
                and dist.get_world_size(self.group) > 1:
            return None  # each rank reads its part, or the group reads once and shares it
        if self.prefetch == "auto":
            if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
                return None
            return torch.device("cuda", torch.cuda.current_device())
        return self.prefetch

    def _read_ahead(self) -> None:
        """Starts reading the spans of the files that records lie in (see ``prefetch``)."""
        if self.ahead is not None:
            self.ahead.close()
            self.ahead = None
        device = self._prefetch_device()
        budget = self.memory_budget - self.memory_budget // 4
        if device is None or budget <= 0 or not self.storage_data:
            return
        by_file: dict = {}
        for info in self.storage_data.values():
            if getattr(info, "transform_descriptors", None):
                return  # read_data refuses these
            by_file.setdefault(self._source_path(info.relative_path), []).append((info.offset, info.offset + info.length))
        spans: dict = {}
        for path in sorted(by_file):
            merged: list = []
            for start, end in sorted(by_file[path]):
                if merged and start <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([start, end])
            spans[path] = merged
        self.ahead = Prefetch(spans, device, budget)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        if not os.path.exists(path):
            folder = os.fspath(self.path)
            left = sorted(f for f in os.listdir(folder) if f.endswith((".distcp", ".tmp"))) \
                if os.path.isdir(folder) else []
            reason = ("no %s: the save that wrote %s did not finish" % (os.path.basename(path),
                      ", ".join(left[:4]) + (" ..." if len(left) > 4 else "")) if left else
                      "no %s: not a DCP checkpoint" % os.path.basename(path))
            raise checkpoint_error(folder, None, reason)
        metadata = super().read_metadata(*args, **kwargs)
        # Errors wait for read_data: DCP takes one raised here for a missing file and looks for
        # another .metadata instead.
        self.checksums, self.unverified_reason, self.checksum_error = None, "verify='never'", None
        if self.verify != "never":
            try:
                self.checksums, self.unverified_reason = read_manifest(os.path.dirname(path),
                                                                       os.path.basename(path))
            except Exception as e:
                self.checksum_error = e
            if self.checksums is None and self.checksum_error is None and self.verify == "always":
                self.checksum_error = integrity_error(os.fspath(self.path), "", "verify='always' and no "
                                                      "checksums: " + self.unverified_reason)
        return metadata

    def checker(self, files: Files) -> Checker | None:
        """The checker of a load's bytes, or None when nothing is checked."""
        if getattr(self, "checksum_error", None) is not None:
            raise self.checksum_error
        return Checker(self.checksums, files) if getattr(self, "checksums", None) is not None else None

    def _source_path(self, relative: str) -> str:
        return os.path.join(os.fspath(self.path), relative)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        from . import _group

        began = time.perf_counter()
        planned = began - getattr(self, "_set_up_at", began)  # DCP's planning, while reads ran ahead
        files = Files()
        self.layouts = LayoutCache()
        try:
            if any(getattr(self.storage_data[r.storage_index], "transform_descriptors", None)
                   for r in plan.items):
                raise checkpoint_error(os.fspath(self.path), None, "stream extensions "
                                       "(transform_descriptors) are not supported by ferry's reader")
            shared = _group.group_for(self) if self.dedup else None
            with _collector_paused():
                if shared is not None:
                    self.stats = _group.read_shared(self, plan, planner, files, shared)
                else:
                    self.stats = self._read_local(plan.items, planner, files)
        finally:
            files.close()
            if self.ahead is not None:
                self.stats["prefetch_wait_seconds"] = self.ahead.waited
                self.ahead.close()
                self.ahead = None
        self.stats["planning_seconds"] = planned
        self.stats["read_data_seconds"] = time.perf_counter() - began
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def records(self, items: list, files: Files) -> dict:
        """The record of each item's storage index, its first bytes read (one batch, all files,
        into one host buffer, handed over as NumPy views)."""
        recs: dict = {}
        ranges = []
        for req in items:
            info = self.storage_data[req.storage_index]
            key = (info.relative_path, info.offset)
            if key not in recs:
                path = self._source_path(info.relative_path)
                recs[key] = _Record(path, info.offset, info.length,
                                    whole=req.type == LoadItemType.BYTE_IO)
                ranges.append((path, info.offset, info.length, item_name(req)))
        check_ranges(ranges)
        buf = np.empty(sum(r.head_bytes for r in recs.values()), np.uint8)
        pieces, at = [], 0
        for r in recs.values():
            r.head = buf[at:at + r.head_bytes]
            at += r.head_bytes
            if r.head_bytes:
                pieces.append((files.get(r.path), r.offset, r.head))
        if pieces:
            _ferry.read_batch(pieces).result()
        return recs

    def _read_local(self, items: list, planner: LoadPlanner, files: Files) -> dict:
        recs = self.records(items, files)
        ahead = self.ahead
        budget = self.memory_budget - (ahead.nbytes if ahead is not None else 0)
        reader = ItemReader(planner, files, budget, self.checker(files), ahead)
        try:
            if reader.checker is not None:
                self._check_small(items, recs, reader.checker)
            for req in items:
                info = self.storage_data[req.storage_index]
                rec = recs[(info.relative_path, info.offset)]
                self.resolve(req, rec, reader)
            reader.flush()
        finally:
            reader.close()
        ahead_bytes = ahead.nbytes if ahead is not None and not ahead.failed else 0
        return {"bytes_read": reader.bytes_read - reader.prefetched + ahead_bytes
                + sum(r.head.size + r.tail_read for r in recs.values()),
                "record_tails_read": sum(r.tail_read > 0 for r in recs.values()),
                "prefetched_bytes": ahead_bytes, "copied_from_prefetch": reader.prefetched,
                "verified_bytes": reader.checker.bytes if reader.checker is not None else 0}

    def _check_small(self, items: list, recs: dict, checker: Checker) -> None:
        """Checks the tensors of the records read whole (small ones) in one go, before any
        item is resolved from them."""
        seen = set()
        for req in items:
            info = self.storage_data[req.storage_index]
            key = (info.relative_path, info.offset)
            rec = recs[key]
            if req.type == LoadItemType.BYTE_IO or not rec.whole or key in seen:
                continue
            seen.add(key)
            name = item_name(req)
            layout = self.layouts.layout(rec.head.tobytes(), b"", rec.length, rec.path, name)
            data = torch.from_numpy(rec.head)[layout.data_offset:layout.data_offset + layout.storage_bytes]
            checker.whole(rec.path, rec.offset + layout.data_offset, layout.storage_bytes, name, data)
        checker.run()

    def resolve(self, req: Any, rec: _Record, reader: ItemReader) -> None:
        """Hands one item to the reader: byte records and small records from what was read,
        the rest as byte ranges of the file."""
        name = item_name(req)
        if req.type == LoadItemType.BYTE_IO:
            self.planner_load_bytes(reader.planner, req, rec.head.tobytes())
            return
        head = rec.head.tobytes()
        layout = self.layouts.layout(head, rec.tail(reader.files), rec.length, rec.path, name)
        src = Source(rec.path, rec.offset + layout.data_offset, layout.tensor, name)
        if rec.whole:
            reader.add_loaded(req, tensor_of(torch.from_numpy(rec.head), layout), src)
        else:
            reader.add(req, src)

    @staticmethod
    def planner_load_bytes(planner: LoadPlanner, req: Any, data: bytes) -> None:
        planner.load_bytes(req, io.BytesIO(data))
