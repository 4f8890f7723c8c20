"""ferry's exceptions.

Every error ferry raises derives from :class:`ferry.Error`. Each also derives from the built-in
exception a Python programmer would catch for it:

==========================  ==========================================  =====================
ferry class                 raised for                                  also a
==========================  ==========================================  =====================
``UsageError``              a bad argument, a closed file, a bad mode   ``ValueError``
``SettingsError``           a setting that does not parse               ``ValueError``
``FormatError``             invalid .npy / safetensors / raw content    ``ValueError``
``ChunkError``              a Zarr chunk that does not decode (``key``)  ``ValueError``
``FileError``               a failed system call (errno, filename)      ``OSError``
``EndOfFileError``          a read past the end of a file               ``OSError``, ``EOFError``
``CuFileError``             a failed cuFile call (``code``)             ``OSError``
``CudaError``               a failed CUDA runtime call (``code``)       ``RuntimeError``
``RemoteError``             an HTTP/S3 object that could not be read    ``OSError``
                            or written (``status``, ``url``,
                            ``credentials``)
``IntegrityError``          bytes that do not match their recorded      ``OSError``
                            checksum (``filename``, ``tensor``,
                            ``begin``, ``end``, ``expected``,
                            ``actual``)
==========================  ==========================================  =====================

A ``FileError`` for a missing file is also a ``FileNotFoundError``, for a denied one a
``PermissionError`` (and so on, as ``OSError`` itself does), so ``except FileNotFoundError``
works as it does with numpy.
"""

from __future__ import annotations

import builtins
import errno as _errno

__all__ = [
    "Error",
    "UsageError",
    "SettingsError",
    "FormatError",
    "ChunkError",
    "FileError",
    "EndOfFileError",
    "CuFileError",
    "CudaError",
    "RemoteError",
    "CheckpointError",
    "CheckpointIOError",
    "CheckpointChangedError",
    "IntegrityError",
]


class Error(Exception):
    """Base of every exception ferry raises."""


class UsageError(Error, ValueError):
    """A misuse of the API: a bad argument, a wrong mode, a closed file."""


class SettingsError(UsageError):
    """A setting value that does not parse. ``variable`` names it (e.g. ``FERRY_THREADS``)."""

    variable: str | None = None


class FormatError(Error, ValueError):
    """Invalid file content. ``filename``, ``field`` and ``reason`` say where and why."""

    filename: str | None = None
    field: str | None = None
    reason: str | None = None


class ChunkError(FormatError):
    """A Zarr chunk whose bytes do not decode: a checksum that does not match, compressed data
    that is truncated or corrupt, a size that does not fit the chunk. ``key`` is the chunk's
    store key (``filename`` its path where the store has one), ``field`` the codec that
    refused it and ``reason`` why."""

    key: str | None = None


class CheckpointError(FormatError):
    """A checkpoint or a load request that does not fit it: ``filename`` (shard, index or
    checkpoint), ``tensor`` and ``reason``. Raised before any byte lands in ``into=``."""

    tensor: str | None = None


class CheckpointIOError(Error, OSError):
    """An I/O error in the middle of a checkpoint load: ``complete`` lists the tensors whose
    bytes all landed, ``incomplete`` the others."""

    complete: list | None = None
    incomplete: list | None = None

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "checkpoint I/O error"


class CheckpointChangedError(Error):
    """The checkpoint changed while it was opened or loaded (a save published another
    generation, or a shard or the index was replaced, rewritten or removed): ``filename`` names
    the shard or index, ``reason`` what changed. No mix of two generations is ever returned;
    loading again sees the checkpoint as it is then, so the error is worth a retry."""

    reason: str | None = None


class IntegrityError(Error, OSError):
    """Bytes that do not match the CRC-32C checksum recorded when they were written, a header
    that does not match its record, or (``verify="always"``) a file without checksums.
    ``filename`` names the file (a URL redacted), ``tensor`` the tensor ("" for a header or a
    whole file), ``begin``/``end`` the absolute byte range that failed, ``expected``/``actual``
    the two checksums ("crc32c:" and 8 hex digits; "" when none), ``reason`` why. No tensor of
    a failed load is returned."""

    tensor: str | None = None
    reason: str | None = None
    begin: int | None = None
    end: int | None = None
    expected: str | None = None
    actual: str | None = None

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "integrity error"


class FileError(Error, OSError):
    """A system call failed: ``errno``, ``strerror`` and ``filename`` as for ``OSError``;
    ``offset`` and ``length`` give the byte range of the request when known."""

    offset: int | None = None
    length: int | None = None


class EndOfFileError(FileError, EOFError):
    """A file ended before the requested range did (reads are never silently short).
    ``file_size`` is the file's size."""

    file_size: int | None = None

    def __str__(self) -> str:
        # OSError would print "[Errno None] None: 'path'": ferry's message says more.
        return str(self.args[0]) if self.args else "end of file"


class CuFileError(FileError):
    """A cuFile (GPUDirect Storage) call failed; ``code`` is its CU_FILE status."""

    code: int | None = None


class CudaError(Error, RuntimeError):
    """A CUDA runtime call failed; ``code`` is the cudaError_t value."""

    code: int | None = None
    filename: str | None = None


class RemoteError(FileError):
    """A remote object (``http://``, ``https://``, ``s3://``) could not be read or written.
    ``status`` is the HTTP status (0: no response came), ``url`` the URL with credentials
    redacted (also ``filename``), ``credentials`` which credentials were used (never a secret)."""

    status: int | None = None
    url: str | None = None
    credentials: str | None = None

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "remote error"


# OSError picks a subclass from errno (FileNotFoundError for ENOENT, ...) only when called as
# OSError itself; ferry's FileError does the same through these combined classes.
_ERRNO_CLASSES = {
    _errno.ENOENT: builtins.FileNotFoundError,
    _errno.EEXIST: builtins.FileExistsError,
    _errno.EISDIR: builtins.IsADirectoryError,
    _errno.ENOTDIR: builtins.NotADirectoryError,
    _errno.EACCES: builtins.PermissionError,
    _errno.EPERM: builtins.PermissionError,
    _errno.EINTR: builtins.InterruptedError,
}
_combined: dict[type, type] = {}


def _file_error_class(code: int | None) -> type:
    builtin = _ERRNO_CLASSES.get(code) if code is not None else None
    if builtin is None:
        return FileError
    cls = _combined.get(builtin)
    if cls is None:
        cls = type(builtin.__name__, (FileError, builtin), {"__module__": "ferry"})
        cls.__qualname__ = "FileError[%s]" % builtin.__name__
        _combined[builtin] = cls
    return cls


def _from_native(kind: str, message: str, attrs: dict) -> BaseException:
    """Builds the Python exception for a C++ ferry exception (called by the extension)."""
    if kind in ("system", "eof", "cufile"):
        filename = attrs.get("filename")
        if kind == "system":
            code = attrs.get("errno")
            cls = _file_error_class(code)
        elif kind == "eof":
            code, cls = None, EndOfFileError
        else:
            code, cls = _errno.EIO, CuFileError
        if kind == "eof":
            exc = cls(message)
            exc.filename = filename
        else:
            exc = cls(code, message, filename) if filename else cls(code, message)
        exc.offset = attrs.get("offset")
        exc.length = attrs.get("length")
        for key in ("file_size", "code"):
            if key in attrs:
                setattr(exc, key, attrs[key])
        return exc
    if kind == "integrity":
        exc = IntegrityError(_errno.EIO, message, attrs.get("filename"))
        exc.args = (message,)
        for key, value in attrs.items():
            setattr(exc, key, value)
        return exc
    if kind == "remote":
        exc = RemoteError(_errno.EIO, message, attrs.get("url"))
        exc.args = (message,)
        for key in ("status", "url", "credentials", "offset", "length"):
            setattr(exc, key, attrs.get(key))
        return exc
    cls = {
        "format": FormatError,
        "checkpoint": CheckpointError,
        "checkpoint_io": CheckpointIOError,
        "checkpoint_changed": CheckpointChangedError,
        "settings": SettingsError,
        "usage": UsageError,
        "cuda": CudaError,
    }.get(kind, Error)
    exc = cls(message)
    for key, value in attrs.items():
        setattr(exc, key, value)
    return exc


for _cls in (Error, UsageError, SettingsError, FormatError, ChunkError, FileError,
             EndOfFileError, CuFileError, CudaError, RemoteError, CheckpointError, CheckpointIOError,
             CheckpointChangedError, IntegrityError):
    _cls.__module__ = "ferry"
del _cls
