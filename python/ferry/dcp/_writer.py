"""ferry.dcp.FileSystemWriter: torch.distributed.checkpoint's FileSystemWriter whose bytes move
through ferry's engine.

Planning, metadata and the files stay DCP's own (the same ``__<rank>_<n>.distcp`` files, the same
records, the same ``.metadata``): only ``write_data`` changes. Each file is laid out first (the
byte records, then each tensor's torch.save record around its storage), then written in one go:
the small records from host memory, each tensor's storage straight from its own memory, GPU
or host, by ferry's parallel writes (no pageable copy of a GPU tensor). A file is written as
``<name>.tmp``, synced when ``sync_files`` (the default) and renamed into place; the folder's
old ``.metadata`` is removed before any data file is written and the new one is written last,
so a folder whose save did not finish has no ``.metadata`` and is refused by every reader.
While the writes run, the CRC-32C of every 64 MiB chunk of every tensor is computed where the
tensor is and recorded after ``.metadata`` in ``.ferry-checksums.json`` (ferry.dcp._checksums),
which ferry's reader checks.
"""

from __future__ import annotations

import os
import queue
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint import filesystem as _fs
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from .. import _ferry
from ._checksums import CHUNK, CheckedStorageInfo, hex_of, manifest_name, strip_and_collect, write_manifest
from ._reads import exported, plain_tensor
from ._record import Skeleton, skeleton

_METADATA = ".metadata"


def _bytes_view(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of a contiguous tensor's bytes (any dtype, 0-d included)."""
    return t.reshape(-1).view(torch.uint8)


class _FileLayout:
    """The pieces of one .distcp file in file order: (offset, host bytes or tensor)."""

    def __init__(self) -> None:
        self.pieces: list = []
        self.size = 0
        self.results: list = []
        self.tensors: list = []   # (result index, storage begin, bytes, tensor's bytes)

    def add_bytes(self, data: bytes | memoryview) -> int:
        at = self.size
        if len(data):
            self.pieces.append((at, np.frombuffer(data, dtype=np.uint8)))
        self.size += len(data)
        return at

    def add_tensor(self, t: torch.Tensor, sk: Skeleton) -> int:
        at = self.add_bytes(sk.head)
        if sk.nbytes:
            self.pieces.append((self.size, _bytes_view(t)))
            self.tensors.append((len(self.results), self.size, sk.nbytes, self.pieces[-1][1]))
            self.size += sk.nbytes
            self.add_bytes(sk.tail)
        return at


def resolve_data(planner: SavePlanner, item: Any) -> torch.Tensor:
    """The tensor a write item writes: ``planner.resolve_data(item)``, taken here for torch's own
    planner (not a subclass, which may resolve otherwise) and a plain tensor (plain_tensor in
    ferry.dcp._reads, as the reader finds its destinations): the tensor itself."""
    if type(planner) is DefaultSavePlanner:
        obj = plain_tensor(planner.state_dict, item.index)
        if obj is not None:
            return obj
    return planner.resolve_data(item)


def _cuda_devices(obj: Any) -> set:
    """The CUDA devices of the tensors in a (nested) state dict."""
    found: set = set()
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor):
            if o.is_cuda:
                found.add(o.device)
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
    return found


def remove_commit_file(folder: str, name: str, *, sync: bool) -> None:
    """Removes a checkpoint's commit file (``.metadata``, the index) before a save writes any
    data file, so a save that does not finish leaves a folder no reader takes for complete."""
    old = os.path.join(folder, name)
    if os.path.exists(old):
        os.remove(old)
        if sync:
            _fsync_dir(folder)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileSystemWriter(_fs.FileSystemWriter):
    """A drop-in for ``torch.distributed.checkpoint.FileSystemWriter`` (the same arguments)
    whose writes go through ferry: ``dcp.save(state_dict,
    storage_writer=ferry.dcp.FileSystemWriter(path))``.

    ``sync_files`` (default True): each file is synced before it is renamed into place and the
    folder after, so a finished save survives a power loss. ``thread_count`` keeps torch's
    meaning of files per rank (ferry's writes are parallel within a file either way);
    ``per_thread_copy_ahead`` is accepted and unused (nothing is copied to host memory first).
    Only ``SerializationFormat.TORCH_SAVE`` (DCP's default) and no stream extensions are
    supported. For ``dcp.async_save`` the state dict is staged in pinned host memory when CUDA
    is available (see :meth:`stage`). ``checksums`` (default True): the CRC-32C of every 64 MiB
    chunk of every tensor is recorded in ``.ferry-checksums.json`` (ferry.dcp._checksums)."""

    def __init__(self, path: str | os.PathLike, single_file_per_rank: bool = True,
                 sync_files: bool = True, thread_count: int = 1,
                 per_thread_copy_ahead: int = 10_000_000, cache_staged_state_dict: bool = False,
                 overwrite: bool = True, _extensions: Any = None,
                 serialization_format: Any = _fs.SerializationFormat.TORCH_SAVE, *,
                 checksums: bool = True) -> None:
        if _extensions:
            raise ValueError("ferry.dcp.FileSystemWriter: stream extensions are not supported")
        if serialization_format != _fs.SerializationFormat.TORCH_SAVE:
            raise ValueError("ferry.dcp.FileSystemWriter writes DCP's torch_save format; for "
                             "safetensors use ferry.dcp.HuggingFaceStorageWriter")
        super().__init__(path, single_file_per_rank=single_file_per_rank, sync_files=sync_files,
                         thread_count=thread_count, per_thread_copy_ahead=per_thread_copy_ahead,
                         cache_staged_state_dict=cache_staged_state_dict, overwrite=overwrite)
        self.checksums = bool(checksums)

    # Durability: the old .metadata goes before any data file of this save is written (the
    # global plan is made on the coordinator before any rank writes), and comes back last.
    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        plans = super().prepare_global_plan(plans)
        remove_commit_file(os.fspath(self.path), _METADATA, sync=self.sync_files)
        remove_commit_file(os.fspath(self.path), manifest_name(_METADATA), sync=False)
        return plans

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        plan = super().prepare_local_plan(plan)
        if not self.use_collectives and self.rank is not None:  # each rank commits its own
            name = "__%d%s" % (self.rank, _METADATA)
            remove_commit_file(os.fspath(self.path), name, sync=self.sync_files)
            remove_commit_file(os.fspath(self.path), manifest_name(name), sync=False)
        return plan

    def finish(self, metadata: Any, results: list) -> None:
        """torch's ``.metadata`` (plain storage records), then the checksum manifest."""
        plain, files = strip_and_collect(results)
        super().finish(metadata, plain)
        if self.checksums:
            name = ("__%d%s" % (self.rank, _METADATA) if not self.use_collectives and self.rank is not None
                    else _METADATA)
            write_manifest(os.fspath(self.path), name, files, self.sync_files)
            if self.sync_files:
                _fsync_dir(os.fspath(self.path))

    def stage(self, state_dict: Any) -> Any:
        """A copy of ``state_dict`` in host memory for ``dcp.async_save``: pinned when CUDA is
        available, so the copy out of GPU memory runs at the DMA rate and ferry writes it with
        no further copy. With ``cache_staged_state_dict`` the copy is made once and reused by
        later saves (pageable without CUDA, where torch's writer fails to pin it)."""
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        self.per_thread_copy_ahead = 0
        pin = torch.cuda.is_available()
        if not self.cache_staged_state_dict:
            staged = _create_cpu_state_dict(state_dict, pin_memory=pin)
        else:
            if self.state_dict_cache is None:
                self.state_dict_cache = _create_cpu_state_dict(state_dict, pin_memory=pin)
            staged = self.state_dict_cache
        # Into pinned memory every copy is queued at once and waited for once: a wait per
        # tensor cost more than the copies of a state of 1,000 small tensors.
        out = _copy_state_dict(state_dict, staged, non_blocking=pin, type_check=self.type_check)
        if pin:
            for d in _cuda_devices(state_dict):
                torch.cuda.synchronize(d)
        return out

    def _write_data(self, planner: SavePlanner, file_queue: queue.Queue) -> Future:
        jobs = []
        while True:
            try:
                jobs.append(file_queue.get_nowait())
            except queue.Empty:
                break
        results: list = []
        files = []
        for path, storage_key, items in jobs:
            layout = self._layout(planner, storage_key, items)
            files.append((os.fspath(path), layout))
        if files:
            self._write_files(files)  # records the checksums in the layouts' results
            if self.sync_files:
                _fsync_dir(os.fspath(self.path))
        for _, layout in files:
            results += layout.results
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def _layout(self, planner: SavePlanner, storage_key: str, items: list) -> _FileLayout:
        """Byte records first, then tensors (torch's order within a file)."""
        layout = _FileLayout()
        skeletons: dict = {}
        for item in (i for i in items if i.type == WriteItemType.BYTE_IO):
            data = planner.resolve_data(item)
            at = layout.add_bytes(data.getbuffer())
            layout.results.append(self._result(item, storage_key, at, layout.size - at))
        for item in (i for i in items if i.type != WriteItemType.BYTE_IO):
            t = resolve_data(planner, item).detach()
            if not t.is_contiguous():
                t = t.contiguous()
            key = (tuple(t.shape), t.dtype)
            sk = skeletons.get(key)
            if sk is None:
                sk = skeletons[key] = skeleton(*key)
            at = layout.add_tensor(t, sk)
            layout.results.append(self._result(item, storage_key, at, sk.length))
        return layout

    @staticmethod
    def _result(item: Any, storage_key: str, offset: int, length: int) -> WriteResult:
        return WriteResult(index=item.index, size_in_bytes=length,
                           storage_data=_fs._StorageInfo(storage_key, offset, length))

    def _record_checksums(self, layout: _FileLayout) -> None:
        """Each tensor's chunk CRCs into its write result's storage info."""
        views = [t[3] for t in layout.tensors]
        if not self.checksums or not views:
            return
        crcs = _ferry.crc32c_chunks(exported(views), CHUNK)
        for (i, begin, nbytes, _), c in zip(layout.tensors, crcs):
            wr = layout.results[i]
            sd = wr.storage_data
            name = wr.index.fqn if not wr.index.offset or not any(wr.index.offset) else \
                "%s@%s" % (wr.index.fqn, list(wr.index.offset))
            layout.results[i] = type(wr)(index=wr.index, size_in_bytes=wr.size_in_bytes,
                                         storage_data=CheckedStorageInfo(
                                             sd.relative_path, sd.offset, sd.length, sd.transform_descriptors,
                                             storage=(begin, nbytes, name, hex_of(c))))

    def _write_files(self, files: list) -> None:
        """Writes each (path, layout) as path.tmp, the writes of every file in flight at once
        (a rank's files, ``thread_count`` of them, fill the page cache side by side where one
        file's writes take its inode's lock in turn), syncs them side by side when
        ``sync_files``, and renames each into place. Nothing of a failed write stays behind."""
        opened: list = []   # (path, ferry.File of path.tmp)
        renamed: list = []
        try:
            for path, _ in files:
                opened.append((path, _ferry.File(path + ".tmp", "w")))
            # exported waits for each GPU's queued work once: the tensors' producers are done.
            bufs = iter(exported([buf for _, layout in files for _, buf in layout.pieces]))
            futures = [f.pwrite(next(bufs), at) for (_, f), (_, layout) in zip(opened, files)
                       for at, _ in layout.pieces]
            errors = []
            try:  # hashed while the writes run
                for _, layout in files:
                    self._record_checksums(layout)
            except BaseException as e:
                errors.append(e)
            for fut in futures:  # every write ends before a file closes, failed or not
                try:
                    fut.result()
                except BaseException as e:
                    errors.append(e)
            if errors:
                raise errors[0]
            if self.sync_files:
                if len(opened) == 1:
                    opened[0][1].sync()
                else:
                    with ThreadPoolExecutor(min(len(opened), 16), thread_name_prefix="ferry-dcp-sync") as pool:
                        list(pool.map(lambda pf: pf[1].sync(), opened))
            for path, f in opened:
                f.close()
            for path, _ in opened:
                os.replace(path + ".tmp", path)
                renamed.append(path)
        except BaseException:
            for path, f in opened:
                try:
                    f.close()  # waits for its writes in flight
                except Exception:
                    pass
                for leftover in (path + ".tmp",) + ((path,) if path in renamed else ()):
                    if os.path.exists(leftover):
                        os.remove(leftover)
            raise
