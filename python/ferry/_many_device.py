"""ferry.load_many into GPU memory, batched.

The files are read as for host memory (_ferry.read_whole_files: whole files by the library's
threads into blocks of a few MiB, headers parsed there), but the blocks are pinned memory from
the target library, and as soon as a block is complete it is copied to the GPU with one
asynchronous copy; the arrays handed out are views of that device block, with the shape, dtype
and offset the header gave. Reads of later blocks overlap the copies of earlier ones, and a
call makes one device allocation and one copy per block, not per file. Arrays that are not
C-ordered and native-endian (a Fortran-ordered or big-endian .npy) are made so on the GPU, all
of them in one call (_ferry.native_c_on_device), as ferry.load would for each.

What goes through ferry.load file by file: element types the target library lacks, arrays not
aligned to their items in the block, and libraries other than CuPy and PyTorch.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ._convert import optional_module

__all__ = ["device_loader"]


def _device_index(dev: str) -> int:
    return int(dev.split(":", 1)[1]) if ":" in dev else 0


class _Cupy:
    """Pinned blocks, device blocks and views through CuPy (its memory pools)."""

    def __init__(self, cupy: Any, index: int):
        self.cp, self.index = cupy, index
        self.streams: list[Any] = []
        self.lock = threading.Lock()
        self.blocks: list[Any] = []  # pinned blocks, alive until the copies from them are done

    def pinned(self, n: int) -> np.ndarray:
        mem = self.cp.cuda.alloc_pinned_memory(n)
        with self.lock:
            self.blocks.append(mem)
        return np.frombuffer(mem, np.uint8, n)

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
        with self.cp.cuda.Device(self.index):
            if 0 in shape:
                return self.cp.empty(shape, dt)
            return self.cp.ndarray(shape, dt, memptr=mem + offset)

    def as_bytes(self, mem: Any, n: int) -> Any:
        return self.cp.ndarray((n,), self.cp.uint8, memptr=mem)

    def finish(self) -> None:
        for s in self.streams:
            s.synchronize()
        self.blocks.clear()


class _Torch:
    """Pinned blocks, device blocks and views through PyTorch (its caching allocators)."""

    def __init__(self, torch: Any, index: int):
        self.torch, self.device = torch, torch.device("cuda", index)
        self.streams: list[Any] = []
        self.lock = threading.Lock()
        self.blocks: list[Any] = []  # pinned host tensors, alive until the copies are done
        self.dtypes: dict = {}

    def pinned(self, n: int) -> np.ndarray:
        t = self.torch.empty(n, dtype=self.torch.uint8, pin_memory=True)
        with self.lock:
            self.blocks.append(t)
        return t.numpy()

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
        self.blocks.clear()


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
        host: list = []  # pinned blocks in block order
        device: dict = {}

        def allocate(n: int) -> np.ndarray:
            raw = backend.pinned(n)
            host.append(raw)
            return raw

        def on_block(b: int, _files: list) -> None:
            device[b] = backend.upload(host[b])

        t0 = time.perf_counter()
        try:
            places, later = _ferry.read_whole_files(names, raw_dtype, shape, workers, stop_at_failure,
                                                    allocate=allocate, on_block=on_block)
            t1 = time.perf_counter()
        finally:
            backend.finish()
        t2 = time.perf_counter()
        dtypes: dict = {}
        results: list = [None] * len(places)
        fix: list = []  # (file, name, item): arrays made native and C-ordered on the device
        blocks: dict = {}
        later = list(later)
        for i, place in enumerate(places):
            if place is None:
                continue
            b, arrays, is_dict = place
            mem = device.get(b)
            out = {}
            ok = mem is not None
            for name, dname, order, fortran, dims, offset, nbytes in arrays if ok else ():
                dt = dtypes.get(dname)
                if dt is None:
                    dt = dtypes[dname] = numpy_dtype(dname, "<")
                if dt is None or offset % dt.itemsize or not backend.supports(dt):
                    ok = False
                    break
                if order == ">" or fortran:
                    out[name] = None
                    fix.append((i, name, (blocks.setdefault(b, len(blocks)), dname, order, fortran, dims, offset)))
                else:
                    out[name] = backend.view(mem, offset, dims, dt)
            if not ok:
                later.append(i)
                continue
            results[i] = out if is_dict else out[""]
        if fix:
            order_of = sorted(blocks, key=blocks.get)
            fixed = _ferry.native_c_on_device([backend.as_bytes(device[b], host[b].nbytes) for b in order_of],
                                              [item for _, _, item in fix])
            convert = library_converter(self.lib or "cupy", self.dev)
            for (i, name, _), a in zip(fix, fixed):
                if isinstance(results[i], dict):
                    results[i][name] = convert(a)
                else:
                    results[i] = convert(a)
        # Where the last call's time went, for bench/probes/files_probe.py.
        last_call.update(read=t1 - t0, copies_waited=t2 - t1, views=time.perf_counter() - t2,
                         blocks=len(host), fixed=len(fix))
        return results, sorted(later)


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
