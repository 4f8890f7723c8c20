"""The codecs' work on batches of chunks, on the GPU (CuPy, nvCOMP) and on the host (numpy,
numcodecs, google-crc32c), and the counters that say which ran.

Every function takes a list of 1-D uint8 arrays (one per chunk, CuPy or numpy) and the chunks'
keys, so that a chunk that does not decode raises a ChunkError naming its key.

GPU pieces:
- zstd and gzip: nvCOMP's batched decoders (PyPI ``nvidia-nvcomp-cu13``, module
  ``nvidia.nvcomp``, imported on first use, RAW bitstreams: the standard zstd frame and gzip
  member formats that numcodecs writes). Without nvCOMP, or for a chunk nvCOMP refuses, ferry
  decodes on the host instead: said once as a warning, and counted in ``stats()``. Every
  chunk's frame is checked first (_frames: one kernel, a thread per chunk), since nvCOMP
  assumes well-formed input; a chunk that fails is decoded on the host, never by nvCOMP.
- crc32c: a two-kernel CRC (each 4 KiB segment of every chunk on its own thread, then one thread
  per chunk folds the segment CRCs with a precomputed "advance by 4 KiB of zeros" operator), so a
  16 MiB chunk uses 4096 threads instead of one.
- byte order: a reversed view of each element's bytes, copied by CuPy on the device.
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _frames as frames
from .._errors import ChunkError


@dataclass
class Batch:
    """Chunks as byte ranges of one 1-D uint8 block (CuPy on the GPU, numpy on the host):
    chunk i is block[offsets[i] : offsets[i] + sizes[i]]. key_of(i) names it in errors."""

    block: Any
    offsets: np.ndarray
    sizes: np.ndarray
    key_of: Callable[[int], str]
    on_gpu: bool

    def __len__(self) -> int:
        return len(self.offsets)

    def view(self, i: int) -> Any:
        o = int(self.offsets[i])
        return self.block[o : o + int(self.sizes[i])]

    def is_dense(self, stride: int) -> bool:
        """Whether chunk i starts at i * stride."""
        return bool(
            np.array_equal(self.offsets, np.arange(len(self.offsets), dtype=np.int64) * stride)
        )


__all__ = [
    "Batch",
    "stats",
    "reset_stats",
    "count",
    "fallback",
    "decompress",
    "compress",
    "crc32c",
    "SEGMENT",
]

# -- counters -------------------------------------------------------------------------------

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_fallbacks: Counter[str] = Counter()
_warned: set[str] = set()


def count(name: str, n: int = 1) -> None:
    with _lock:
        _counts[name] += n


def fallback(reason: str, n: int = 1) -> None:
    """Counts `n` chunks read (or written) for the GPU but handled on the host for `reason`;
    warns once per reason."""
    with _lock:
        _fallbacks[reason] += n
        first = reason not in _warned
        _warned.add(reason)
    if first:
        warnings.warn("ferry.zarr: %s; decoding on the CPU instead" % reason, RuntimeWarning, 3)


def stats() -> dict[str, Any]:
    """What ferry's Zarr pipeline did in this process.

    ``chunks_gpu`` / ``chunks_cpu``: chunks read for the device / the host and decoded there,
    apart from the steps that ``cpu_fallbacks`` counts;
    ``encoded_gpu`` / ``encoded_cpu``: the same for writes; ``plans``: batched reads issued;
    ``requests``: byte ranges they read; ``bytes_read``; ``cpu_fallbacks``: reason -> chunks
    read or written for the GPU for which that step (a checksum, a decompression, a
    compression) ran on the host; ``chunks_placed_in_one_kernel``: decoded whole chunks that
    one kernel a group copied into a GPU result (the others are copied one at a time).
    """
    with _lock:
        out: dict[str, Any] = {
            k: _counts.get(k, 0)
            for k in (
                "plans",
                "requests",
                "bytes_read",
                "chunks_gpu",
                "chunks_cpu",
                "encoded_gpu",
                "encoded_cpu",
                "shard_indexes",
                "chunks_placed_in_one_kernel",
            )
        }
        out["cpu_fallbacks"] = dict(_fallbacks)
    return out


def reset_stats() -> None:
    with _lock:
        _counts.clear()
        _fallbacks.clear()


# -- nvCOMP ---------------------------------------------------------------------------------

_NVCOMP_NAMES = {"zstd": "Zstd", "gzip": "Gzip"}
_nvcomp: Any = None
_nvcomp_error: str | None = None


def nvcomp_module() -> Any:
    """nvidia.nvcomp, or None (the reason is in nvcomp_unavailable_reason())."""
    global _nvcomp, _nvcomp_error
    if _nvcomp is None and _nvcomp_error is None:
        try:
            from nvidia import nvcomp

            _nvcomp = nvcomp
        except Exception as e:  # missing wheel, or its libraries do not load
            _nvcomp_error = "nvCOMP is unavailable (pip install nvidia-nvcomp-cu13): %s" % e
    return _nvcomp


def nvcomp_unavailable_reason() -> str:
    nvcomp_module()
    return _nvcomp_error or ""


# nvCOMP codecs hold scratch state: one per thread, device and stream.
_codecs: dict[tuple[str, int, int, int], Any] = {}


def _nvcomp_codec(name: str, stream: int) -> Any:
    import cupy

    nvcomp = nvcomp_module()
    dev = cupy.cuda.runtime.getDevice()
    key = (name, dev, stream, threading.get_ident())
    codec = _codecs.get(key)
    if codec is None:
        codec = nvcomp.Codec(
            algorithm=_NVCOMP_NAMES[name],
            bitstream_kind=nvcomp.BitstreamKind.RAW,
            device_id=dev,
            cuda_stream=stream,
        )
        _codecs[key] = codec
    return codec


def _host_codec(name: str, level: int | None = None) -> Any:
    import numcodecs

    if name == "zstd":
        return numcodecs.Zstd(level=level or 0)
    return numcodecs.GZip(level=5 if level is None else level)


def _host_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        import os

        _pool = ThreadPoolExecutor(
            max_workers=min(32, os.cpu_count() or 4), thread_name_prefix="ferry-zarr"
        )
    return _pool


_pool: ThreadPoolExecutor | None = None


def _decode_host(name: str, data: Any, size: int, key: str) -> np.ndarray:
    try:
        raw = _host_codec(name).decode(np.ascontiguousarray(data))
    except Exception as e:
        raise _chunk_error(key, name, "the compressed data does not decode: %s" % e) from e
    out = np.frombuffer(raw, dtype=np.uint8)
    if out.size != size:
        raise _chunk_error(
            key, name, "decompressed to %d bytes where the chunk holds %d" % (out.size, size)
        )
    return out


def _chunk_error(key: str, field: str, reason: str) -> ChunkError:
    e = ChunkError("Zarr chunk %r: %s: %s" % (key, field, reason))
    e.key, e.field, e.reason = key, field, reason
    return e


def dense_stride(nbytes: int) -> int:
    """The distance between decoded chunks in a batch's output block: the chunk size itself
    when it keeps every chunk 16-byte aligned (nvCOMP's outputs), else rounded up to 256."""
    return nbytes if nbytes % 16 == 0 else -(-nbytes // 256) * 256


def decompress(name: str, batch: Batch, size: int) -> Batch:
    """Decompresses every chunk (zstd or gzip) to exactly `size` bytes, into a new block with
    chunk i at i * dense_stride(size)."""
    n = len(batch)
    stride = dense_stride(size)
    xp = _xp(batch.on_gpu)
    out = xp.empty(max(n * stride, 1), dtype=xp.uint8)
    offsets = np.arange(n, dtype=np.int64) * stride
    result = Batch(out, offsets, np.full(n, size, dtype=np.int64), batch.key_of, batch.on_gpu)
    if n == 0:
        return result
    if not batch.on_gpu:

        def one(i: int) -> None:
            o = int(offsets[i])
            out[o : o + size] = _decode_host(name, batch.view(i), size, batch.key_of(i))

        list(_host_pool().map(one, range(n)))
        return result
    import cupy

    if nvcomp_module() is None:
        fallback(nvcomp_unavailable_reason(), n)
        for i in range(n):
            o = int(offsets[i])
            out[o : o + size] = cupy.asarray(
                _decode_host(name, batch.view(i).get(), size, batch.key_of(i))
            )
        return result
    src = aligned(batch, 16)
    # nvCOMP assumes well-formed frames: a chunk whose framing does not check out never
    # reaches it, but is decoded on the host (a ChunkError naming it if it is corrupt).
    status = frame_status(name, src, size)
    for i in np.nonzero(status)[0].tolist():
        host = _decode_host(name, src.view(i).get(), size, batch.key_of(i))
        fallback(
            "a %s chunk's frame is not one the GPU decoder is given (%s)"
            % (name, frames.REASONS[int(status[i])])
        )
        o = int(offsets[i])
        out[o : o + size] = cupy.asarray(host)
    good = np.nonzero(status == 0)[0]
    if good.size == 0:
        return result
    stream = _enter_nvcomp_stream()
    try:
        try:
            _nvcomp_decode(
                name,
                src.block,
                src.offsets[good],
                src.sizes[good],
                out,
                offsets[good],
                size,
                stream,
            )
            return result
        except Exception:
            pass
        # One chunk spoiled the batch: decode them one by one to name it, falling back to the
        # host for chunks that nvCOMP refuses but the host decodes (counted).
        for i in good.tolist():
            try:
                _nvcomp_decode(
                    name,
                    src.block,
                    src.offsets[i : i + 1],
                    src.sizes[i : i + 1],
                    out,
                    offsets[i : i + 1],
                    size,
                    stream,
                )
            except Exception as e:
                host = _decode_host(
                    name, src.view(i).get(), size, batch.key_of(i)
                )  # ChunkError if corrupt
                fallback("nvCOMP refused a %s chunk (%s)" % (name, str(e).splitlines()[0][:120]))
                o = int(offsets[i])
                out[o : o + size] = cupy.asarray(host)
        return result
    finally:
        _leave_nvcomp_stream()


def frame_status(name: str, batch: Batch, size: int) -> np.ndarray:
    """The framing check of _frames for every chunk of the batch, each to decode to
    `size` bytes: an int32 numpy array, 0 where the chunk may go to nvCOMP. On the GPU one
    kernel (a thread per chunk) reads the chunks where they lie; on the host, or where the
    kernel does not compile, the Python reference does (on host copies)."""
    n = len(batch)
    if batch.on_gpu and n:
        import cupy

        try:
            kernel = _kernels().get_function("ferry_frame_check")
        except Exception as e:  # no NVRTC to compile the kernel
            fallback(
                "the frame-check kernel does not compile here (%s)" % str(e).splitlines()[0][:120],
                n,
            )
        else:
            where = cupy.asarray(np.concatenate((batch.offsets, batch.sizes)).astype(np.int64))
            status = cupy.empty(n, dtype=cupy.int32)
            threads = 128
            kernel(
                ((n + threads - 1) // threads,),
                (threads,),
                (
                    batch.block,
                    where,
                    np.int64(n),
                    np.int64(size),
                    np.int32(frames.CODECS[name]),
                    status,
                ),
            )
            return np.asarray(status.get(), dtype=np.int32)
    out = np.empty(n, dtype=np.int32)
    for i in range(n):
        v = batch.view(i)
        out[i] = frames.check(name, v.get() if batch.on_gpu else v, size)
    return out


_streams: dict[tuple[int, int], Any] = {}


def _enter_nvcomp_stream() -> int:
    """nvCOMP runs on a stream of its own (a blocking one, so that it is also ordered with
    the legacy default stream), made to wait for the work queued on the caller's stream."""
    import cupy

    key = (cupy.cuda.runtime.getDevice(), threading.get_ident())
    s = _streams.get(key)
    if s is None:
        s = _streams[key] = cupy.cuda.Stream(non_blocking=False)
    s.wait_event(cupy.cuda.get_current_stream().record())
    return int(s.ptr)


def _leave_nvcomp_stream() -> None:
    """The caller's stream waits for nvCOMP's work."""
    import cupy

    s = _streams[(cupy.cuda.runtime.getDevice(), threading.get_ident())]
    cupy.cuda.get_current_stream().wait_event(s.record())


def _nvcomp_decode(
    name: str,
    src: Any,
    src_off: np.ndarray,
    src_len: np.ndarray,
    dst: Any,
    dst_off: np.ndarray,
    size: int,
    stream: int,
) -> None:
    nvcomp = nvcomp_module()
    codec = _nvcomp_codec(name, stream)
    srcs = nvcomp.as_arrays(src, src_off.tolist(), src_len.tolist(), cuda_stream=stream)
    dsts = nvcomp.as_arrays(dst, dst_off.tolist(), [size] * len(dst_off), cuda_stream=stream)
    res = codec.decode(srcs, out=dsts)
    got = getattr(res, "buffer_sizes", None)
    if got is not None:
        got = np.asarray(got.get() if hasattr(got, "get") else list(got), dtype=np.int64)
        if got.size and not np.all(got == size):
            i = int(np.nonzero(got != size)[0][0])
            raise ValueError("chunk %d decoded to %d bytes, expected %d" % (i, got[i], size))


def aligned(batch: Batch, alignment: int) -> Batch:
    """The batch itself when every chunk starts at a multiple of `alignment`, else a copy
    whose chunks do (one gather kernel on the GPU)."""
    if not np.any(batch.offsets % alignment):
        return batch
    return gather(batch, None, alignment)


def gather(batch: Batch, stride: int | None, alignment: int = 256) -> Batch:
    """A copy of the batch with chunk i at i * stride (stride None: each chunk at the next
    multiple of `alignment`)."""
    n = len(batch)
    if stride is None:
        padded = -(-batch.sizes // alignment) * alignment
        offsets = np.concatenate(([0], np.cumsum(padded)[:-1])).astype(np.int64) if n else padded
        total = int(padded.sum())
    else:
        offsets = np.arange(n, dtype=np.int64) * stride
        total = n * stride
    xp = _xp(batch.on_gpu)
    out = xp.empty(max(total, 1), dtype=xp.uint8)
    if n and batch.on_gpu:
        try:
            _kernels().get_function("ferry_gather")(
                (n,),
                (256,),
                (
                    batch.block,
                    xp.asarray(batch.offsets),
                    out,
                    xp.asarray(offsets),
                    xp.asarray(batch.sizes.astype(np.int64)),
                ),
            )
            return Batch(out, offsets, batch.sizes.copy(), batch.key_of, batch.on_gpu)
        except Exception as e:
            fallback(
                "the gather kernel does not compile here (%s)" % str(e).splitlines()[0][:120], 0
            )
    for i in range(n):
        o = int(offsets[i])
        out[o : o + int(batch.sizes[i])] = batch.view(i)
    return Batch(out, offsets, batch.sizes.copy(), batch.key_of, batch.on_gpu)


_PLACE_SOURCE = r"""
// Chunks of one shape, packed in `src` (chunk k at k * rows * width), copied to their places in
// a C-contiguous array: row r of chunk src_chunk[c] lands at dst + dst_off[c] + row_off[r]. One
// block a row; `wide` (every width, offset and pointer a multiple of 8) copies 8 bytes a thread.
extern "C" __global__ void ferry_place_rows(
    const unsigned char* src, const long long* src_chunk, unsigned char* dst,
    const long long* dst_off, const long long* row_off, long long rows, long long width, int wide) {
  long long b = blockIdx.x;
  long long c = b / rows, r = b % rows;
  const unsigned char* s = src + (src_chunk[c] * rows + r) * width;
  unsigned char* d = dst + dst_off[c] + row_off[r];
  if (wide) {
    const unsigned long long* s8 = (const unsigned long long*)s;
    unsigned long long* d8 = (unsigned long long*)d;
    for (long long i = threadIdx.x; i < width / 8; i += blockDim.x) d8[i] = s8[i];
  } else {
    for (long long i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
  }
}
"""
_place_module: Any = None


def place_chunks(dense: Any, which: np.ndarray, out: Any, corners: np.ndarray) -> bool:
    """Copies chunk which[i] of `dense` (CuPy, shape (n, *chunk), C-contiguous) to the region of
    `out` (CuPy, C-contiguous, same dtype and rank as a chunk) that starts `corners[i]` bytes
    into it, all chunks in one kernel. False, with nothing copied, where the kernel does not
    compile here (the caller then copies chunk by chunk)."""
    import cupy

    n = len(corners)
    chunk = tuple(int(x) for x in dense.shape[1:])
    item = int(dense.itemsize)
    width = chunk[-1] * item
    rows = int(np.prod(chunk[:-1], dtype=np.int64))
    if n == 0 or rows == 0 or width == 0:
        return True
    if n * rows >= 2**31:  # one block a row: more rows than a grid holds
        return False
    # Byte offset of each row of a chunk in `out`: the leading indices times out's strides.
    strides = [int(x) for x in out.strides[:-1]]
    row_off = np.zeros(1, dtype=np.int64)
    for extent, stride in zip(chunk[:-1], strides):
        row_off = (row_off[:, None] + np.arange(extent, dtype=np.int64) * stride).ravel()
    corners = np.asarray(corners, dtype=np.int64)
    wide = (
        width % 8 == 0
        and not np.any(corners % 8)
        and not np.any(row_off % 8)
        and int(dense.data.ptr) % 8 == 0
        and int(out.data.ptr) % 8 == 0
    )
    global _place_module
    try:  # a module of its own: the other kernels do not depend on this one compiling
        if _place_module is None:
            _place_module = cupy.RawModule(code=_PLACE_SOURCE)
        fn = _place_module.get_function("ferry_place_rows")
    except Exception:  # no NVRTC to compile the kernel
        return False
    count("chunks_placed_in_one_kernel", n)
    fn(
        (n * rows,),
        (min(256, max(32, (width // 8 if wide else width))),),
        (
            dense,
            cupy.asarray(np.asarray(which, dtype=np.int64)),
            out,
            cupy.asarray(corners),
            cupy.asarray(row_off),
            np.int64(rows),
            np.int64(width),
            np.int32(1 if wide else 0),
        ),
    )
    return True


# Codecs whose GPU encoding produced something the host decoder does not read back: reason.
_gpu_encode_refused: dict[str, str] = {}


def compress(name: str, chunks: Sequence[Any], level: int | None, on_gpu: bool) -> list[Any]:
    """Compresses each chunk; on the GPU through nvCOMP where it can, else on the host.

    The first chunk of every GPU batch is decoded back on the host (numcodecs) and compared:
    a format nvCOMP writes that other readers cannot read must never reach a store. A mismatch
    turns GPU encoding of that codec off for the process (warned and counted)."""
    if not chunks:
        return []
    if on_gpu and nvcomp_module() is not None and name not in _gpu_encode_refused:
        outs = _compress_gpu(name, chunks)
        if outs is not None:
            count("encoded_gpu", len(chunks))
            return outs
    if on_gpu:
        reason = _gpu_encode_refused.get(name) or nvcomp_unavailable_reason()
        fallback(reason, len(chunks))
    codec = _host_codec(name, level)
    out = []
    for c in chunks:
        host = c.get() if on_gpu else np.ascontiguousarray(c)
        enc = np.frombuffer(codec.encode(host), dtype=np.uint8)
        out.append(_to(enc, on_gpu))
    count("encoded_cpu", len(chunks))
    return out


def _compress_gpu(name: str, chunks: Sequence[Any]) -> list[Any] | None:
    import cupy

    nvcomp = nvcomp_module()
    try:
        stream = _enter_nvcomp_stream()
        try:
            codec = _nvcomp_codec(name, stream)
            srcs = nvcomp.as_arrays([cupy.ascontiguousarray(c) for c in chunks], cuda_stream=stream)
            res = codec.encode(srcs)
        finally:
            _leave_nvcomp_stream()
        outs = [cupy.array(cupy.from_dlpack(a), copy=True).view(cupy.uint8).ravel() for a in res]
        back = _host_codec(name).decode(outs[0].get())
        if bytes(back) != chunks[0].get().tobytes():
            raise ValueError("the host does not decode nvCOMP's %s output back to the input" % name)
        return outs
    except Exception as e:
        _gpu_encode_refused[name] = "nvCOMP cannot encode %s here (%s)" % (
            name,
            str(e).splitlines()[0][:120],
        )
        return None


def _to(a: np.ndarray, on_gpu: bool) -> Any:
    if on_gpu:
        import cupy

        return cupy.asarray(a)
    return a


# -- crc32c ---------------------------------------------------------------------------------

SEGMENT = 4096  # bytes of a chunk that one thread of the segment kernel checksums
_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> np.uint32(1)) ^ np.uint32(_POLY), t >> np.uint32(1)).astype(
            np.uint32
        )
    return t


_TABLE = _table()


def advance_tables(length: int) -> np.ndarray:
    """4 x 256 tables of the linear map "run the raw CRC register over `length` zero bytes":
    A(s) = T0[s & 255] ^ T1[(s >> 8) & 255] ^ T2[(s >> 16) & 255] ^ T3[s >> 24]."""
    v = (
        np.arange(256, dtype=np.uint32)[None, :] << (np.arange(4, dtype=np.uint32)[:, None] * 8)
    ).astype(np.uint32)
    s = v.ravel().copy()
    for _ in range(length):  # a zero byte: s = T[s & 255] ^ (s >> 8)
        s = _TABLE[s & np.uint32(255)] ^ (s >> np.uint32(8))
    return s.reshape(4, 256)


_ADVANCE: np.ndarray | None = None


def _advance() -> np.ndarray:
    global _ADVANCE
    if _ADVANCE is None:
        _ADVANCE = advance_tables(SEGMENT)
    return _ADVANCE


def segments(
    sizes: Sequence[int] | np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The segment plan of chunks of `sizes`: each chunk is a short head segment (its first
    size % SEGMENT bytes, possibly empty, started from the CRC's initial value) followed by
    whole segments started from 0. Returns (chunk of each segment, start offset in the chunk,
    length, initial register, first segment of each chunk)."""
    sizes_a = np.asarray(sizes, dtype=np.int64)
    whole = sizes_a // SEGMENT
    head = sizes_a - whole * SEGMENT
    nseg = whole + 1
    first = np.concatenate(([0], np.cumsum(nseg)[:-1])).astype(np.int64)
    chunk = np.repeat(np.arange(len(sizes_a)), nseg)
    idx = np.arange(int(nseg.sum()), dtype=np.int64) - first[chunk]
    start = np.where(idx == 0, 0, head[chunk] + (idx - 1) * SEGMENT)
    length = np.where(idx == 0, head[chunk], SEGMENT).astype(np.uint32)
    init = np.where(idx == 0, np.uint32(0xFFFFFFFF), np.uint32(0)).astype(np.uint32)
    return chunk, start, length, init, first


def crc32c_segmented_host(chunks: Sequence[bytes]) -> list[int]:
    """The GPU algorithm run in numpy/Python (a check of its arithmetic, used by the tests)."""
    chunk, start, length, init, first = segments([len(c) for c in chunks])
    regs = []
    for c, st, ln, s in zip(chunk, start, length, init):
        data = chunks[c][st : st + ln]
        for b in data:
            s = _TABLE[(s ^ b) & 0xFF] ^ (s >> np.uint32(8))
        regs.append(np.uint32(s))
    adv = _advance()
    out = []
    counts = np.diff(np.concatenate((first, [len(regs)])))
    for f, n in zip(first, counts):
        s = regs[f]
        for i in range(1, n):
            s = (
                adv[0][s & 255]
                ^ adv[1][(s >> 8) & 255]
                ^ adv[2][(s >> 16) & 255]
                ^ adv[3][s >> 24]
                ^ regs[f + i]
            )
        out.append(int(~np.uint32(s)) & 0xFFFFFFFF)
    return out


_KERNELS = r"""
extern "C" __global__ void ferry_crc32c_segments(
    const unsigned long long* ptrs, const unsigned int* lens, const unsigned int* init,
    const unsigned int* table, unsigned int* out, long long n) {
  __shared__ unsigned int t[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) t[i] = table[i];
  __syncthreads();
  long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const unsigned char* p = (const unsigned char*)ptrs[s];
  unsigned int c = init[s];
  unsigned int len = lens[s];
  for (unsigned int i = 0; i < len; ++i) c = t[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  out[s] = c;
}

extern "C" __global__ void ferry_crc32c_fold(
    const unsigned int* seg, const long long* first, const long long* count,
    const unsigned int* adv, unsigned int* out, long long nchunks) {
  long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= nchunks) return;
  const unsigned int* r = seg + first[c];
  unsigned int s = r[0];
  for (long long i = 1; i < count[c]; ++i)
    s = adv[s & 0xffu] ^ adv[256 + ((s >> 8) & 0xffu)] ^ adv[512 + ((s >> 16) & 0xffu)] ^
        adv[768 + (s >> 24)] ^ r[i];
  out[c] = ~s;
}

extern "C" __global__ void ferry_gather(
    const unsigned char* src, const long long* src_off, unsigned char* dst,
    const long long* dst_off, const long long* len) {
  const unsigned char* s = src + src_off[blockIdx.x];
  unsigned char* d = dst + dst_off[blockIdx.x];
  long long n = len[blockIdx.x];
  for (long long i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}
"""

_module: Any = None


def _kernels() -> Any:
    global _module
    if _module is None:
        import cupy

        _module = cupy.RawModule(code=frames.SOURCE + _KERNELS)
    return _module


def crc32c(chunks: Sequence[Any], on_gpu: bool) -> Any:
    """CRC-32C of each 1-D uint8 array: a uint32 array (CuPy on the GPU, else numpy)."""
    if not chunks:
        return _xp(on_gpu).empty(0, dtype=np.uint32)
    if not on_gpu:
        import google_crc32c

        return np.array(
            [google_crc32c.value(np.ascontiguousarray(c)) for c in chunks], dtype=np.uint32
        )
    ptrs = np.array([c.data.ptr for c in chunks], dtype=np.uint64)
    sizes = np.array([int(c.size) for c in chunks], dtype=np.int64)
    return _crc32c_gpu(ptrs, sizes, lambda: [c.get() for c in chunks])


def _crc32c_gpu(bases: np.ndarray, sizes: np.ndarray, host: Callable[[], Sequence[Any]]) -> Any:
    import cupy

    try:
        mod = _kernels()
    except Exception as e:  # no NVRTC to compile the kernels
        fallback(
            "the CRC-32C kernels do not compile here (%s)" % str(e).splitlines()[0][:120],
            len(sizes),
        )
        return cupy.asarray(crc32c(list(host()), False))
    chunk, start, length, init, first = segments(sizes)
    ptrs = bases[chunk] + start.astype(np.uint64)
    nseg = len(ptrs)
    regs = cupy.empty(nseg, dtype=cupy.uint32)
    threads = 256
    mod.get_function("ferry_crc32c_segments")(
        ((nseg + threads - 1) // threads,),
        (threads,),
        (
            cupy.asarray(ptrs),
            cupy.asarray(length),
            cupy.asarray(init),
            cupy.asarray(_TABLE),
            regs,
            np.int64(nseg),
        ),
    )
    counts = np.diff(np.concatenate((first, [nseg]))).astype(np.int64)
    out = cupy.empty(len(sizes), dtype=cupy.uint32)
    mod.get_function("ferry_crc32c_fold")(
        ((len(sizes) + threads - 1) // threads,),
        (threads,),
        (
            regs,
            cupy.asarray(first),
            cupy.asarray(counts),
            cupy.asarray(_advance().ravel()),
            out,
            np.int64(len(sizes)),
        ),
    )
    return out


def verify_crc32c(batch: Batch) -> Batch:
    """Checks the trailing CRC-32C of each chunk; returns the batch without the checksums."""
    n = len(batch)
    short = np.nonzero(batch.sizes < 4)[0]
    if short.size:
        i = int(short[0])
        raise _chunk_error(
            batch.key_of(i),
            "crc32c",
            "the chunk is %d bytes, shorter than its checksum" % batch.sizes[i],
        )
    body = Batch(batch.block, batch.offsets, batch.sizes - 4, batch.key_of, batch.on_gpu)
    if n == 0:
        return body
    xp = _xp(batch.on_gpu)
    where = (batch.offsets + batch.sizes - 4)[:, None] + np.arange(4, dtype=np.int64)
    stored = xp.ascontiguousarray(batch.block[xp.asarray(where.ravel())]).view("<u4")
    if batch.on_gpu:
        base = np.uint64(batch.block.data.ptr)
        computed = _crc32c_gpu(
            base + body.offsets.astype(np.uint64),
            body.sizes,
            lambda: [body.view(i).get() for i in range(n)],
        )
        bad = xp.nonzero(stored != computed)[0].get()
    else:
        import google_crc32c

        computed = np.array(
            [google_crc32c.value(np.ascontiguousarray(body.view(i))) for i in range(n)],
            dtype=np.uint32,
        )
        bad = np.nonzero(stored != computed)[0]
    if bad.size:
        i = int(bad[0])
        raise _chunk_error(
            batch.key_of(i),
            "crc32c",
            "stored checksum %08x, computed %08x" % (int(stored[i]), int(computed[i])),
        )
    return body


def append_crc32c(chunks: Sequence[Any], on_gpu: bool) -> list[Any]:
    sums = crc32c(chunks, on_gpu)
    xp = _xp(on_gpu)
    tail = sums.astype("<u4").view(xp.uint8).reshape(-1, 4)
    return [xp.concatenate((c, tail[i])) for i, c in enumerate(chunks)]


def _xp(on_gpu: bool) -> Any:
    if on_gpu:
        import cupy

        return cupy
    return np


def chunk_error(key: str, field: str, reason: str) -> ChunkError:
    """The ChunkError for chunk `key`, refused by codec `field` for `reason`."""
    return _chunk_error(key, field, reason)
