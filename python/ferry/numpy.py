"""numpy's file functions with numpy's signatures, served by ferry: swap
``import numpy as np; np.fromfile(...)`` for ``import ferry.numpy as fnp; fnp.fromfile(...)``.

What ferry does not serve (text mode ``sep=``, ``.npz`` and pickled files, ``mmap_mode``, file
objects without a descriptor, a ``max_header_size`` other than numpy's default, dtypes ferry has
no element type for: structured, object, string and long double) goes to numpy
itself, so every call behaves as numpy's does. ``like=`` may name a GPU array (CuPy,
PyTorch, JAX): the data then goes straight to that GPU.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as _np

from . import _api, _ferry
from ._convert import fspath, moves_dtype
from ._errors import FormatError

__all__ = ["fromfile", "tofile", "load", "save"]

_NUMPY_MAX_HEADER = 10000


def fromfile(file: Any, dtype: Any = float, count: int = -1, sep: str = "", offset: int = 0,
             *, like: Any = None):
    """numpy.fromfile. Binary reads (``sep=""``) are ferry's parallel reads; with ``like=`` a
    GPU array the result is on that GPU, in that library."""
    if sep != "" or not moves_dtype(dtype):
        kwargs = {} if like is None else {"like": like}
        return _np.fromfile(file, dtype=dtype, count=count, sep=sep, offset=offset, **kwargs)
    return _api.fromfile(file, dtype, count, offset, like=like)


def tofile(arr: Any, fid: Any, sep: str = "", format: str = "%s") -> None:
    """``ndarray.tofile`` as a function; binary writes go through ferry (host or GPU arrays)."""
    if sep != "" or (isinstance(arr, _np.ndarray) and not moves_dtype(arr.dtype)):
        _np.asarray(arr).tofile(fid, sep=sep, format=format)
        return
    _api.tofile(arr, fid)


def _ferry_reads_npy(path: str | None, mmap_mode: Any, max_header_size: int) -> bool:
    if path is None or mmap_mode is not None or max_header_size != _NUMPY_MAX_HEADER:
        return False
    try:
        return _ferry.detect_format(path) == "npy"
    except OSError:
        return False  # let numpy raise its own error


def load(file: Any, mmap_mode: Any = None, allow_pickle: bool = False, fix_imports: bool = True,
         encoding: str = "ASCII", *, max_header_size: int = _NUMPY_MAX_HEADER):
    """numpy.load. A .npy file given by path is read by ferry (parallel reads, no copy);
    everything else (.npz, pickles, open files, mmap_mode) by numpy."""
    path = fspath(file)
    if _ferry_reads_npy(path, mmap_mode, max_header_size):
        try:
            return _api.load(path, like="numpy", format="npy")
        except FormatError:
            pass  # pickled (object) arrays and the like: numpy's rules and numpy's errors
    return _np.load(file, mmap_mode=mmap_mode, allow_pickle=allow_pickle, fix_imports=fix_imports,
                    encoding=encoding, max_header_size=max_header_size)


def save(file: Any, arr: Any, allow_pickle: bool = True, **kwargs: Any) -> None:
    """numpy.save. A path gets ``.npy`` appended when it has no such extension, as numpy does;
    numeric arrays given a path are written by ferry (atomically), anything else by numpy.
    Other keyword arguments (``fix_imports`` of numpy before 2.4) go to numpy as given."""
    path = fspath(file)
    if path is not None:
        a = arr if hasattr(arr, "__dlpack__") or hasattr(arr, "__cuda_array_interface__") else _np.asanyarray(arr)
        dt = getattr(a, "dtype", None)
        if not isinstance(a, _np.ndarray) or moves_dtype(dt):
            if not path.endswith(".npy"):
                path += ".npy"
            _api.save(path, a, format="npy")
            return
    _np.save(file, _np.asanyarray(arr), allow_pickle=allow_pickle, **kwargs)
