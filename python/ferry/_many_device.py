"""ferry.load_many into GPU memory, batched.

The files are read as for host memory (_many._load_host: whole files by a pool of threads into
blocks of a few MiB, headers parsed there), but the blocks are pinned memory, and as soon as a
block is full its worker copies it to the GPU with one asynchronous copy on the worker's own
stream; the arrays handed out are views of that device block, with the shape, dtype and offset
the host parse found. Reads of later blocks overlap the copies of earlier ones, and a call makes
one device allocation and one copy per block, not per file.

What the views cannot express goes through ferry.load file by file, as before: arrays that are
not C-ordered native-endian (a Fortran-ordered or big-endian .npy, which ferry.load turns into
C order and native bytes on the GPU), element types the target library lacks, and libraries
other than CuPy and PyTorch.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ._convert import optional_module

__all__ = ["device_loader"]


def _device_index(dev: str) -> int:
    return int(dev.split(":", 1)[1]) if ":" in dev else 0


def _arrays(value: Any) -> list[np.ndarray]:
    return list(value.values()) if isinstance(value, dict) else [value]


def _viewable(a: np.ndarray) -> bool:
    return a.dtype.isnative and a.dtype.fields is None and (a.flags.c_contiguous or a.size == 0)


class _Cupy:
    """Pinned blocks, device blocks and views through CuPy (its memory pools)."""

    def __init__(self, cupy: Any, index: int):
        self.cp, self.index = cupy, index
        self.local = threading.local()
        self.streams: list[Any] = []
        self.lock = threading.Lock()
        self.blocks: list[Any] = []  # pinned blocks, alive until the copies from them are done

    def pinned(self, n: int) -> np.ndarray:
        mem = self.cp.cuda.alloc_pinned_memory(n)
        with self.lock:
            self.blocks.append(mem)
        return np.frombuffer(mem, np.uint8, n)

    def stream(self) -> Any:
        s = getattr(self.local, "stream", None)
        if s is None:
            with self.cp.cuda.Device(self.index):
                s = self.cp.cuda.Stream(non_blocking=True)
            self.local.stream = s
            with self.lock:
                self.streams.append(s)
        return s

    def upload(self, raw: np.ndarray) -> Any:
        with self.cp.cuda.Device(self.index):
            mem = self.cp.cuda.alloc(raw.nbytes)
            mem.copy_from_host_async(raw.ctypes.data, raw.nbytes, self.stream())
        return mem

    def view(self, mem: Any, offset: int, a: np.ndarray) -> Any:
        with self.cp.cuda.Device(self.index):
            if a.size == 0:
                return self.cp.empty(a.shape, a.dtype)
            return self.cp.ndarray(a.shape, a.dtype, memptr=mem + offset)

    def finish(self) -> None:
        for s in self.streams:
            s.synchronize()
        self.blocks.clear()


class _Torch:
    """Pinned blocks, device blocks and views through PyTorch (its caching allocators)."""

    def __init__(self, torch: Any, index: int):
        self.torch, self.device = torch, torch.device("cuda", index)
        self.local = threading.local()
        self.streams: list[Any] = []
        self.lock = threading.Lock()
        self.blocks: list[Any] = []  # pinned host tensors, alive until the copies are done

    def pinned(self, n: int) -> np.ndarray:
        t = self.torch.empty(n, dtype=self.torch.uint8, pin_memory=True)
        with self.lock:
            self.blocks.append(t)
        return t.numpy()

    def stream(self) -> Any:
        s = getattr(self.local, "stream", None)
        if s is None:
            s = self.torch.cuda.Stream(device=self.device)
            self.local.stream = s
            with self.lock:
                self.streams.append(s)
        return s

    def upload(self, raw: np.ndarray) -> Any:
        host = self.torch.from_numpy(raw)
        with self.torch.cuda.stream(self.stream()):
            d = self.torch.empty(raw.nbytes, dtype=self.torch.uint8, device=self.device)
            d.copy_(host, non_blocking=True)
        return d

    def dtype(self, dt: np.dtype) -> Any:
        try:
            return self.torch.from_numpy(np.empty(0, dt)).dtype
        except TypeError:
            return None

    def view(self, d: Any, offset: int, a: np.ndarray) -> Any:
        t = self.dtype(a.dtype)
        return d[offset:offset + a.nbytes].view(t).view(a.shape)

    def finish(self) -> None:
        for s in self.streams:
            s.synchronize()
        self.blocks.clear()


def device_loader(dev: str, lib: str | None, results: list, failed: dict):
    """``(alloc, on_block, finish)`` for _many._load_host to load into GPU memory ``dev`` as
    ``lib``'s arrays (None: CuPy, as ferry.load returns GPU arrays), or None where only the
    file-by-file path serves (no CuPy or PyTorch, another library)."""
    if lib in (None, "cupy"):
        cupy = optional_module("cupy")
        backend: Any = _Cupy(cupy, _device_index(dev)) if cupy is not None else None
    elif lib == "torch":
        torch = optional_module("torch")
        backend = _Torch(torch, _device_index(dev)) if torch is not None else None
    else:
        backend = None
    if backend is None:
        return None

    def supported(a: np.ndarray, base: int) -> bool:
        return (_viewable(a) and (a.ctypes.data - base) % a.dtype.itemsize == 0
                and (not isinstance(backend, _Torch) or backend.dtype(a.dtype) is not None))

    def on_block(raw: np.ndarray, placed: list[int]) -> list[int]:
        """Copies the block to the GPU and turns the host views of its files into device
        views; returns the files that need ferry.load."""
        base = raw.ctypes.data
        direct = [i for i in placed if all(supported(a, base) for a in _arrays(results[i]))]
        if direct:
            try:
                mem = backend.upload(raw)
                for i in direct:
                    value = results[i]
                    if isinstance(value, dict):
                        results[i] = {k: backend.view(mem, a.ctypes.data - base, a) for k, a in value.items()}
                    else:
                        results[i] = backend.view(mem, value.ctypes.data - base, value)
            except Exception as e:  # noqa: BLE001 (out of GPU memory: each file it stopped says so)
                for i in direct:
                    failed[i] = e
        chosen = set(direct)
        return [i for i in placed if i not in chosen]

    return backend.pinned, on_block, backend.finish
