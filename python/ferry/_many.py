"""Many small files at once: ferry.load_many and ferry.iter_load.

Into host memory the files are read whole, each with one pread, by the library's threads
(_ferry.read_whole_files, without the GIL) into pooled blocks of a few MiB, and their headers
(.npy, safetensors) are parsed there in C++; the arrays handed out are numpy views of the
blocks, made in one loop in C++, as checkpoint loads hand out views of their block. One read
a file, not a header read and then a payload read, because for files of 16-256 KiB the system
calls cost more than the bytes. A pool of Python threads doing the same held the GIL for each
file's parse and view and ran at a fraction of the speed (docs/benchmarks.md, "Many small
files").

What the fast path does not cover goes through ferry.load file by file: libraries other than
numpy, CuPy and PyTorch, dtype= conversions of .npy/safetensors files, element types the
library lacks, files with recorded checksums, and what the C++ header reader refuses (numpy's
header reader, here, takes structured dtypes). iter_load reads file by file on a pool.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import math
import os
import re
import struct
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from ._convert import dtype_text, fspath, is_gpu, numpy_dtype, target
from ._errors import EndOfFileError, Error, FormatError, IntegrityError, UsageError, _file_error_class
from ._many_device import device_loader

__all__ = ["LoadFailure", "load_many", "iter_load"]


class LoadFailure(NamedTuple):
    """A file that :func:`ferry.load_many` or :func:`ferry.iter_load` could not load with
    ``errors="skip"``: its ``index`` in the list, its ``path`` and the ``error`` (an exception
    whose message names both)."""

    index: int
    path: str
    error: BaseException


_WORKERS = 16
_SIDECAR = ".ferry-checksums.json"  # ferry._sidecar.SUFFIX: a file with one is checked against it
_ALIGN = 64  # .npy payloads start 64-byte aligned within their file; each file starts so here
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(_WORKERS, thread_name_prefix="ferry-many")
        return _pool


class _Fallback(Exception):
    """The fast path does not cover this file: ferry.load reads it."""


# What np.save writes; anything else goes to numpy's own header reader.
_NPY_HEADER = re.compile(r"\{'descr': '([<>|=][a-zA-Z]\d+)', 'fortran_order': (True|False), "
                         r"'shape': \(([\d, ]*)\), \}\s*\Z")
_SAFETENSORS_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
    "I8": "|i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "|u1", "BOOL": "|b1",
}
_dtypes: dict[str, np.dtype] = {}


def _dtype(descr: str) -> np.dtype:
    dt = _dtypes.get(descr)
    if dt is None:
        dt = _dtypes[descr] = np.dtype(descr)
    return dt


def _format_error(path: str, field: str, reason: str) -> FormatError:
    exc = FormatError("%s: %s: %s" % (path, field, reason))
    exc.filename, exc.field, exc.reason = path, field, reason
    return exc


def _view(buf: memoryview, off: int, shape: tuple, dt: np.dtype, order: str = "C"):
    if math.prod(shape) == 0 or dt.itemsize == 0:
        return np.empty(shape, dtype=dt, order=order)
    return np.ndarray(shape, dt, buf, off, order=order)


def _parse_npy(path: str, buf: memoryview, start: int, size: int):
    head = bytes(buf[start:start + min(size, 4096)])
    if len(head) < 10 or head[:6] != b"\x93NUMPY":
        raise _format_error(path, "magic", "not a .npy file")
    major = head[6]
    if major == 1:
        hlen, hstart = struct.unpack_from("<H", head, 8)[0], 10
    elif major in (2, 3) and len(head) >= 12:
        if major == 3:
            raise _Fallback()
        hlen, hstart = struct.unpack_from("<I", head, 8)[0], 12
    else:
        raise _format_error(path, "version", "%d.%d is not a .npy version" % (major, head[7]))
    end = hstart + hlen
    if end > size:
        raise _format_error(path, "header", "ends at byte %d, the file has %d bytes" % (end, size))
    raw = head[hstart:end] if end <= len(head) else bytes(buf[start + hstart:start + end])
    text = raw.decode("latin1")
    m = _NPY_HEADER.match(text)
    if m:
        dt = _dtype(m.group(1))
        fortran = m.group(2) == "True"
        shape = tuple(int(d) for d in m.group(3).replace(" ", "").split(",") if d)
    else:
        import io

        fp = io.BytesIO(bytes(buf[start:start + end]))
        fmt = np.lib.format
        try:
            version = fmt.read_magic(fp)
            reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran, dt = reader(fp)
        except ValueError as e:
            raise _format_error(path, "header", str(e)) from None
    if dt.hasobject:
        raise _format_error(path, "descr", "holds Python objects, which ferry does not load")
    need = math.prod(shape) * dt.itemsize
    if end + need > size:
        raise _format_error(path, "shape", "%s of %s needs %d bytes of data, the file holds %d"
                            % (tuple(shape), dt.str, need, size - end))
    return _view(buf, start + end, tuple(shape), dt, "F" if fortran else "C")


def _parse_safetensors(path: str, buf: memoryview, start: int, size: int):
    n = struct.unpack_from("<Q", buf, start)[0]
    if n > size - 8:
        raise _format_error(path, "header size", "%d bytes, the file only %d" % (n, size))
    try:
        header = json.loads(bytes(buf[start + 8:start + 8 + n]))
    except (ValueError, UnicodeDecodeError) as e:
        raise _format_error(path, "header", "not JSON: %s" % e) from None
    if not isinstance(header, dict):
        raise _format_error(path, "header", "not a JSON object")
    if "ferry.checksums" in (header.get("__metadata__") or {}):
        raise _Fallback()  # ferry.load checks the recorded checksums (docs/integrity.md)
    data = start + 8 + n
    out = {}
    for name in sorted(header):
        if name == "__metadata__":
            continue
        t = header[name]
        try:
            kind, shape, (b, e) = t["dtype"], tuple(int(d) for d in t["shape"]), t["data_offsets"]
            b, e = int(b), int(e)
        except (TypeError, KeyError, ValueError):
            raise _format_error(path, "tensor %r" % name,
                                "needs dtype, shape and data_offsets") from None
        descr = _SAFETENSORS_DTYPES.get(kind)
        if descr is None:
            raise _Fallback()  # bfloat16, float8: ferry.load knows them
        dt = _dtype(descr)
        if min(shape, default=0) < 0 or not 0 <= b <= e or e - b != math.prod(shape) * dt.itemsize:
            raise _format_error(path, "tensor %r" % name, "data_offsets [%d, %d] do not fit %s of %s"
                                % (b, e, shape, kind))
        if data + e > start + size:
            raise _format_error(path, "tensor %r" % name, "ends at byte %d of the data, the file "
                                "holds %d" % (e, size - 8 - n))
        out[name] = _view(buf, data + b, shape, dt)
    return out


def _kind(buf: memoryview, start: int, size: int) -> str:
    if size >= 6 and buf[start:start + 6] == b"\x93NUMPY":
        return "npy"
    if size >= 9 and buf[start + 8] == ord("{") and struct.unpack_from("<Q", buf, start)[0] <= size - 8:
        return "safetensors"
    return "raw"


class _Request:
    """What one call asks of every file: the raw element type and shape, and whether a
    .npy/safetensors file needs ferry.load's dtype conversion."""

    def __init__(self, dtype: Any, shape: Any):
        self.dtype = dtype
        self.raw: np.dtype | None = None
        if dtype is not None:
            try:
                self.raw = np.dtype(dtype)
            except TypeError:
                self.raw = None  # bfloat16 and the like: ferry.fromfile reads those
        if shape is not None:
            shape = tuple(int(d) for d in (shape if isinstance(shape, Sequence) else (shape,)))
        self.shape = shape

    def parse(self, path: str, buf: memoryview, start: int, size: int):
        kind = _kind(buf, start, size)
        if kind == "raw":
            if self.dtype is None:
                raise UsageError("%s is a raw file: pass dtype= (and shape=) to read it" % path)
            dt = self.raw
            if dt is None:
                raise _Fallback()
            if self.shape is None:
                return _view(buf, start, (size // dt.itemsize,), dt)
            need = math.prod(self.shape) * dt.itemsize
            if need > size:
                raise _format_error(path, "shape", "%s of %s needs %d bytes, the file holds %d"
                                    % (self.shape, dt.str, need, size))
            return _view(buf, start, self.shape, dt)
        if self.dtype is not None:
            raise _Fallback()  # a conversion: ferry.load does it
        if kind == "npy":
            return _parse_npy(path, buf, start, size)
        return _parse_safetensors(path, buf, start, size)


def _read_whole(path: str, view: memoryview) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        done, n = 0, len(view)
        while done < n:
            got = os.preadv(fd, [view[done:]], done)
            if got == 0:
                exc = EndOfFileError("%s ended at byte %d while being read (it had %d bytes)"
                                     % (path, done, n))
                exc.filename, exc.file_size = path, done
                raise exc
            done += got
    finally:
        os.close(fd)


def _named(index: int, path: str, exc: BaseException) -> BaseException:
    """``exc`` with a message that names the file and its index in the list."""
    where = "paths[%d] %s" % (index, path)
    # An IntegrityError is an OSError too, but without an errno: it keeps its class and fields.
    if isinstance(exc, OSError) and not isinstance(exc, (EndOfFileError, IntegrityError)):
        text = exc.strerror or str(exc)
        out = _file_error_class(exc.errno)(exc.errno, "%s: %s" % (where, text), path)
    else:
        text = str(exc)
        if text.startswith(path + ": "):
            text = text[len(path) + 2:]
        elif text.startswith(path + " "):
            text = text[len(path) + 1:]
        message = "%s: %s" % (where, text)
        try:
            out = type(exc)(message)
        except Exception:
            out = Error(message)
        for key in ("filename", "field", "reason", "file_size", "offset", "length", "tensor", "begin",
                    "end", "expected", "actual"):
            if hasattr(exc, key):
                setattr(out, key, getattr(exc, key))
    out.index = index
    if getattr(out, "filename", None) is None:
        out.filename = path
    out.__cause__ = exc
    return out


def _check(paths: Any, errors: str) -> list[str]:
    if errors not in ("raise", "skip"):
        raise UsageError("errors= is 'raise' or 'skip', not %r" % (errors,))
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise UsageError("load_many takes a list of paths; for one file use ferry.load")
    out = []
    for i, p in enumerate(paths):
        s = fspath(p)
        if s is None:
            raise UsageError("paths[%d] is %s, not a path" % (i, type(p).__name__))
        out.append(s)
    return out


def _load_one(path: str, request: _Request, kwargs: dict):
    """One file through ferry.load, or ferry.fromfile for a raw file (which checks its sidecar
    manifest, docs/integrity.md)."""
    from . import _ferry
    from ._api import fromfile, load

    if request.dtype is not None and _ferry.detect_format(path) == "raw":
        return fromfile(path, request.dtype, shape=request.shape, **kwargs)
    return load(path, dtype=request.dtype, **kwargs)


def _load_host_one(path: str, request: _Request, kwargs: dict):
    """One file into host memory of its own, its header parsed here (numpy's own header reader
    for what np.save writes beyond the common form: structured dtypes...), else ferry.load; a
    file with a sidecar manifest through ferry.fromfile, which checks it."""
    if os.path.exists(path + _SIDECAR):
        return _load_one(path, request, kwargs)
    size = os.stat(path).st_size
    raw = np.empty(-(-size // _ALIGN) * _ALIGN + _ALIGN, np.uint8)
    start = (-raw.ctypes.data) % _ALIGN
    buf = memoryview(raw)
    _read_whole(path, buf[start:start + size])
    try:
        return request.parse(path, buf, start, size)
    except _Fallback:
        return _load_one(path, request, kwargs)


def _host_fast(dev: str, lib: str | None) -> bool:
    return dev == "cpu" and lib in (None, "numpy")


def load_many(paths: Iterable[Any], *, device: Any = None, like: Any = None, dtype: Any = None,
              shape: Any = None, errors: str = "raise"):
    """Loads many .npy, safetensors or raw files; returns a list with one entry per path, in
    the order given: an array for a .npy or raw file, a dict name -> array (sorted by name)
    for a safetensors file, as :func:`ferry.load` returns them.

    Into host memory (the default) the files are read whole by a pool of threads into pooled
    blocks of up to 3 MiB (a larger file gets its own), and the arrays are numpy views of them
    (an array keeps its block alive); their headers are parsed from that memory. Each file
    gets its own bytes, so duplicate paths give independent arrays. .npy arrays keep the
    file's byte order and Fortran order, as numpy's ``np.load`` does. Raw files need
    ``dtype`` (and take ``shape``; without it, as many items as the file holds). For a .npy
    or safetensors file ``dtype`` converts floating-point arrays as :func:`ferry.load` does.

    Into GPU memory as CuPy arrays (``device="cuda"``) or PyTorch tensors (``like=torch``)
    the files are read the same way into pinned blocks, each block copied to the GPU with one
    asynchronous copy as soon as it is full, and the arrays are views of the device blocks
    (ferry._many_device). Fortran-ordered and big-endian arrays come back in C order with
    native bytes, as :func:`ferry.load` gives them on the GPU, made so on the device as their
    block arrives. Element types the library lacks and other libraries (JAX, ``like="ferry"``) go
    through :func:`ferry.load` one by one, with the same results.

    ``errors="raise"`` (default) raises the error of the first file that fails (a missing,
    unreadable or malformed file; its message names the file and its index in ``paths``, also
    in the exception's ``index`` and ``filename``) before anything is returned.
    ``errors="skip"`` returns a pair ``(arrays, failures)``: ``arrays`` has ``None`` where a
    file failed, ``failures`` lists a :class:`ferry.LoadFailure` (index, path, error) for each.

    >>> import numpy as np, ferry
    >>> np.save("/tmp/a.npy", np.arange(3)); np.save("/tmp/b.npy", np.eye(2, dtype=np.float32))
    >>> a, b = ferry.load_many(["/tmp/a.npy", "/tmp/b.npy"])
    >>> arrays, failures = ferry.load_many(["/tmp/a.npy", "/tmp/nope.npy"], errors="skip")
    >>> failures[0].index
    1
    """
    names = _check(paths, errors)
    request = _Request(dtype, shape)
    dev, lib = target(device, like)
    n = len(names)
    results: list[Any] = [None] * n
    failed: dict[int, BaseException] = {}
    later: list[int] = list(range(n))
    loader = device_loader(dev, lib) if is_gpu(dev) else None
    if _host_fast(dev, lib) or loader is not None:
        later = _read_all(names, request, results, errors == "raise", loader)
    kwargs = {"device": device, "like": like}
    one = _load_host_one if _host_fast(dev, lib) else _load_one
    for i in later:
        try:
            results[i] = one(names[i], request, kwargs)
        except Exception as e:  # noqa: BLE001 (every failure is reported with its file)
            if errors == "raise":
                raise _named(i, names[i], e) from e
            failed[i] = e
    failures = [LoadFailure(i, names[i], _named(i, names[i], failed[i])) for i in sorted(failed)]
    if errors == "raise":
        return results
    for f in failures:
        results[f.index] = None
    return results, failures


def _read_all(names: list[str], request: _Request, results: list, stop_at_failure: bool,
                loader: Any = None) -> list[int]:
    """The files read whole by the library's threads (_ferry.read_whole_files: one pread each
    into pooled blocks of a few MiB, headers parsed there, without the GIL), their arrays
    placed in ``results``: numpy views of the blocks, or with ``loader`` (_many_device) views
    of the blocks' copies in GPU memory. Returns the indices left for ferry.load, in order:
    files that failed (ferry.load raises their error again, with its own class and fields),
    that need a conversion or a check this path does not make, or whose element type the
    library lacks.

    Not one block per call: a call's single block of gigabytes is fresh memory, faulted in page
    by page, and on the busy CPU machine it cost more than the reads themselves (20,000 files
    of 16-256 KiB, docs/benchmarks.md); blocks of a few MiB come from memory the allocator
    already holds, and keeping one array keeps only its block alive."""
    from . import _ferry

    raw_dtype = None
    if request.dtype is not None and (request.raw is None or request.raw.isnative or request.raw.itemsize == 1):
        raw_dtype = dtype_text(request.dtype)[0]  # a big-endian raw dtype: ferry.fromfile reads it
    args = (names, raw_dtype, request.shape, _WORKERS, stop_at_failure)
    if loader is None:
        got, later = _ferry.read_whole_files(*args, dtype_of=numpy_dtype)
    else:
        got, later = loader.read(*args)
    results[:] = got
    if request.dtype is not None:
        # A dtype= asks .npy and safetensors files for a conversion: ferry.load makes it.
        converted = [i for i, v in enumerate(got) if v is not None and (isinstance(v, dict) or v.dtype != request.raw)]
        for i in converted:
            results[i] = None
        later = sorted(set(later) | set(converted))
    return later


def iter_load(paths: Iterable[Any], prefetch: int = 8, *, device: Any = None, like: Any = None,
              dtype: Any = None, shape: Any = None, errors: str = "raise") -> Iterator[Any]:
    """Yields what :func:`ferry.load_many` would return for each path, in order, while up to
    ``prefetch`` later files are already being read by a pool of threads. Each file gets its
    own host allocation (no pooled block: a consumer may keep few of them).

    ``errors="raise"`` raises at the first file that fails, after the files before it were
    yielded; ``errors="skip"`` yields a :class:`ferry.LoadFailure` in its place and goes on.
    On the GPU each file goes through :func:`ferry.load`, still ``prefetch`` ahead.

    >>> import ferry
    >>> for x in ferry.iter_load(["/tmp/a.npy", "/tmp/b.npy"], prefetch=16):  # doctest: +SKIP
    ...     train_step(x)
    """
    if errors not in ("raise", "skip"):
        raise UsageError("errors= is 'raise' or 'skip', not %r" % (errors,))
    if int(prefetch) < 1:
        raise UsageError("prefetch= is at least 1, not %r" % (prefetch,))
    request = _Request(dtype, shape)
    dev, lib = target(device, like)
    host = _host_fast(dev, lib)
    kwargs = {"device": device, "like": like}
    pool = _executor()

    def one(path: str):
        return _load_host_one(path, request, kwargs) if host else _load_one(path, request, kwargs)

    pending: collections.deque = collections.deque()
    it = iter(paths)
    index = 0

    def submit() -> bool:
        nonlocal index
        try:
            p = next(it)
        except StopIteration:
            return False
        s = fspath(p)
        if s is None:
            raise UsageError("paths[%d] is %s, not a path" % (index, type(p).__name__))
        pending.append((index, s, pool.submit(one, s)))
        index += 1
        return True

    try:
        while len(pending) < prefetch and submit():
            pass
        while pending:
            i, s, fut = pending.popleft()
            submit()
            try:
                value = fut.result()
            except Exception as e:  # noqa: BLE001 (every failure is reported with its file)
                failure = _named(i, s, e)
                if errors == "raise":
                    raise failure from e
                value = LoadFailure(i, s, failure)
            yield value
    finally:
        for _, _, fut in pending:
            fut.cancel()
