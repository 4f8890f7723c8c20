"""ferry.zarr.Store: a zarr-python 3 store over a local directory, read and written by ferry,
or over a remote prefix (``s3://bucket/prefix``, ``https://host/path``), read by ferry.

Chunk bytes land straight in the memory zarr asks for: GPU memory when the buffer prototype is
zarr's GPU prototype (``zarr.config.enable_gpu()``), host memory otherwise. The requests of one
read (``get_partial_values``, ``_get_many``, and ferry's codec pipeline, which hands a whole
selection over at once) form one plan: every file opened, one allocation carved into aligned
views, every range started as a ferry request at once so that ferry's pool runs them in parallel,
then awaited together. zarr's own LocalStore reads one chunk per call, each in full, on
Python's thread pool.

Writes go through ferry too: a temporary file in the key's directory, renamed over the key, so
a reader never sees half a chunk. A remote store is read-only and cannot be listed (an HTTP
prefix has no listing): arrays are opened by their path, as zarr's ``open_array`` does.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)
from zarr.abc.store import (
    Store as _ZarrStore,
)

from .. import _ferry
from .._convert import optional_module
from .._errors import RemoteError, UsageError, _file_error_class

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from zarr.core.buffer import Buffer, BufferPrototype

__all__ = ["DeviceRange", "PendingReads", "ReadRequest", "Store", "guard_gpu_buffers", "is_gpu_prototype"]

# Views of one batch start at this alignment: nvCOMP's batched decoders and the CRC kernel want
# 16-byte aligned inputs, and 256 bytes keeps each view on its own cache lines.
_ALIGN = 256


_NO_CUPY = ("zarr.config.enable_gpu() asks for chunks in CuPy arrays, and CuPy cannot be "
            "imported here: install CuPy (cupy-cuda12x or cupy-cuda13x), or read "
            "without enable_gpu() to get numpy arrays")


def is_gpu_prototype(prototype: BufferPrototype) -> bool:
    """Whether zarr asks for buffers in GPU memory (zarr's GPU buffer prototype). Raises
    UsageError when it does and CuPy cannot be imported: zarr's GPU buffers are CuPy arrays,
    and without CuPy zarr itself fails later with "'NoneType' object has no attribute"."""
    try:
        from zarr.core.buffer import gpu
    except ImportError:  # pragma: no cover - zarr without its GPU module
        return False
    if not issubclass(prototype.buffer, gpu.Buffer):
        return False
    if optional_module("cupy") is None:
        raise UsageError(_NO_CUPY)
    return True


def guard_gpu_buffers() -> None:
    """Makes zarr's GPU buffer constructors that reach CuPy before checking for it raise
    is_gpu_prototype's error when CuPy is missing, instead of zarr's AttributeError ("'NoneType'
    object has no attribute 'empty'"). An array opened outside ``enable_gpu()`` and read inside
    it gets there first: zarr allocates the result before the store or the pipeline hears of
    the read, so ferry's checks at open and in the pipeline come too late. With CuPy present
    the constructors run as they are. Idempotent."""
    try:
        from zarr.core.buffer import gpu
    except ImportError:  # pragma: no cover - zarr without its GPU module
        return

    def guard(cls: type, name: str) -> None:
        method = cls.__dict__.get(name)
        if not isinstance(method, classmethod) or getattr(method.__func__, "_ferry_guard", False):
            return
        original = method.__func__

        def guarded(klass: type, *args: Any, **kwargs: Any) -> Any:
            if gpu.cp is None:
                raise UsageError(_NO_CUPY)
            return original(klass, *args, **kwargs)

        guarded._ferry_guard = True  # type: ignore[attr-defined]
        guarded.__name__ = original.__name__
        guarded.__qualname__ = original.__qualname__
        guarded.__doc__ = original.__doc__
        setattr(cls, name, classmethod(guarded))

    for name in ("create", "empty", "from_numpy_array"):
        guard(gpu.NDBuffer, name)
    guard(gpu.Buffer, "create_zero_length")


def check_gpu_buffers() -> None:
    """is_gpu_prototype's error for zarr's configured buffers, where ferry first meets an array
    (its metadata read, the pipeline made for it): zarr allocates a read's GPU output before
    any chunk is asked for, so without CuPy a read under enable_gpu() fails inside zarr first."""
    from zarr.core.buffer import default_buffer_prototype

    is_gpu_prototype(default_buffer_prototype())


@dataclass(frozen=True)
class ReadRequest:
    """One byte range of one key: None reads the whole value. `into`, a contiguous 1-D uint8
    array (CuPy on the GPU), receives the bytes instead of the plan's block; the value must
    then fill it exactly."""

    key: str
    byte_range: ByteRequest | None = None
    into: Any = None


def _span(size: int, byte_range: ByteRequest | None) -> tuple[int, int]:
    """[start, end) of `byte_range` in a value of `size` bytes, clamped to it."""
    if byte_range is None:
        return 0, size
    if isinstance(byte_range, RangeByteRequest):
        if byte_range.start < 0 or byte_range.end < byte_range.start:
            raise UsageError("bad byte range %r" % (byte_range,))
        return min(byte_range.start, size), min(byte_range.end, size)
    if isinstance(byte_range, OffsetByteRequest):
        if byte_range.offset < 0:
            raise UsageError("bad byte range %r" % (byte_range,))
        return min(byte_range.offset, size), size
    if isinstance(byte_range, SuffixByteRequest):
        if byte_range.suffix < 0:
            raise UsageError("bad byte range %r" % (byte_range,))
        return max(size - byte_range.suffix, 0), size
    raise UsageError("unknown byte range %r" % (byte_range,))


_REMOTE = re.compile(r"^(s3|https?)://", re.IGNORECASE)


def _shown(url: str) -> str:
    """A URL as messages show it: credentials in it replaced by ***."""
    return re.sub(r"^([a-zA-Z0-9+.-]+://)[^/@]*@", r"\1***@", url)


class Store(_ZarrStore):
    """A zarr store over the directory `root`, whose reads and writes go through ferry; or,
    read-only, over a remote prefix (``s3://bucket/prefix``, ``http(s)://host/path``) whose
    objects ferry reads (ranged GETs, credentials as for every ferry URL: docs/remote.md).

    Use it wherever zarr takes a store::

        z = zarr.open_array(store=ferry.zarr.Store("data.zarr"), mode="r")
        z = zarr.open_array(store=ferry.zarr.Store("s3://bucket/data.zarr"), mode="r")

    Keys are paths below `root` ("/"-separated). Thread safety: as zarr's stores, any method
    may run concurrently with any other; a value being replaced is never seen half written.
    """

    supports_partial_writes: bool = False  # type: ignore[assignment]

    root: Path | str  # a str: a remote prefix, without its trailing "/"

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False) -> None:
        text = root if isinstance(root, str) else os.fspath(root)
        self._remote = bool(_REMOTE.match(text))
        if self._remote:  # read-only whatever is asked: a write raises zarr's read-only error
            if "?" in text or "#" in text:
                raise UsageError(
                    "a remote Zarr store's root takes no query string or fragment: %s"
                    % _shown(text.split("?")[0].split("#")[0])
                )
            super().__init__(read_only=True)
            self.root = text.rstrip("/")
            self._root_text = self.root
            self._root_prefix = self.root + "/"
            return
        super().__init__(read_only=read_only)
        self.root = Path(root)
        text = os.fspath(self.root)
        self._root_text = text
        self._root_prefix = text if text.endswith("/") else text + "/"  # chunk paths join to it

    @property
    def supports_writes(self) -> bool:  # type: ignore[override]
        return not self._remote

    @property
    def supports_deletes(self) -> bool:  # type: ignore[override]
        return not self._remote

    @property
    def supports_listing(self) -> bool:  # type: ignore[override]
        return not self._remote

    def with_read_only(self, read_only: bool = False) -> Store:
        return type(self)(self.root, read_only=read_only)

    async def _open(self) -> None:
        if self._remote:
            pass  # nothing to check before the first object is asked for
        elif not self.read_only:
            self.root.mkdir(parents=True, exist_ok=True)
        elif not self.root.is_dir():
            raise _file_error_class(errno.ENOENT)(
                errno.ENOENT, "the Zarr store's root is not a directory", str(self.root)
            )
        await super()._open()

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Store)
            and self.root == other.root
            and self.read_only == other.read_only
        )

    def __hash__(self) -> int:
        return hash((type(self), self.root, self.read_only))

    def __str__(self) -> str:
        if self._remote:
            return _shown(str(self.root))
        return "ferry://%s" % Path(self.root).as_posix()

    def __repr__(self) -> str:
        shown = _shown(str(self.root)) if self._remote else str(self.root)
        return "ferry.zarr.Store(%r)" % shown

    def path_of(self, key: str) -> Path:
        """The file that holds `key`. Keys may not leave the root."""
        if self._remote:
            raise UsageError("a remote Zarr store (%s) has no local paths" % self)
        return Path(self._file_of(key))

    def _file_of(self, key: str) -> str:
        # Plain strings: a read of a few hundred chunks opens as many files, and pathlib's
        # joins cost several times the string's (3.5 against 0.4 us a key, CPU machine).
        parts = [p for p in key.split("/") if p not in ("", ".")]
        if ".." in parts:
            shown = _shown(str(self.root)) if self._remote else self.root
            raise UsageError("Zarr key %r leaves the store's root %s" % (key, shown))
        if self._remote and not self._root_text.lower().startswith("s3://"):
            # http(s) paths are sent as written: a key's characters are escaped here (s3://
            # keys are encoded when ferry signs the request)
            parts = [urllib.parse.quote(p, safe="") for p in parts]
        return self._root_prefix + "/".join(parts) if parts else self._root_text

    # -- reads --------------------------------------------------------------------------------

    async def get(
        self,
        key: str,
        prototype: BufferPrototype,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        if not self._is_open:
            await self._open()
        if _is_metadata(key):
            check_gpu_buffers()
        if _is_metadata(key) and is_gpu_prototype(prototype):
            # zarr parses its metadata documents on the host: read into host memory, they
            # reach the GPU buffer zarr asks for in one small copy, instead of a GPU read and
            # a copy back for the parse.
            view = (await self.read_many_raw([ReadRequest(key, byte_range)], on_gpu=False))[0]
            return None if view is None else prototype.buffer.from_bytes(view.tobytes())
        return (await self.read_many([ReadRequest(key, byte_range)], prototype))[0]

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        return await self.read_many([ReadRequest(k, r) for k, r in key_ranges], prototype)

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        # One plan for each prototype among the requests (zarr passes one).
        by_proto: dict[int, tuple[BufferPrototype, list[ReadRequest]]] = {}
        for key, prototype, byte_range in requests:
            by_proto.setdefault(id(prototype), (prototype, []))[1].append(
                ReadRequest(key, byte_range)
            )
        for prototype, reqs in by_proto.values():
            for req, buf in zip(reqs, await self.read_many(reqs, prototype)):
                yield req.key, buf

    async def read_many(
        self, requests: Sequence[ReadRequest], prototype: BufferPrototype
    ) -> list[Buffer | None]:
        """Reads every request in one plan; None for a key that does not exist.

        Each file is opened once however many ranges of it are asked for; the ranges land in
        views of one allocation (GPU memory for zarr's GPU prototype) and run in parallel.
        """
        views = await self.read_many_raw(requests, on_gpu=is_gpu_prototype(prototype))
        return [None if v is None else prototype.buffer.from_array_like(v) for v in views]

    async def read_many_raw(self, requests: Sequence[ReadRequest], *, on_gpu: bool) -> list[Any]:
        """As read_many, returning 1-D uint8 arrays (CuPy on the GPU, else numpy) or None."""
        return await self.start_reads(requests, on_gpu=on_gpu).wait()

    def start_reads(self, requests: Sequence[ReadRequest], *, on_gpu: bool) -> PendingReads:
        """Starts every request as one plan and returns at once; ``await .wait()`` for the
        1-D uint8 arrays (CuPy on the GPU, else numpy), None for keys that do not exist."""
        files: dict[str, Any] = {}
        try:
            spans: list[tuple[int, int] | None] = []
            for req in requests:
                f = files.get(req.key, _MISSING)
                if f is _MISSING:
                    f = files[req.key] = self._open_for_read(req.key)
                spans.append(None if f is None else _span(f.size(), req.byte_range))
            offsets: list[int] = []
            total = 0
            for req, span in zip(requests, spans):
                offsets.append(total)
                if span is None:
                    continue
                if req.into is not None:
                    if int(req.into.nbytes) != span[1] - span[0]:
                        from ._kernels import chunk_error

                        raise chunk_error(
                            req.key,
                            "bytes",
                            "the chunk holds %d bytes, %d expected"
                            % (span[1] - span[0], int(req.into.nbytes)),
                        )
                    continue
                total += -(-(span[1] - span[0]) // _ALIGN) * _ALIGN
            block = _allocate(total, on_gpu)
            if on_gpu:
                # The reads below are ordered with no stream; the block may be memory that work
                # still queued on the current stream used last (CuPy's pool reuses it in stream
                # order), so that work finishes first.
                import cupy

                cupy.cuda.get_current_stream().synchronize()
            out: list[Any] = []
            pieces = []
            nbytes = 0
            for req, span, off in zip(requests, spans, offsets):
                if span is None:
                    out.append(None)
                    continue
                view = req.into if req.into is not None else block[off : off + span[1] - span[0]]
                out.append(view)
                if span[1] > span[0]:
                    if on_gpu and not isinstance(view, DeviceRange):
                        view = _Unordered(view)
                    pieces.append((files[req.key], span[0], view))
                    nbytes += span[1] - span[0]
            # One batch for every chunk of the read: on the GPU their bytes share the stream
            # lanes' buffers, so chunks of a few MiB move like one large read.
            pending = [_ferry.read_batch(pieces)] if pieces else []
        except BaseException:
            for f in files.values():
                if f is not None:
                    f.close()
            raise
        _count("plans")
        _count("requests", len(pieces))
        _count("bytes_read", nbytes)
        present = [
            i
            for i, (r, span) in enumerate(zip(requests, spans))
            if span is not None and r.into is None
        ]
        return PendingReads(
            out,
            pending,
            [f for f in files.values() if f is not None],
            block,
            np.array([offsets[i] for i in present], dtype=np.int64),
            np.array([_length(spans[i]) for i in present], dtype=np.int64),
            present,
        )

    def _open_for_read(self, key: str) -> Any:
        try:
            return _ferry.File(self._file_of(key), "r")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except RemoteError as e:  # an object that is not there; any other status is an error
            if e.status == 404:
                return None
            raise

    async def exists(self, key: str) -> bool:
        if self._remote:
            f = self._open_for_read(key)
            if f is not None:
                f.close()
            return f is not None
        return self.path_of(key).is_file()

    async def getsize(self, key: str) -> int:
        if self._remote:
            f = self._open_for_read(key)
            if f is None:
                raise FileNotFoundError(key)
            try:
                return int(f.size())
            finally:
                f.close()
        try:
            return self.path_of(key).stat().st_size
        except OSError as e:
            raise FileNotFoundError(key) from e

    # -- writes -------------------------------------------------------------------------------

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        if not self._is_open:
            await self._open()
        await self._write(key, value.as_array_like(), exclusive=False)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        self._check_writable()
        await self._write(key, value.as_array_like(), exclusive=True)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        self._check_writable()
        await asyncio.gather(
            *(self._write(k, v.as_array_like(), exclusive=False) for k, v in values)
        )

    async def _write(self, key: str, data: Any, *, exclusive: bool) -> None:
        path = self.path_of(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        if exclusive and path.exists():
            return
        tmp = path.with_name(".%s.%s.partial" % (path.name, uuid.uuid4().hex))
        try:
            with _ferry.File(tmp, "w") as f:
                if _nbytes(data):
                    await f.pwrite(data)
            if exclusive:
                try:
                    os.link(tmp, path)  # fails when another writer got there first
                except FileExistsError:
                    pass
            else:
                os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()

    async def delete(self, key: str) -> None:
        self._check_writable()
        path = self.path_of(key)
        if path.is_dir():
            import shutil

            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)

    async def delete_dir(self, prefix: str) -> None:
        self._check_writable()
        path = self.path_of(prefix)
        if path.is_dir():
            import shutil

            shutil.rmtree(path)

    async def clear(self) -> None:
        self._check_writable()
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.is_dir():
                    import shutil

                    shutil.rmtree(child)
                else:
                    child.unlink()

    # -- listing ------------------------------------------------------------------------------

    def _check_listable(self) -> None:
        if self._remote:
            raise NotImplementedError(
                "a remote Zarr store (%s) cannot be listed: open its arrays by path" % self
            )

    async def list(self) -> AsyncIterator[str]:
        self._check_listable()
        for key in _walk(Path(self.root)):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        self._check_listable()
        for key in _walk(Path(self.root)):
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        self._check_listable()
        base = self.path_of(prefix) if prefix.strip("/") else Path(self.root)
        try:
            entries = sorted(os.scandir(base), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if not entry.name.endswith(".partial"):
                yield entry.name


_MISSING = object()


def _walk(root: Path) -> list[str]:
    """Every key below `root`, sorted (temporary files of writes in flight left out)."""
    keys: list[str] = []
    for dirpath, _dirs, names in os.walk(root):
        rel = Path(dirpath).relative_to(root).as_posix()
        for name in names:
            if name.endswith(".partial"):
                continue
            keys.append(name if rel == "." else rel + "/" + name)
    return sorted(keys)


class _Unordered:
    """GPU memory offered to ferry through the CUDA array interface with no stream: the reads
    into it need no stream order (start_reads synchronized first, and the results are used only
    after the futures complete), so they take the engine's parallel path, GPUDirect Storage
    included, rather than the stream lanes that serialize requests on one stream. (CuPy's own
    DLPack and interface exports name a stream.)"""

    __slots__ = ("__cuda_array_interface__", "_owner")

    def __init__(self, view: Any) -> None:
        self._owner = view
        self.__cuda_array_interface__ = {
            "shape": (int(view.size),),
            "typestr": "|u1",
            "data": (int(view.data.ptr), False),
            "strides": None,
            "stream": None,
            "version": 3,
        }


class DeviceRange:
    """`nbytes` bytes of GPU memory at `ptr`, inside `owner` (a CuPy array kept alive while
    the reads run): a request's destination offered as _Unordered offers a view, made
    without a CuPy call."""

    __slots__ = ("__cuda_array_interface__", "_owner", "nbytes")

    def __init__(self, owner: Any, ptr: int, nbytes: int) -> None:
        self._owner = owner
        self.nbytes = nbytes
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "strides": None,
            "stream": None,
            "version": 3,
        }


class PendingReads:
    """The reads of one plan in flight. The files close once they are done.

    After wait(): `block` holds every value read, request present[j] at
    block[offsets[j] : offsets[j] + sizes[j]] (requests for missing keys, and those read into
    their own `into`, are left out)."""

    def __init__(
        self,
        views: list[Any],
        futures: list[Any],
        files: list[Any],
        block: Any,
        offsets: np.ndarray,
        sizes: np.ndarray,
        present: list[int],
    ) -> None:
        self._views = views
        self._futures = futures
        self._files = files
        self.block = block
        self.offsets = offsets
        self.sizes = sizes
        self.present = present

    async def wait(self) -> list[Any]:
        # One hop to a worker thread for the whole plan: awaiting each ferry.Future would take
        # one hop per request.
        if self._futures and not all(f.done() for f in self._futures):
            await asyncio.get_running_loop().run_in_executor(None, self._finish)
        else:
            self._finish()
        return self._views

    def _finish(self) -> None:
        error: BaseException | None = None
        for fut in self._futures:  # every request completes before the files close
            try:
                fut.result()
            except BaseException as e:
                error = error or e
        for f in self._files:
            f.close()
        self._files = []
        if error is not None:
            raise error


def _length(span: tuple[int, int] | None) -> int:
    assert span is not None
    return span[1] - span[0]


_METADATA_NAMES = frozenset(("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"))


def _is_metadata(key: str) -> bool:
    """Whether `key` names one of zarr's metadata documents (v3 or v2)."""
    return key.rpartition("/")[2] in _METADATA_NAMES


def _count(name: str, n: int = 1) -> None:
    from ._kernels import count

    count(name, n)


def _nbytes(data: Any) -> int:
    return int(data.nbytes) if hasattr(data, "nbytes") else len(data)


def _allocate(nbytes: int, on_gpu: bool) -> Any:
    if on_gpu:
        import cupy

        return cupy.empty(max(nbytes, 1), dtype=cupy.uint8)
    return np.empty(max(nbytes, 1), dtype=np.uint8)
