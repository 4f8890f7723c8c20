"""ferry.load_many into GPU memory, batched.

The files are read as for host memory (_ferry.read_whole_files: whole files by the library's
threads into blocks of a few MiB, headers parsed there), but the blocks are pinned memory from
the target library, and as soon as a block is complete it is copied to the GPU with one
asynchronous copy; the arrays handed out are views of that device block, with the shape, dtype
and offset the header gave, made as each block's copy is queued (the block's files come with
it), so that making them overlaps the reads of later blocks as the copies do. A call makes one
device allocation and one copy per block, not per file. Arrays that are not
C-ordered and native-endian (a Fortran-ordered or big-endian .npy) are made so on the GPU, all
of them in one call (_ferry.native_c_on_device), as ferry.load would for each.

Pinned blocks are reused within a call: each one goes back to a ring with an event recorded
after its copy, and a later block takes the oldest one whose copy is done (_PinnedRing). A call
of 14 GB of small files so pins what is in flight at once, not 14 GB.

What goes through ferry.load file by file: element types the target library lacks, arrays not
aligned to their items in the block, and libraries other than CuPy and PyTorch.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable

import numpy as np

from ._convert import optional_module

__all__ = ["device_loader"]


def _device_index(dev: str) -> int:
    return int(dev.split(":", 1)[1]) if ":" in dev else 0


class _PinnedRing:
    """Pinned blocks reused within one call. ``take(n)`` gives n bytes of pinned memory (a view of
    a block of whole steps of 4 MiB, at least n); ``give_back(raw)`` returns a block taken
    before, once its asynchronous copy is queued, with an event recorded after the copy. The
    copies run in order on one stream, so the blocks come back done in the order they were
    given back: ``take`` looks only at the oldest. A block stays out of use until its copy is
    done; one too small for a request is let go (its library's pinned pool keeps it)."""

    step = 4 << 20

    def __init__(self, alloc: Callable[[int], np.ndarray], record: Callable[[], Any],
                 done: Callable[[Any], bool]):
        self.alloc, self.record, self.done = alloc, record, done
        self.lock = threading.Lock()
        self.free: collections.deque = collections.deque()  # (block, event), oldest first
        self.made = 0
        self.reused = 0

    def take(self, n: int) -> np.ndarray:
        with self.lock:
            while self.free and self.done(self.free[0][1]):
                block, _ = self.free.popleft()
                if block.nbytes >= n:
                    self.reused += 1
                    return block[:n]
            self.made += 1
        return self.alloc(-(-max(n, 1) // self.step) * self.step)[:n]

    def give_back(self, raw: np.ndarray) -> None:
        block = raw.base if isinstance(raw.base, np.ndarray) else raw
        event = self.record()
        with self.lock:
            self.free.append((block, event))

    def clear(self) -> None:
        with self.lock:
            self.free.clear()


class _Cupy:
    """Pinned blocks, device blocks and views through CuPy (its memory pools)."""

    def __init__(self, cupy: Any, index: int):
        self.cp, self.index = cupy, index
        self.streams: list[Any] = []
        self.ring = _PinnedRing(self._alloc, self._record, lambda e: e.done)

    def _alloc(self, n: int) -> np.ndarray:
        # The array keeps the pinned memory alive: it stays in use while a copy may read it.
        return np.frombuffer(self.cp.cuda.alloc_pinned_memory(n), np.uint8, n)

    def _record(self) -> Any:
        with self.cp.cuda.Device(self.index):
            event = self.cp.cuda.Event(block=False, disable_timing=True)
            event.record(self.stream())
        return event

    def stream(self) -> Any:
        # One stream for the call's copies: they are queued one block at a time (under the GIL,
        # from the library's reading threads) and run while later blocks are read.
        if not self.streams:
            with self.cp.cuda.Device(self.index):
                self.streams.append(self.cp.cuda.Stream(non_blocking=True))
        return self.streams[0]

    def upload(self, raw: np.ndarray) -> Any:
        with self.cp.cuda.Device(self.index):
            mem = self.cp.cuda.alloc(raw.nbytes)
            mem.copy_from_host_async(raw.ctypes.data, raw.nbytes, self.stream())
        return mem

    def supports(self, dt: np.dtype) -> bool:
        return dt.kind in "biufc" and dt.fields is None

    def view(self, mem: Any, offset: int, shape: tuple, dt: np.dtype) -> Any:
        if 0 in shape:
            with self.cp.cuda.Device(self.index):
                return self.cp.empty(shape, dt)
        return self.cp.ndarray(shape, dt, memptr=mem + offset)  # on mem's device

    def as_bytes(self, mem: Any, n: int) -> Any:
        return self.cp.ndarray((n,), self.cp.uint8, memptr=mem)

    def finish(self) -> None:
        for s in self.streams:
            s.synchronize()
        self.ring.clear()


class _Torch:
    """Pinned blocks, device blocks and views through PyTorch (its caching allocators)."""

    def __init__(self, torch: Any, index: int):
        self.torch, self.device = torch, torch.device("cuda", index)
        self.streams: list[Any] = []
        self.dtypes: dict = {}
        self.ring = _PinnedRing(self._alloc, self._record, lambda e: e.query())

    def _alloc(self, n: int) -> np.ndarray:
        # The array keeps the pinned host tensor alive (numpy's base), as for CuPy.
        return self.torch.empty(n, dtype=self.torch.uint8, pin_memory=True).numpy()

    def _record(self) -> Any:
        event = self.torch.cuda.Event()
        event.record(self.stream())
        return event

    def stream(self) -> Any:
        if not self.streams:  # one stream for the call's copies, as for CuPy
            self.streams.append(self.torch.cuda.Stream(device=self.device))
        return self.streams[0]

    def upload(self, raw: np.ndarray) -> Any:
        host = self.torch.from_numpy(raw)
        with self.torch.cuda.stream(self.stream()):
            d = self.torch.empty(raw.nbytes, dtype=self.torch.uint8, device=self.device)
            d.copy_(host, non_blocking=True)
        return d

    def dtype(self, dt: np.dtype) -> Any:
        t = self.dtypes.get(dt, False)
        if t is False:
            try:
                t = self.torch.from_numpy(np.empty(0, dt)).dtype
            except TypeError:
                t = None
            self.dtypes[dt] = t
        return t

    def supports(self, dt: np.dtype) -> bool:
        return self.dtype(dt) is not None

    def view(self, d: Any, offset: int, shape: tuple, dt: np.dtype) -> Any:
        n = dt.itemsize
        for s in shape:
            n *= s
        return d[offset:offset + n].view(self.dtype(dt)).view(shape)

    def as_bytes(self, d: Any, n: int) -> Any:
        return d

    def finish(self) -> None:
        for s in self.streams:
            s.synchronize()
        self.ring.clear()


last_call: dict = {}


class _Loader:
    """Reads files whole into pinned blocks (_ferry.read_whole_files), copies each block to the
    GPU as soon as it is complete, and hands out views of the device blocks; arrays the views
    cannot express as they lie (big-endian, Fortran order) are made native and C-ordered on the
    device in one batch (_ferry.native_c_on_device)."""

    def __init__(self, backend: Any, lib: str | None, dev: str):
        self.backend, self.lib, self.dev = backend, lib, dev

    def read(self, names: list, raw_dtype: Any, shape: Any, workers: int, stop_at_failure: bool):
        from . import _ferry
        from ._convert import library_converter, numpy_dtype

        backend = self.backend
        ring = backend.ring
        made, reused = ring.made, ring.reused
        host: list = []  # pinned blocks in block order, until their copy is queued
        sizes: list = []  # each block's bytes
        device: dict = {}
        dtypes: dict = {}
        results: list = [None] * len(names)
        unplaced: list = []  # files left for ferry.load: a dtype the library lacks, misaligned
        fix: list = []  # (file, name, item): arrays made native and C-ordered on the device
        blocks: dict = {}
        view_seconds = [0.0]

        def allocate(n: int) -> np.ndarray:
            raw = ring.take(n)
            host.append(raw)
            sizes.append(n)
            return raw

        def place(i: int, b: int, arrays: list, is_dict: bool) -> None:
            mem = device[b]
            out = {}
            mine = []
            for name, dname, order, fortran, dims, offset, nbytes in arrays:
                dt = dtypes.get(dname)
                if dt is None:
                    dt = dtypes[dname] = numpy_dtype(dname, "<")
                if dt is None or offset % dt.itemsize or not backend.supports(dt):
                    unplaced.append(i)
                    return
                if order == ">" or fortran:
                    out[name] = None
                    mine.append((i, name, (blocks.setdefault(b, len(blocks)), dname, order, fortran, dims, offset)))
                else:
                    out[name] = backend.view(mem, offset, dims, dt)
            fix.extend(mine)
            results[i] = out if is_dict else out[""]

        def on_block(b: int, placed: list) -> None:
            # The copy first, then the views of its files, made while other threads read on.
            raw, host[b] = host[b], None
            device[b] = backend.upload(raw)
            ring.give_back(raw)
            v0 = time.perf_counter()
            for i, p in placed:
                if p is not None:
                    place(i, b, p[1], p[2])
            view_seconds[0] += time.perf_counter() - v0

        t0 = time.perf_counter()
        try:
            _, later = _ferry.read_whole_files(names, raw_dtype, shape, workers, stop_at_failure,
                                               allocate=allocate, on_block=on_block)
            t1 = time.perf_counter()
        finally:
            backend.finish()
        t2 = time.perf_counter()
        # A file whose block failed after some of its views were made (its copy, a view) is
        # in `later` with its error: nothing of it is handed out.
        gone = set(later)
        for i in gone:
            results[i] = None
        fix = [f for f in fix if f[0] not in gone]
        if fix:
            order_of = sorted(blocks, key=blocks.get)
            fixed = _ferry.native_c_on_device([backend.as_bytes(device[b], sizes[b]) for b in order_of],
                                              [item for _, _, item in fix])
            convert = library_converter(self.lib or "cupy", self.dev)
            for (i, name, _), a in zip(fix, fixed):
                if isinstance(results[i], dict):
                    results[i][name] = convert(a)
                else:
                    results[i] = convert(a)
        for i in unplaced:
            results[i] = None
        # Where the last call's time went, for bench/probes/files_probe.py.
        last_call.update(read=t1 - t0, views_while_reading=view_seconds[0], copies_waited=t2 - t1,
                         fixed_after=time.perf_counter() - t2, blocks=len(sizes), fixed=len(fix),
                         pinned_blocks=ring.made - made, reused_blocks=ring.reused - reused)
        return results, sorted(gone | set(unplaced))


def device_loader(dev: str, lib: str | None) -> Any:
    """A _Loader for ferry.load_many into GPU memory ``dev`` as ``lib``'s arrays (None: CuPy,
    as ferry.load returns GPU arrays), or None where only the file-by-file path serves (no
    CuPy or PyTorch, another library)."""
    if lib in (None, "cupy"):
        cupy = optional_module("cupy")
        backend: Any = _Cupy(cupy, _device_index(dev)) if cupy is not None else None
    elif lib == "torch":
        torch = optional_module("torch")
        backend = _Torch(torch, _device_index(dev)) if torch is not None else None
    else:
        backend = None
    return None if backend is None else _Loader(backend, lib, dev)
