"""The layout of one tensor record in a DCP ``.distcp`` file: the ``torch.save`` archive that
torch's FileSystemWriter writes for each tensor (an uncompressed zip: ``data.pkl`` with the
tensor's dtype, shape and strides, a few small records, the storage bytes as ``data/0`` and the
central directory).

ferry writes the storage bytes itself, straight from the tensor's memory (GPU or host), and
lets torch write everything around them: ``torch.save`` under ``torch.serialization.skip_data``
into a sink that keeps the small records and skips the storage, which gives the archive's bytes
before (``head``) and after (``tail``) the storage. The storage record's CRC-32 is then left
unset, as torch writes it with ``set_crc32_options(False)``: torch.load does not check it.

Reading goes the other way: the head and tail of a record (the storage is not read) parsed by
torch.load onto the meta device give the storage's offset in the record and the tensor's
dtype, shape, strides and storage offset, so the bytes a read item needs can be read straight
into its destination.
"""

from __future__ import annotations

import io
from typing import Any, NamedTuple

import torch

from .._errors import CheckpointError

# The archive around a tensor's storage: data.pkl (~200 bytes), four small records and the
# central directory of seven entries; under 2 KiB for any tensor (zip64 entries included).
HEAD_BYTES = 4096
TAIL_BYTES = 4096


def checkpoint_error(filename: str, tensor: str | None, reason: str) -> CheckpointError:
    e = CheckpointError("%s: %s%s" % (filename, ("tensor %r: " % tensor) if tensor else "", reason))
    e.filename, e.tensor, e.reason = filename, tensor, reason
    return e


class _Sink(io.RawIOBase):
    """A seekable sink that keeps what is written and skips what is seeked over."""

    def __init__(self) -> None:
        self.pieces: list = []
        self.pos = 0
        self.end = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self.pieces.append((self.pos, data))
        self.pos += len(data)
        self.end = max(self.end, self.pos)
        return len(data)

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = pos if whence == 0 else (self.pos + pos if whence == 1 else self.end + pos)
        return self.pos


class Skeleton(NamedTuple):
    """A tensor record without its storage: ``head`` + the storage bytes + ``tail``."""

    head: bytes
    tail: bytes
    nbytes: int

    @property
    def length(self) -> int:
        return len(self.head) + self.nbytes + len(self.tail)


def skeleton(shape: tuple, dtype: torch.dtype) -> Skeleton:
    """The record torch.save writes for a contiguous CPU tensor of ``shape`` and ``dtype``,
    without its storage. The placeholder tensor is never touched (its pages are never
    faulted in)."""
    placeholder = torch.empty(shape, dtype=dtype)
    nbytes = placeholder.untyped_storage().nbytes()
    sink = _Sink()
    with torch.serialization.skip_data():
        torch.save(placeholder, sink)
    image = bytearray(sink.end)
    written = bytearray(sink.end)  # 1 where a byte was written
    for pos, data in sink.pieces:
        image[pos:pos + len(data)] = data
        written[pos:pos + len(data)] = b"\x01" * len(data)
    start = written.find(b"\x00") if nbytes else len(image)
    if nbytes and (start < 0 or written[start:start + nbytes].count(b"\x00") != nbytes
                   or b"\x00" in written[start + nbytes:]):
        raise RuntimeError("torch.save wrote a tensor record ferry does not understand "
                           "(torch %s)" % torch.__version__)
    if not nbytes:
        return Skeleton(bytes(image), b"", 0)
    return Skeleton(bytes(image[:start]), bytes(image[start + nbytes:]), nbytes)


class _Partial(io.RawIOBase):
    """A record of ``length`` bytes of which only the head and the tail were read; the storage
    between them reads as zeros (torch.load onto the meta device never reads it)."""

    def __init__(self, head: bytes, tail: bytes, length: int) -> None:
        self.head, self.tail, self.length = head, tail, length
        self.tail_at = length - len(tail)
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = pos if whence == 0 else (self.pos + pos if whence == 1 else self.length + pos)
        return self.pos

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = max(0, min(len(view), self.length - self.pos))
        out = bytearray(n)
        for begin, data in ((0, self.head), (self.tail_at, self.tail)):
            lo, hi = max(self.pos, begin), min(self.pos + n, begin + len(data))
            if lo < hi:
                out[lo - self.pos:hi - self.pos] = data[lo - begin:hi - begin]
        view[:n] = out
        self.pos += n
        return n


class Layout(NamedTuple):
    """Where a record's tensor lies: the storage's first byte in the record, and the tensor
    (on the meta device) with its dtype, shape, strides and storage offset."""

    data_offset: int
    storage_bytes: int
    tensor: torch.Tensor


def parse(head: bytes, tail: bytes, length: int, filename: str, tensor_name: str) -> Layout:
    """The layout of a tensor record of ``length`` bytes from its first and last bytes."""
    try:
        f = _Partial(head, tail, length)
        reader = torch._C.PyTorchFileReader(f)
        records = [r for r in reader.get_all_records() if r.startswith("data/")]
        if len(records) != 1:
            raise ValueError("%d storage records (one expected)" % len(records))
        data_offset = reader.get_record_offset(records[0])
        f.seek(0)
        meta = torch.load(f, map_location="meta", weights_only=True)
    except Exception as e:  # torch reports a bad archive as RuntimeError or an unpickling error
        raise checkpoint_error(filename, tensor_name, "not a torch.save tensor record (%s)" %
                               str(e).splitlines()[0]) from e
    if not isinstance(meta, torch.Tensor):
        raise checkpoint_error(filename, tensor_name, "the record holds a %s, not a tensor" %
                               type(meta).__name__)
    storage_bytes = meta.untyped_storage().nbytes()
    data_end = data_offset + storage_bytes
    if data_offset > len(head) or (data_end < length - len(tail) and length > len(head)):
        raise checkpoint_error(filename, tensor_name, "the record's layout is not understood")
    if data_offset + storage_bytes > length:
        raise checkpoint_error(filename, tensor_name, "the storage (%d bytes at %d) overruns the "
                               "record (%d bytes)" % (storage_bytes, data_offset, length))
    return Layout(data_offset, storage_bytes, meta)


def tensor_of(record: torch.Tensor, layout: Layout) -> torch.Tensor:
    """The tensor of a record held in memory (``record``: its bytes, uint8, host or GPU), as a
    view of those bytes."""
    meta = layout.tensor
    if not layout.storage_bytes:
        return torch.empty(meta.size(), dtype=meta.dtype, device=record.device)
    base = record[layout.data_offset:layout.data_offset + layout.storage_bytes].view(meta.dtype)
    # as_strided counts from the start of the underlying storage, not of the view
    return base.as_strided(meta.size(), meta.stride(), base.storage_offset() + meta.storage_offset())


class LayoutCache:
    """Layouts of records already parsed, by the bytes in front of their storage.

    Everything in front of a record's storage (the local headers, data.pkl and the small
    records; torch's zip writer sets the data-descriptor flag, so no CRC or size of the storage
    is among them) decides where the storage starts and the tensor's dtype, shape and strides:
    a record whose first ``data_offset`` bytes equal a parsed record's has the same layout.
    A checkpoint's tensors of one shape share one parse (about 0.8 ms each on the CPU machine,
    most of it torch's weights-only unpickler)."""

    def __init__(self) -> None:
        self.by_offset: dict = {}   # data_offset -> {head[:data_offset]: Layout}

    def layout(self, head: bytes, tail: Any, length: int, filename: str, tensor_name: str) -> Layout:
        """The layout of a record from its ``head``; ``tail``: its last bytes, or a function
        that reads them, called only when no record parsed before has the same head."""
        for offset, known in self.by_offset.items():
            hit = known.get(head[:offset]) if offset <= len(head) else None
            if hit is not None and hit.data_offset + hit.storage_bytes <= length:
                return hit
        got = parse(head, tail() if callable(tail) else tail, length, filename, tensor_name)
        if got.data_offset <= len(head):
            self.by_offset.setdefault(got.data_offset, {})[head[:got.data_offset]] = got
        return got

