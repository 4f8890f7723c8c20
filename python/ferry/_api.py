"""ferry's Python API: fromfile, tofile, load, save, info, doctor and stats."""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import _checkpoint, _distributed, _ferry
from ._convert import (
    as_destination,
    as_ferry,
    dtype_text,
    empty_in_library,
    fspath,
    is_gpu,
    keeps_byte_order,
    library_converter,
    target,
    text_key,
    to_library,
)
from ._errors import UsageError

__all__ = ["fromfile", "tofile", "load", "load_checkpoint", "save", "info", "doctor", "stats", "reset_stats"]


def _fd_of(file: Any) -> int | None:
    try:
        return file.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None


def _proc_path(fd: int) -> str:
    # A second open of the same file through /proc leaves the caller's descriptor (and its
    # position) alone; ferry reads and writes by explicit offsets.
    return "/proc/self/fd/%d" % fd


def _is_url(path: str) -> bool:
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.lower() in ("http", "https", "s3")


def fromfile(file: Any, dtype: Any = float, count: int = -1, offset: int = 0, *,
             shape: Sequence[int] | None = None, device: Any = None, like: Any = None,
             out: Any = None, verify: str = "auto"):
    """Reads a raw binary file into host or GPU memory, as ``numpy.fromfile`` does.

    ``file`` is a path, a URL (``http://``, ``https://``, ``s3://bucket/key``) or an open file; an open file is read from its current position
    (plus ``offset``) and left positioned after the last item read, as with numpy. ``count``
    items of ``dtype`` are read (-1: to the end of the file; fewer when the file ends first,
    as with numpy). ``shape`` shapes the result (and sets the count when it is -1).
    ``device`` is ``"cpu"`` (default), ``"pinned"``, ``"cuda"`` or ``"cuda:N"``; ``like`` picks
    the library of the result (an array, a module or a name: ``"cupy"``, ``"torch"``,
    ``"jax"``, ``"numpy"``, ``"ferry"``) and, without ``device``, its device.

    On a GPU the bytes are read straight into device memory and byte-swapped there when the
    dtype asks for another byte order; host results keep the file's byte order, like numpy.

    ``out`` (an existing C-contiguous array or tensor of ``dtype``: numpy, CuPy, PyTorch, JAX
    or ferry, host or GPU) receives the items in its own memory, with no allocation, and is
    returned; ``count`` -1 then means its size. ``device``, ``like`` and ``shape`` follow it
    and may not be given. A numpy ``out`` keeps the file's byte order; GPU memory is made
    native in place.

    ``verify``: a local file with a sidecar manifest (``FILE.ferry-checksums.json``, from
    ``ferry verify --record``) has the chunks the read covers checked against it (``"auto"``);
    ``"always"`` also refuses a file without one, ``"never"`` does not check. A mismatch raises
    ``ferry.IntegrityError`` naming the file, the chunk's byte range and both checksums.

    >>> import numpy as np, ferry
    >>> np.arange(6, dtype=np.float32).tofile("/tmp/x.bin")
    >>> ferry.fromfile("/tmp/x.bin", dtype=np.float32, count=4)
    array([0., 1., 2., 3.], dtype=float32)
    >>> x = ferry.fromfile("/tmp/x.bin", np.float32, device="cuda")  # doctest: +SKIP
    """
    text, itemsize = dtype_text(dtype)
    if out is not None and (device is not None or like is not None or shape is not None):
        raise UsageError("fromfile: out= decides the device, the library and the shape; "
                         "pass device=, like= or shape= without it")
    dev, lib = target(device, like)
    path = fspath(file)
    fobj = None
    start = int(offset)
    if path is None:
        fd = _fd_of(file)
        if fd is None:
            # A file-like object without a descriptor (BytesIO): numpy's own reader decides.
            if out is not None:
                raise UsageError("fromfile: out= needs a path, a URL or a file with a descriptor")
            arr = np.fromfile(file, dtype=dtype, count=count, offset=offset)
            return _from_host(arr, dev, lib)
        if hasattr(file, "flush"):
            file.flush()
        start += file.tell()
        size = os.fstat(fd).st_size
        path, fobj = _proc_path(fd), file
    elif _is_url(path):
        with _ferry.File(path, "r") as remote:  # http://, https://, s3://: the size from the server
            size = remote.size()
    else:
        size = os.stat(path).st_size
    if start < 0 or start > size:
        raise UsageError("offset %d is outside the file (%d bytes)" % (start, size))
    available = (size - start) // itemsize
    if out is not None:
        a = as_destination(out, "fromfile: out=")
        if isinstance(out, np.ndarray):
            try:
                want = np.dtype(dtype)
            except TypeError:
                want = None  # ferry's own names (bfloat16, float8): checked by the extension
            if want is not None and out.dtype != want:
                raise UsageError("fromfile: out= has dtype %s, not %s (its byte order included)"
                                 % (out.dtype.str, want.str))
        keep = isinstance(out, np.ndarray) or (not is_gpu(a.device) and isinstance(out, _ferry.Array))
        _ferry.fromfile_into(path, text, a, int(count), start, keep)
        if fobj is not None:
            fobj.seek(start + a.nbytes)
        _checked(file, path, fobj, start, a.nbytes, out, keep or _native(text), verify)
        return out
    if shape is not None:
        shape = [int(d) for d in (shape if isinstance(shape, Sequence) else (shape,))]
        want = math.prod(shape)
        n = want if count < 0 else int(count)
    else:
        shape = []
        n = available if count < 0 else min(int(count), available)
    # On a GPU the items land straight in an array of the result's library, from its own
    # memory pool (see empty_in_library); ferry allocates where that library cannot hold them.
    buf = empty_in_library(lib, dev, shape or [n], _native_name(text)) if is_gpu(dev) else None
    if buf is not None:
        _ferry.fromfile_into(path, text, as_ferry(buf), n, start, False)
        if fobj is not None:
            fobj.seek(start + n * itemsize)
        _checked(file, path, fobj, start, n * itemsize, buf, _native(text), verify)
        return buf
    keep = keeps_byte_order(dev, lib)
    a = _ferry.fromfile(path, text, n, start, shape, dev, keep)
    if fobj is not None:
        fobj.seek(start + a.nbytes)
    result = to_library(a, lib)
    _checked(file, path, fobj, start, a.nbytes, result, keep or _native(text), verify)
    return result


def _native(text: str) -> bool:
    """Whether items of ``text`` are stored as this machine holds them (no swap on load)."""
    try:
        return np.dtype(text).byteorder in "=|" or np.dtype(text).isnative
    except TypeError:
        return True   # ferry's own names (bfloat16, float8_*): little-endian, native here


def _checked(file: Any, path: str, fobj: Any, start: int, nbytes: int, result: Any, same: bool,
             verify: str) -> None:
    """fromfile's check against the file's sidecar manifest (ferry._sidecar)."""
    if _is_url(path):
        if verify == "always":
            raise UsageError("fromfile: verify='always' needs a local file (a URL's own checksum, "
                             "where S3 keeps one, is checked on every read)")
        return
    if fobj is not None:   # an open file: its sidecar is beside the name it was opened by
        name = getattr(file, "name", None)
        same_file = isinstance(name, str) and os.path.exists(name) and \
            os.path.samestat(os.stat(name), os.fstat(_fd_of(file)))
        if not same_file:
            if verify == "always":
                raise UsageError("fromfile: verify='always' needs a path, or a file opened by name")
            return
        path = name
    from ._sidecar import check_fromfile
    check_fromfile(path, start, nbytes, result, same, verify)


def _native_name(text: str) -> str:
    """The name of ``text``'s dtype in native byte order ('>f4' -> 'float32', 'bfloat16')."""
    try:
        return np.dtype(text).newbyteorder("=").name
    except TypeError:
        return text


def _from_host(arr: np.ndarray, device: str, lib: str | None):
    a = as_ferry(arr)
    if is_gpu(device) or device == "pinned":
        a = a.to_native().to_device(device)
    elif not keeps_byte_order(device, lib):
        a = a.to_native()
    return to_library(a, lib)


def tofile(array: Any, file: Any) -> None:
    """Writes the elements of ``array`` (numpy, CuPy, PyTorch, JAX or ferry; host or GPU) in C
    order and their byte order, nothing else, as ``ndarray.tofile`` does. ``file`` is a path
    (written atomically) or an open file (written at its position, which then moves past the
    data).

    >>> import numpy as np, ferry
    >>> ferry.tofile(np.arange(3, dtype=np.int16), "/tmp/y.bin")
    >>> np.fromfile("/tmp/y.bin", dtype=np.int16)
    array([0, 1, 2], dtype=int16)
    """
    a = as_ferry(array)
    path = fspath(file)
    if path is not None:
        _ferry.tofile(a, path)
        return
    fd = _fd_of(file)
    if fd is None:
        file.write(np.ascontiguousarray(to_library(a.to_device("cpu"), "numpy")).tobytes())
        return
    file.flush()
    pos = file.tell()
    a = a.to_c_order()
    with _ferry.File(_proc_path(fd), "a") as out:
        out.write(a, pos)
    file.seek(pos + a.nbytes)


def load(path: Any, *, device: Any = None, like: Any = None, names: Sequence[str] | None = None,
         dtype: Any = None, format: str | None = None, c_order: bool = False, verify: str = "auto"):
    """Loads a .npy file (an array) or a safetensors file (a dict name -> array, sorted by
    name) into host or GPU memory.

    On a GPU the payload goes straight to device memory and is deserialized there (byte
    order, ``dtype`` conversion, Fortran to C order with ``c_order=True``); a safetensors file
    is read with one parallel read into one allocation shared by its tensors. ``names``
    loads only those tensors. ``dtype`` converts floating-point arrays (float16, bfloat16,
    float64 <-> float32; other floating conversions raise UsageError before anything is read). ``device`` and ``like`` follow :func:`ferry.fromfile`. A raw file
    (``format="raw"`` or an unknown content) needs ``dtype`` and is read like fromfile.
    ``verify`` checks a safetensors file's recorded CRC-32C checksums (on the GPU for GPU
    loads): ``"auto"`` where it has them, ``"always"`` (none recorded raises
    :class:`ferry.IntegrityError`), ``"never"``; a mismatch raises IntegrityError and returns
    nothing.

    >>> import numpy as np, ferry
    >>> np.save("/tmp/z.npy", np.eye(2))
    >>> ferry.load("/tmp/z.npy")
    array([[1., 0.],
           [0., 1.]])
    >>> weights = ferry.load("model.safetensors", like="torch", device="cuda")  # doctest: +SKIP
    """
    p = fspath(path)
    if p is None:
        raise UsageError("ferry.load takes a path (for open files use ferry.numpy.load)")
    fmt = format or _ferry.detect_format(p)
    if fmt == "raw":
        if dtype is None:
            raise UsageError("%s is a raw file: pass dtype= (and shape=) to read it" % p)
        return fromfile(p, dtype, device=device, like=like)
    dev, lib = target(device, like)
    as_type = None if dtype is None else dtype_text(dtype)[0]
    fmt, arrays, _metadata = _ferry.load(p, dev, list(names or []), as_type, fmt,
                                         keeps_byte_order(dev, lib) and as_type is None, c_order,
                                         verify)
    if fmt == "safetensors":
        convert = library_converter(lib, dev)
        return {name: convert(a) for name, a in arrays}
    return to_library(arrays[0][1], lib)


def save(path: Any, array_or_dict: Any, metadata: Mapping[str, str] | None = None, *,
         format: str | None = None, checksums: bool = True) -> None:
    """Saves one array as .npy (or raw), or a dict name -> array as safetensors (with string
    ``metadata``), atomically. The format follows the extension unless ``format`` is given; a
    dict is saved as safetensors (to a path whose extension names no other format: a dict to
    ``.npy`` raises UsageError). Tensor names and metadata are str of UTF-8 text. Arrays may be
    numpy, CuPy, PyTorch, JAX or ferry, in host or GPU memory. A safetensors file records a
    CRC-32C of every 64 MiB chunk of every tensor in its metadata (``"ferry.checksums"``,
    computed on the GPU for GPU arrays; other readers load the file unchanged) unless
    ``checksums=False``; loads check it.

    >>> import numpy as np, ferry
    >>> ferry.save("/tmp/w.safetensors", {"w": np.ones(3, np.float32)}, {"step": "1"})
    >>> ferry.load("/tmp/w.safetensors")["w"]
    array([1., 1., 1.], dtype=float32)
    """
    p = fspath(path)
    if p is None:
        raise UsageError("ferry.save takes a path")
    fmt = format or _ferry.format_from_extension(p)
    if isinstance(array_or_dict, Mapping):
        if format is None and fmt == "raw":
            fmt = "safetensors"
        if fmt != "safetensors":
            raise UsageError("a dict of arrays is saved as safetensors, not %s" % fmt)
        arrays = [(text_key(p, "tensor name", k), as_ferry(v)) for k, v in array_or_dict.items()]
    else:
        if fmt == "safetensors":
            raise UsageError("safetensors holds named tensors: pass a dict name -> array")
        if metadata:
            raise UsageError("only safetensors files hold metadata")
        arrays = [("", as_ferry(array_or_dict))]
    meta = {}
    for k, v in (metadata or {}).items():
        # safetensors metadata is text. Numbers have one obvious text; anything else would be
        # stored as its repr ('<object object at 0x...>'): refused.
        if not isinstance(k, str) or not isinstance(v, (str, int, float)):
            raise UsageError("%s: metadata maps str to str (numbers are written as text); %r: %r "
                             "is %s to %s" % (p, k, v, type(k).__name__, type(v).__name__))
        meta[text_key(p, "metadata key", k)] = text_key(p, "metadata value of %r" % k, str(v))
    _ferry.save(p, fmt, arrays, meta, bool(checksums))


def verify(path: Any, *, record: bool = False, threads: int = 0) -> dict:
    """Checks a safetensors file, a checkpoint (folder or index) or an .npy/raw file with a
    sidecar against the CRC-32C checksums recorded with it, as ``ferry verify --json`` does.
    Returns a dict: ``status`` (0 all match, 1 mismatches, 2 nothing verifiable), ``files``,
    ``unverifiable``, ``recorded``, ``mismatches`` (``file``, ``tensor``, ``begin``, ``end``,
    ``expected``, ``actual``, ``reason``), ``tensors``, ``bytes``, ``seconds``, ``gb_per_s``.
    With ``record=True`` files with no checksums get a sidecar (``FILE.ferry-checksums.json``)
    that later calls check. ``threads`` read and hash (0: one per core)."""
    p = fspath(path)
    if p is None:
        raise UsageError("ferry.verify takes a path")
    return _ferry.verify(p, bool(record), int(threads))


def info(path: Any, format: str | None = None) -> dict:
    """What a .npy or safetensors file holds, from its header alone, in the shape ``ferry
    info --json`` prints (docs/formats.md): ``file``, ``format``, ``version``, ``file_size``,
    ``header_size``, ``arrays`` (``name``, ``dtype``, ``byte_order``: "little", "big" or None
    for one-byte types, ``order``: "C" or "F", ``shape`` as a tuple, ``begin``, ``end``) and
    ``metadata``."""
    p = os.fsdecode(path)
    d = _ferry.describe(p, format)
    # The header's JSON replaces bytes that are not UTF-8; the path as given reopens the file.
    d["file"] = p
    for a in d["arrays"]:
        a["shape"] = tuple(a["shape"])
    return d


def doctor(paths: Any = None) -> dict:
    """Whether GPUDirect Storage works here, and which path a read of each of ``paths`` (files
    or directories) into GPU memory takes, and why: the report of ``ferry doctor --json``.

    >>> import ferry
    >>> report = ferry.doctor(["/data"])  # doctest: +SKIP
    """
    if paths is None:
        paths = []
    elif isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    return json.loads(_ferry.doctor([os.fsdecode(p) for p in paths]))


def stats() -> dict:
    """What ferry moved in this process: ``bytes_read``, ``bytes_written``, ``read`` and
    ``write`` by I/O path ({path: {bytes, requests, seconds}}), ``fallbacks`` ({reason:
    times}), ``staging_memory_in_use`` and ``staging_memory_peak``."""
    return _ferry.stats()


def reset_stats() -> None:
    """Sets the process-wide counters of :func:`stats` back to zero."""
    _ferry.reset_stats()


def load_checkpoint(src: Any, *, device: Any = None, like: Any = None, tensors: Any = None,
                    slices: Any = None, into: Any = None, strict: bool = True, dtype: Any = None,
                    progress: Any = None, route: str = "auto", group: Any = None, tp: Any = None,
                    verify: str = "auto", **group_options: Any):
    """Loads a checkpoint (a folder with model.safetensors.index.json, the index, a glob, a list
    of files, or one file; or a URL: ``s3://bucket/prefix/``, ``https://host/path/``, an index
    URL, one object) in one plan over every shard.

    ``tensors`` selects: exact names (a list), a glob, a compiled regex, or a callable on the
    name. ``slices`` maps a name or glob to ``(dim, start, stop)`` or ``ferry.split(dim, parts,
    part)`` (see :func:`tensor_parallel`); only those bytes are read. ``dtype`` converts
    floating-point tensors (on the GPU for GPU loads).

    Without ``into`` returns a dict name -> array (``like``'s library on ``device``, as
    :func:`ferry.load`), with ``.stats``. With ``into`` (a dict name -> array/tensor, or a
    ``torch.nn.Module`` whose ``state_dict`` names are matched) the bytes land in those tensors,
    no second copy; shapes, dtypes and devices are checked before any byte moves; ``strict``
    raises on missing or unexpected keys as ``load_state_dict`` does. Returns
    ``LoadResult(missing_keys, unexpected_keys, stats)``.

    With ``group`` (a torch.distributed process group) every rank of the group loads the
    checkpoint together: ``tp`` (this rank's tensor-parallel rules) names the tensors each rank
    reads only its slice of; the others are read once across the group and completed by
    collectives. See ferry._distributed.load_group and docs/distributed.md.

    ``verify`` checks the CRC-32C checksums the shards record (:func:`ferry.save_checkpoint`
    writes them): ``"auto"`` where they exist, ``"always"`` (a shard without them raises
    :class:`ferry.IntegrityError`), ``"never"``. A mismatch raises IntegrityError naming the
    shard, tensor, byte range and both checksums; no tensor is returned (with ``into`` the
    message names the destinations already written). docs/integrity.md.
    """
    if group is not None or tp is not None or group_options:
        if verify != "auto":
            raise UsageError("load_checkpoint: verify= applies to loads without group= (a group "
                             "load checks nothing yet)")
        return _distributed.load_group_call(src, group=group, tp=tp, device=device, like=like,
                                            tensors=tensors, slices=slices, into=into, strict=strict,
                                            dtype=dtype, progress=progress, route=route, **group_options)
    return _checkpoint.load_checkpoint(src, device=device, like=like, tensors=tensors, slices=slices,
                                       into=into, strict=strict, dtype=dtype, progress=progress,
                                       route=route, verify=verify)
