"""ferry.load_many into GPU memory, batched.

The library does the work (_ferry.read_whole_files_to_device, ferry::read_whole_files_to_device):
its threads read the files whole into pinned blocks of a few MiB, parse the headers there, copy
each block to its place in device memory as soon as it is complete and make its big-endian and
Fortran-ordered arrays native and C-ordered there, as ferry.load gives them on the GPU. The
device memory comes from the target library's pool in arenas of 64 MiB, on the library's current
stream, where the copies run too. Meanwhile this thread makes each file's arrays into the
library's arrays of their places (CuPy: ndarrays over a MemoryPointer; PyTorch: DLPack
capsules), block by block, as the copies are queued;
the call returns once the stream is done.

What goes through ferry.load file by file: element types the target library lacks, arrays not
aligned to their items in the block, and libraries other than CuPy and PyTorch.
"""

from __future__ import annotations

import time
from typing import Any

from ._convert import numpy_dtype, optional_module, torch_view_dtype

__all__ = ["device_loader"]


def _device_index(dev: str) -> int:
    return int(dev.split(":", 1)[1]) if ":" in dev else 0


class _Cupy:
    """Device memory, the stream and arrays from capsules through CuPy (its memory pool)."""

    def __init__(self, cupy: Any, index: int):
        self.cp, self.index = cupy, index
        self.make = cupy.from_dlpack  # a capsule of a CUDA array: CuPy's legacy path, no stream handshake
        # Cheaper than a capsule: ndarray(shape, dtype, memptr) over the allocation's pointer.
        self.view = (cupy.ndarray, lambda mem: mem.data, lambda name: numpy_dtype(name, "<"))
        with cupy.cuda.Device(index):
            # The caller's current stream: the library's threads allocate and copy on it, so
            # the pool's ordering holds as for the caller's own allocations.
            self.current = cupy.cuda.get_current_stream()

    def stream(self) -> int:
        return self.current.ptr

    def allocate(self, n: int) -> Any:
        with self.cp.cuda.Device(self.index), self.current:
            return self.cp.empty(n, self.cp.uint8)

    def viewable(self, name: str) -> bool:
        dt = numpy_dtype(name, "<")
        return dt is not None and dt.kind in "biufc" and dt.fields is None


class _Torch:
    """Device memory, the stream and tensors from capsules through PyTorch (its caching allocator)."""

    def __init__(self, torch: Any, index: int):
        self.torch, self.device = torch, torch.device("cuda", index)
        c = getattr(torch, "_C", None)
        # The capsule straight to torch's import: torch.utils.dlpack.from_dlpack checks what it
        # was handed first, per tensor.
        self.make = getattr(c, "_from_dlpack", None) or torch.utils.dlpack.from_dlpack
        self.view = None  # its views of a tensor cost what its import of a capsule does

        self.current = torch.cuda.current_stream(self.device)  # as for CuPy

    def stream(self) -> int:
        return self.current.cuda_stream

    def allocate(self, n: int) -> Any:
        with self.torch.cuda.stream(self.current):
            return self.torch.empty(n, dtype=self.torch.uint8, device=self.device)

    def viewable(self, name: str) -> bool:
        return torch_view_dtype(name) is not None


last_call: dict = {}
views = True  # the backend's view where it has one; False: capsules (bench/probes/files_probe.py)


class _Loader:
    """Reads files whole into GPU memory through the library and hands out the target library's
    arrays of them (see the module's text)."""

    def __init__(self, backend: Any, dev: str):
        self.backend, self.dev = backend, dev

    def read(self, names: list, raw_dtype: Any, shape: Any, workers: int, stop_at_failure: bool):
        from . import _ferry

        b = self.backend
        t0 = time.perf_counter()
        results, later, stats = _ferry.read_whole_files_to_device(
            names, raw_dtype, shape, workers, stop_at_failure, device=_device_index(self.dev), stream=b.stream(),
            allocate=b.allocate, viewable=b.viewable, make=b.make, view=b.view if views else None)
        # Where the last call's time went, for bench/probes/files_probe.py.
        last_call.clear()
        last_call.update(stats, call=time.perf_counter() - t0)
        return results, later


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
    return None if backend is None else _Loader(backend, dev)

