"""ferry.zarr.CodecPipeline: zarr's codec pipeline with the reads batched through ferry and the
codecs run on the device.

zarr's BatchedCodecPipeline reads chunks one ``get`` at a time (``async.concurrency`` at once)
and runs every codec on the CPU, also when the array is read for the GPU. This pipeline takes
the whole selection of a read at once, and for chunks stored in a ferry.zarr.Store:

1. reads them in one plan (ferry.zarr.Store.start_reads): every chunk file opened, every read
   started at once into one allocation (GPU memory when zarr asks for GPU buffers), the next
   group's reads running while the previous group decodes;
2. decodes each codec over the whole batch: crc32c checked by a CUDA kernel, zstd and gzip by
   nvCOMP's batched decoders, byte order swapped and transpose applied by CuPy on the device
   (numpy, numcodecs and google-crc32c on the host);
3. for ``sharding_indexed``: reads the shard indexes of the batch in one plan (suffix or prefix
   ranges), then every inner chunk the selection touches, of all shards, in one more plan.

Codec chains it does not know (blosc, vlen strings, nested sharding, ...) and stores other than
ferry's take zarr's own path unchanged. Writes encode on the GPU where nvCOMP can (zstd), else
on the CPU, and go to the store (through ferry for a ferry.zarr.Store).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.codecs.bytes import BytesCodec
from zarr.codecs.crc32c_ import Crc32cCodec
from zarr.codecs.gzip import GzipCodec
from zarr.codecs.sharding import ShardingCodec
from zarr.codecs.transpose import TransposeCodec
from zarr.codecs.zstd import ZstdCodec
from zarr.core.array_spec import ArraySpec
from zarr.core.codec_pipeline import BatchedCodecPipeline
from zarr.storage import StorePath

from . import _kernels as K
from ._store import DeviceRange, ReadRequest, Store, check_gpu_buffers, is_gpu_prototype

if TYPE_CHECKING:
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.indexing import SelectorTuple

__all__ = ["CodecPipeline"]

_MAX_U64 = 2**64 - 1
# Decoded bytes one group of a read may hold at once; the next group's reads run while a group
# decodes, so two groups' worth of memory is in use. Large, because nvCOMP decodes the chunks of
# one call in parallel (one 16 MiB zstd frame alone keeps little of a GPU busy).
GROUP_BYTES = 2 << 30

# Whole chunks that are tiles of a GPU result (not contiguous bytes of it) placed by one kernel
# a group, where they are otherwise copied one by one. Off until a GPU run of
# bench/zarr_bench.py --tiles compares the two ways (it runs both); the tests run both.
PLACE_TILES_IN_ONE_KERNEL = False

_BatchItem = tuple[Any, ArraySpec, "SelectorTuple", "SelectorTuple", bool]


def _word(e):
    """A codec setting that zarr 3.1 holds as an enum (Endian, ShardingCodecIndexLocation) and
    later releases as its plain string: the string, or None."""
    if e is None:
        return None
    return getattr(e, "value", e)


def _native_order() -> str:
    return "little" if sys.byteorder == "little" else "big"


def _dtype_order(dt: np.dtype[Any]) -> str | None:
    if dt.itemsize == 1 or dt.byteorder == "|":
        return None
    if dt.byteorder == "=":
        return _native_order()
    return "little" if dt.byteorder == "<" else "big"


def _supported_bb(codecs: Sequence[Any]) -> bool:
    # A compressor must know its output size: only checksums may sit between it and the array.
    for i, c in enumerate(codecs):
        if isinstance(c, (ZstdCodec, GzipCodec)):
            if not all(isinstance(x, Crc32cCodec) for x in codecs[:i]):
                return False
        elif not isinstance(c, Crc32cCodec):
            return False
    return True


def _supported_dtype(spec: ArraySpec) -> bool:
    try:
        dt = np.dtype(spec.dtype.to_native_dtype())
    except Exception:
        return False
    return dt.kind in "biufcmM" and not dt.hasobject and dt.fields is None


@dataclass(frozen=True)
class CodecPipeline(BatchedCodecPipeline):
    """A zarr codec pipeline that batches reads through ferry and decodes on the GPU.

    Select it with ``zarr.config.set({"codec_pipeline.path": "ferry.zarr.CodecPipeline"})`` or
    ``ferry.zarr.enable()``. It is stateless; thread safety is zarr's.
    """

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> CodecPipeline:
        # Made when an array is opened or created: the first place to say that GPU buffers
        # need CuPy, before zarr's own read fails on them.
        check_gpu_buffers()
        return super().evolve_from_array_spec(array_spec)

    # -- what this pipeline handles ------------------------------------------------------------

    def _chunk_chain_supported(self) -> bool:
        ab = self.array_bytes_codec
        if not all(isinstance(c, TransposeCodec) for c in self.array_array_codecs):
            return False
        if isinstance(ab, ShardingCodec):
            return False
        return isinstance(ab, BytesCodec) and _supported_bb(self.bytes_bytes_codecs)

    def _sharded_supported(self) -> bool:
        ab = self.array_bytes_codec
        if not isinstance(ab, ShardingCodec) or self.array_array_codecs or self.bytes_bytes_codecs:
            return False
        index = list(ab.index_codecs)
        if not index or not isinstance(index[0], BytesCodec):
            return False
        if not all(isinstance(c, Crc32cCodec) for c in index[1:]) or len(index) > 2:
            return False
        return type(self).from_codecs(ab.codecs)._chunk_chain_supported()

    # -- reads ---------------------------------------------------------------------------------

    async def read(
        self,
        batch_info: Iterable[_BatchItem],
        out: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> None:
        batch = list(batch_info)
        # ferry's store, and one chunk shape (a regular grid): a batch decodes as one array
        ours = (
            bool(batch)
            and all(isinstance(bg, StorePath) and isinstance(bg.store, Store) for bg, *_ in batch)
            and len({tuple(item[1].shape) for item in batch}) == 1
        )
        if ours and _supported_dtype(batch[0][1]) and self._chunk_chain_supported():
            await self._read_chunks(batch, out, drop_axes)
        elif ours and _supported_dtype(batch[0][1]) and self._sharded_supported():
            await self._read_shards(batch, out, drop_axes)
        else:
            await super().read(batch, out, drop_axes)

    async def _read_chunks(
        self, batch: list[_BatchItem], out: NDBuffer, drop_axes: tuple[int, ...]
    ) -> None:
        on_gpu = is_gpu_prototype(batch[0][1].prototype)
        store: Store = batch[0][0].store
        out_arr = out.as_ndarray_like()
        # Chunks read straight into `out` hold no memory of their own: only the others count
        # towards a group's bytes (an uncompressed read is one group, one plan).
        targets = {
            id(item): t
            for item, t in zip(batch, self._direct_targets(out_arr, batch, drop_axes, on_gpu))
        }
        groups = _groups(batch, lambda item: targets[id(item)] is None)

        def requests(group: list[_BatchItem]) -> list[ReadRequest]:
            return [ReadRequest(item[0].path, None, targets[id(item)]) for item in group]

        reqs = requests(groups[0])
        pending = store.start_reads(reqs, on_gpu=on_gpu)
        for g, group in enumerate(groups):
            done, done_reqs = pending, reqs
            if g + 1 < len(groups):
                # The next group's reads queue behind this one's before it is awaited, so the
                # reads never pause between groups, and run on while this group decodes.
                reqs = requests(groups[g + 1])
                pending = store.start_reads(reqs, on_gpu=on_gpu)
            views = await done.wait()
            present = done.present
            chunks = K.Batch(done.block, done.offsets, done.sizes, _keys(group, present), on_gpu)
            decoded: list[Any] = [None] * len(group)
            if present:
                dense = self.decode_dense(chunks, group[0][1])
                for j, i in enumerate(present):
                    decoded[i] = dense[j]
            direct = [r.into is not None and v is not None for r, v in zip(done_reqs, views)]
            K.count("chunks_gpu" if on_gpu else "chunks_cpu", sum(direct))
            if PLACE_TILES_IN_ONE_KERNEL and on_gpu and present and not drop_axes:
                for i in _place_whole_chunks(out_arr, group, present, dense):
                    direct[i] = True
            _place(out, group, decoded, drop_axes, skip=direct)

    def _direct_targets(
        self, out_arr: Any, batch: list[_BatchItem], drop_axes: tuple[int, ...], on_gpu: bool
    ) -> list[Any]:
        """For each item, the bytes of `out` that its whole uncompressed chunk, in the array's
        own byte order, fills contiguously, so that ferry reads it there; None otherwise. Into
        a C-contiguous `out` the places are worked out from the selections' numbers, without
        an array operation per chunk (on the GPU three CuPy calls a chunk cost about 6 us,
        1.5 ms for a read of 256 chunks)."""
        ab = self.array_bytes_codec
        spec0 = batch[0][1]
        if drop_axes or self.array_array_codecs or self.bytes_bytes_codecs:
            return [None] * len(batch)
        assert isinstance(ab, BytesCodec)
        dt = _result_dtype(spec0, on_gpu)
        want = _dtype_order(dt)
        if out_arr.dtype != dt or (
            want is not None and ab.endian is not None and _word(ab.endian) != want
        ):
            return [None] * len(batch)
        if not out_arr.flags.c_contiguous or out_arr.ndim == 0:
            return [_region_view(out_arr, item) for item in batch]
        shape = tuple(int(n) for n in out_arr.shape)
        nd = len(shape)
        strides = [out_arr.itemsize] * nd  # C order
        for d in range(nd - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        place = _DevicePlace(out_arr) if on_gpu else _HostPlace(out_arr)
        out: list[Any] = []
        for _bg, spec, _chunk_sel, out_sel, complete in batch:
            at = _contiguous_region(out_sel, tuple(spec.shape), shape, strides) if complete else None
            out.append(None if at is None else place(at[0], at[1]))
        return out

    async def _read_shards(
        self, batch: list[_BatchItem], out: NDBuffer, drop_axes: tuple[int, ...]
    ) -> None:
        sc = self.array_bytes_codec
        assert isinstance(sc, ShardingCodec)
        inner_pipeline = type(self).from_codecs(sc.codecs)
        spec0 = batch[0][1]
        on_gpu = is_gpu_prototype(spec0.prototype)
        xp = _xp(on_gpu)
        store: Store = batch[0][0].store
        inner_shape = tuple(sc.chunk_shape)
        inner_spec = ArraySpec(
            shape=inner_shape,
            dtype=spec0.dtype,
            fill_value=spec0.fill_value,
            config=spec0.config,
            prototype=spec0.prototype,
        )
        index_codecs = list(sc.index_codecs)
        index_crc = len(index_codecs) == 2
        index_bytes = index_codecs[0]
        assert isinstance(index_bytes, BytesCodec)
        index_big = _word(index_bytes.endian) == "big"

        for group in _groups(batch):
            # 1. every shard index of the group: one plan, into host memory (they are small)
            cps_of = [
                tuple(s // c for s, c in zip(spec.shape, inner_shape)) for _bg, spec, *_ in group
            ]
            size_of = [16 * math.prod(cps) + (4 if index_crc else 0) for cps in cps_of]
            reqs = [
                ReadRequest(
                    bg.path,
                    SuffixByteRequest(n)
                    if _word(sc.index_location) == "end"
                    else RangeByteRequest(0, n),
                )
                for (bg, *_), n in zip(group, size_of)
            ]
            index_raws = await store.start_reads(reqs, on_gpu=False).wait()
            K.count("shard_indexes", sum(r is not None for r in index_raws))

            # 2. for each shard, the span of the inner chunks its selection touches; all spans
            #    of the group read in one plan
            spans: list[ReadRequest] = []
            plans: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, int]] = []
            for s, ((bg, _spec, chunk_sel, _o, _c), cps, n, raw) in enumerate(
                zip(group, cps_of, size_of, index_raws)
            ):
                if raw is None:
                    continue
                if raw.size != n:
                    raise K.chunk_error(
                        bg.path,
                        "sharding_indexed",
                        "the shard is shorter than its index (%d bytes)" % n,
                    )
                if index_crc:
                    one = K.Batch(
                        raw,
                        np.zeros(1, np.int64),
                        np.array([n], np.int64),
                        _constant_key(bg.path + " (shard index)"),
                        False,
                    )
                    raw = K.verify_crc32c(one).view(0)
                table = raw.view(">u8" if index_big else "<u8").reshape(-1, 2).astype(np.uint64)
                linear = _touched(chunk_sel, inner_shape, cps)
                offs, lens = table[linear, 0], table[linear, 1]
                keep = ~((offs == _MAX_U64) & (lens == _MAX_U64))
                linear, offs, lens = (
                    linear[keep],
                    offs[keep].astype(np.int64),
                    lens[keep].astype(np.int64),
                )
                if linear.size == 0:
                    continue
                lo, hi = int(offs.min()), int((offs + lens).max())
                spans.append(ReadRequest(bg.path, RangeByteRequest(lo, hi)))
                plans.append((s, linear, offs - lo, lens, hi - lo))
            done = await _wait(store.start_reads(spans, on_gpu=on_gpu))
            base = {
                plans[j][0]: (int(done.offsets[k]), int(done.sizes[k]))
                for k, j in enumerate(done.present)
            }
            plans = [p for p in plans if p[0] in base]
            for s, _linear, rel, lens, span in plans:
                if base[s][1] != span or np.any(rel + lens > span):
                    raise K.chunk_error(
                        group[s][0].path,
                        "sharding_indexed",
                        "an inner chunk lies past the end of the shard",
                    )

            # 3. every inner chunk of the group decoded as one batch
            owners = (
                np.concatenate([np.full(p[1].size, j, dtype=np.int64) for j, p in enumerate(plans)])
                if plans
                else np.zeros(0, np.int64)
            )
            coords = np.concatenate([p[1] for p in plans]) if plans else np.zeros(0, np.int64)

            def key_of(
                i: int,
                owners: np.ndarray = owners,
                coords: np.ndarray = coords,
                plans: list[Any] = plans,
                group: list[_BatchItem] = group,
            ) -> str:
                s = plans[int(owners[i])][0]
                cps = tuple(x // c for x, c in zip(group[s][1].shape, inner_shape))
                where = np.unravel_index(int(coords[i]), cps)
                return "%s[inner chunk %s]" % (
                    group[s][0].path,
                    ",".join(str(int(x)) for x in where),
                )

            inner = K.Batch(
                done.block,
                np.concatenate([base[p[0]][0] + p[2] for p in plans])
                if plans
                else np.zeros(0, np.int64),
                np.concatenate([p[3] for p in plans]) if plans else np.zeros(0, np.int64),
                key_of,
                on_gpu,
            )
            dense: Any = inner_pipeline.decode_dense(inner, inner_spec) if len(inner) else None

            # 4. each shard assembled on the device from its inner chunks (fill value elsewhere)
            shards: list[Any] = [None] * len(group)
            start = 0
            for s, linear, _rel, _lens, _span in plans:
                spec = group[s][1]
                cps = tuple(x // c for x, c in zip(spec.shape, inner_shape))
                part = dense[start : start + linear.size]
                start += linear.size
                total = math.prod(cps)
                if linear.size == total and np.array_equal(linear, np.arange(total)):
                    slots = part
                else:
                    slots = xp.full((total,) + inner_shape, _fill(spec), dtype=part.dtype)
                    slots[xp.asarray(linear)] = part
                nd = len(inner_shape)
                interleave = [a for k in range(nd) for a in (k, nd + k)]
                shards[s] = (
                    slots.reshape(cps + inner_shape).transpose(interleave).reshape(spec.shape)
                )
            _place(out, group, shards, drop_axes)

    # -- the codecs over a batch ---------------------------------------------------------------

    def decode_dense(self, batch: K.Batch, spec: ArraySpec) -> Any:
        """Decodes a batch of chunks of one spec to one array of shape (len(batch), *shape)
        (CuPy on the GPU)."""
        on_gpu = batch.on_gpu
        spec_ab = self._ab_spec(spec)
        dt = np.dtype(spec_ab.dtype.to_native_dtype())
        nbytes = math.prod(spec_ab.shape) * dt.itemsize
        bb = self.bytes_bytes_codecs
        for i in range(len(bb) - 1, -1, -1):
            codec = bb[i]
            if isinstance(codec, Crc32cCodec):
                batch = K.verify_crc32c(batch)
            else:
                name = "zstd" if isinstance(codec, ZstdCodec) else "gzip"
                batch = K.decompress(name, batch, nbytes + 4 * i)  # only checksums precede it
        K.count("chunks_gpu" if on_gpu else "chunks_cpu", len(batch))
        wrong = np.nonzero(batch.sizes != nbytes)[0]
        if wrong.size:
            j = int(wrong[0])
            raise K.chunk_error(
                batch.key_of(j),
                "bytes",
                "the chunk holds %d bytes, %d expected" % (batch.sizes[j], nbytes),
            )
        n = len(batch)
        if not batch.is_dense(nbytes):
            batch = K.gather(batch, nbytes)
        rows = batch.block[: n * nbytes].reshape(n, nbytes)
        ab = self.array_bytes_codec
        assert isinstance(ab, BytesCodec)
        stored = _word(ab.endian)
        arr = _from_bytes(rows, dt, stored, on_gpu).reshape((n,) + tuple(spec_ab.shape))
        for aa in reversed(self.array_array_codecs):
            assert isinstance(aa, TransposeCodec)
            inverse = [int(i) for i in np.argsort(aa.order)]
            arr = arr.transpose([0] + [1 + i for i in inverse])
        return arr

    def _ab_spec(self, spec: ArraySpec) -> ArraySpec:
        for c in self.array_array_codecs:
            spec = c.resolve_metadata(spec)
        return spec

    async def decode_batch(
        self, chunk_bytes_and_specs: Iterable[tuple[Buffer | None, ArraySpec]]
    ) -> Iterable[NDBuffer | None]:
        items = list(chunk_bytes_and_specs)
        specs = {(tuple(spec.shape), id(spec.prototype)) for _b, spec in items}
        if (
            not items
            or len(specs) != 1
            or not self._chunk_chain_supported()
            or not _supported_dtype(items[0][1])
        ):
            return await super().decode_batch(items)
        on_gpu = is_gpu_prototype(items[0][1].prototype)
        present = [i for i, (b, _) in enumerate(items) if b is not None]
        raws = [_as_bytes(items[i][0], on_gpu) for i in present]  # type: ignore[arg-type]
        sizes = np.array([int(r.size) for r in raws], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64) if raws else sizes
        xp = _xp(on_gpu)
        block = xp.concatenate(raws) if raws else xp.empty(1, xp.uint8)
        chunks = K.Batch(
            block, offsets, sizes, lambda j: "<chunk %d of the batch>" % present[j], on_gpu
        )
        dense: Any = (
            self.decode_dense(K.aligned(chunks, 16) if on_gpu else chunks, items[0][1])
            if raws
            else None
        )
        result: list[NDBuffer | None] = [None] * len(items)
        for j, i in enumerate(present):
            result[i] = items[i][1].prototype.nd_buffer.from_ndarray_like(dense[j])
        return result

    # -- writes --------------------------------------------------------------------------------

    async def encode_batch(
        self, chunk_arrays_and_specs: Iterable[tuple[NDBuffer | None, ArraySpec]]
    ) -> Iterable[Buffer | None]:
        items = list(chunk_arrays_and_specs)
        if not items or not self._chunk_chain_supported() or not _supported_dtype(items[0][1]):
            return await super().encode_batch(items)
        on_gpu = is_gpu_prototype(items[0][1].prototype)
        present = [i for i, (a, _) in enumerate(items) if a is not None]
        xp = _xp(on_gpu)
        ab = self.array_bytes_codec
        assert isinstance(ab, BytesCodec)
        stored = _word(ab.endian)
        data = []
        for i in present:
            nd = items[i][0]
            assert nd is not None
            a = nd.as_ndarray_like()
            for aa in self.array_array_codecs:
                assert isinstance(aa, TransposeCodec)
                a = a.transpose(aa.order)
            data.append(_to_bytes(xp.ascontiguousarray(a), stored, on_gpu))
        for codec in self.bytes_bytes_codecs:
            if isinstance(codec, Crc32cCodec):
                data = K.append_crc32c(data, on_gpu)
            else:
                name = "zstd" if isinstance(codec, ZstdCodec) else "gzip"
                data = K.compress(name, data, getattr(codec, "level", None), on_gpu)
        result: list[Buffer | None] = [None] * len(items)
        for i, d in zip(present, data):
            result[i] = items[i][1].prototype.buffer.from_array_like(d)
        return result


# -- helpers -----------------------------------------------------------------------------------


def _xp(on_gpu: bool) -> Any:
    if on_gpu:
        import cupy

        return cupy
    return np


def _as_bytes(buf: Buffer, on_gpu: bool) -> Any:
    a = buf.as_array_like()
    if on_gpu:
        import cupy

        return cupy.asarray(a).view(cupy.uint8).ravel()
    return np.asarray(a).view(np.uint8).ravel()


def _element_size(dt: np.dtype[Any]) -> int:
    return dt.itemsize // 2 if dt.kind == "c" else dt.itemsize


def _swap(rows: Any, size: int, on_gpu: bool) -> Any:
    # Each element's bytes reversed: a strided view copied by one device (or numpy) kernel.
    xp = _xp(on_gpu)
    n = rows.shape[0]
    return xp.ascontiguousarray(rows.reshape(n, -1, size)[:, :, ::-1]).reshape(n, -1)


def _from_bytes(rows: Any, dt: np.dtype[Any], stored: str | None, on_gpu: bool) -> Any:
    """(n, nbytes) uint8 rows, C-contiguous, as (n, nbytes // itemsize) elements of dt."""
    want = _dtype_order(dt)
    if on_gpu and want is not None:  # CuPy holds native byte order only
        want, dt = _native_order(), dt.newbyteorder("=")
    if want is not None and stored is not None and want != stored:
        rows = _swap(rows, _element_size(dt), on_gpu)
    return rows.view(dt)


def _result_dtype(spec: ArraySpec, on_gpu: bool) -> np.dtype[Any]:
    dt = np.dtype(spec.dtype.to_native_dtype())
    return dt.newbyteorder("=") if on_gpu and dt.byteorder != "|" else dt


def _to_bytes(a: Any, stored: str | None, on_gpu: bool) -> Any:
    dt = np.dtype(a.dtype)
    d = a.ravel().view(np.uint8) if not on_gpu else a.ravel().view("u1")
    have = _dtype_order(dt)
    if have is not None and stored is not None and have != stored:
        d = _swap(d.reshape(1, -1), _element_size(dt), on_gpu).reshape(-1)
    return d


def _fill(spec: ArraySpec) -> Any:
    fill = spec.fill_value
    return spec.dtype.default_scalar() if fill is None else fill


def _contiguous_region(
    sel: Any, chunk: tuple[int, ...], shape: tuple[int, ...], strides: list[int]
) -> tuple[int, int] | None:
    """(byte offset, bytes) of the region `sel` (unit-step slices, one per dimension) of a
    C-contiguous array of `shape`, when it has the extent `chunk` and is contiguous; else
    None. Contiguous: the dimensions before the first one not taken whole have extent 1."""
    offset = _corner(sel, chunk, shape, strides)
    if offset is None:
        return None
    partial = [d for d in range(len(shape)) if chunk[d] != shape[d]]
    if partial and any(chunk[d] != 1 for d in range(partial[-1])):
        return None
    return offset, strides[-1] * math.prod(chunk)


class _HostPlace:
    """Host regions of `out` as 1-D uint8 views."""

    def __init__(self, out_arr: Any) -> None:
        self.flat = out_arr.reshape(-1).view(np.uint8)

    def __call__(self, offset: int, nbytes: int) -> Any:
        return self.flat[offset : offset + nbytes]


class _DevicePlace:
    """GPU regions of `out` as the store's device ranges (no CuPy view a chunk)."""

    def __init__(self, out_arr: Any) -> None:
        self.out = out_arr
        self.ptr = int(out_arr.data.ptr)

    def __call__(self, offset: int, nbytes: int) -> Any:
        return DeviceRange(self.out, self.ptr + offset, nbytes)


def _region_view(out_arr: Any, item: _BatchItem) -> Any:
    """The bytes of `out_arr` that a whole chunk fills, as a 1-D uint8 view, when they are
    contiguous; else None (any layout of `out_arr`)."""
    _bg, spec, _chunk_sel, out_sel, complete = item
    if not complete:
        return None
    region = out_arr[out_sel]
    if tuple(region.shape) != tuple(spec.shape) or not region.flags.c_contiguous:
        return None
    return region.reshape(-1).view(np.uint8)


def _place_whole_chunks(
    out_arr: Any, group: list[_BatchItem], present: list[int], dense: Any
) -> list[int]:
    """Places the decoded whole chunks of a group (`dense`, a CuPy array of shape
    (len(present), *chunk)) into a C-contiguous CuPy `out_arr` in one kernel, and returns the
    group's indices of the chunks it placed. A chunk at the array's edge (partly selected) and
    any layout the kernel does not take are left to _place, which copies one chunk at a time
    (Python and a kernel launch a chunk)."""
    if (
        out_arr.dtype != dense.dtype
        or not out_arr.flags.c_contiguous
        or not dense.flags.c_contiguous
        or out_arr.ndim != dense.ndim - 1
        or out_arr.ndim == 0
    ):
        return []
    chunk = tuple(int(x) for x in dense.shape[1:])
    shape = tuple(int(x) for x in out_arr.shape)
    strides = [int(x) for x in out_arr.strides]
    which: list[int] = []
    corners: list[int] = []
    placed: list[int] = []
    for j, i in enumerate(present):
        _bg, _spec, _chunk_sel, out_sel, complete = group[i]
        at = _corner(out_sel, chunk, shape, strides) if complete else None
        if at is not None:
            which.append(j)
            corners.append(at)
            placed.append(i)
    if not placed or not K.place_chunks(
        dense, np.array(which, dtype=np.int64), out_arr, np.array(corners, dtype=np.int64)
    ):
        return []
    return placed


def _corner(
    sel: Any, chunk: tuple[int, ...], shape: tuple[int, ...], strides: list[int]
) -> int | None:
    """Byte offset of the region `sel` of an array of `shape` and `strides`, when `sel` is a
    unit-step slice per dimension with the extents of `chunk`; else None."""
    if not isinstance(sel, tuple) or len(sel) != len(shape):
        return None
    offset = 0
    for s, c, n, st in zip(sel, chunk, shape, strides):
        if not isinstance(s, slice) or s.step not in (None, 1):
            return None
        start, stop, _ = s.indices(n)
        if stop - start != c:
            return None
        offset += start * st
    return offset


def _groups(
    batch: list[_BatchItem], holds: Callable[[_BatchItem], bool] = lambda item: True
) -> list[list[_BatchItem]]:
    """The batch cut into groups of at most GROUP_BYTES of the items that `holds` memory."""
    groups: list[list[_BatchItem]] = [[]]
    used = 0
    for item in batch:
        spec = item[1]
        if not holds(item):
            groups[-1].append(item)
            continue
        n = math.prod(spec.shape) * np.dtype(spec.dtype.to_native_dtype()).itemsize
        if groups[-1] and used + n > GROUP_BYTES:
            groups.append([])
            used = 0
        groups[-1].append(item)
        used += n
    return groups


def _touched(sel: Any, inner: tuple[int, ...], cps: tuple[int, ...]) -> np.ndarray:
    """Linear (C-order) indices of the inner chunks of a shard that the chunk selection reads
    (all of them for selections that are not slices or integers)."""
    ranges: list[np.ndarray] = []
    if not isinstance(sel, tuple) or len(sel) != len(inner):
        ranges = [np.arange(n) for n in cps]
    else:
        for s, c, n in zip(sel, inner, cps):
            if isinstance(s, slice) and s.step in (None, 1):
                start = 0 if s.start is None else s.start
                stop = n * c if s.stop is None else s.stop
                ranges.append(
                    np.arange(start // c, min(-(-stop // c), n)) if stop > start else np.arange(0)
                )
            elif isinstance(s, (int, np.integer)):
                ranges.append(np.array([int(s) // c]))
            else:
                try:
                    ranges.append(np.unique(np.asarray(s).ravel() // c))
                except Exception:
                    ranges.append(np.arange(n))
    grids = np.meshgrid(*ranges, indexing="ij")
    return np.ravel_multi_index(tuple(g.ravel() for g in grids), cps).astype(np.int64)


def _keys(group: list[_BatchItem], present: list[int]) -> Callable[[int], str]:
    def key_of(j: int) -> str:
        return str(group[present[j]][0].path)

    return key_of


def _constant_key(key: str) -> Callable[[int], str]:
    def key_of(_j: int) -> str:
        return key

    return key_of


async def _wait(pending: Any) -> Any:
    await pending.wait()
    return pending


def _place(
    out: NDBuffer,
    group: list[_BatchItem],
    arrays: Sequence[Any],
    drop_axes: tuple[int, ...],
    skip: Sequence[bool] = (),
) -> None:
    """Copies each decoded chunk's selection into `out` (the fill value for missing chunks);
    chunks marked in `skip` were read into `out` already."""
    for i, (a, (_bg, spec, chunk_sel, out_sel, _complete)) in enumerate(zip(arrays, group)):
        if skip and skip[i]:
            continue
        if a is None:
            out[out_sel] = _fill(spec)
            continue
        value = a[chunk_sel]
        if drop_axes:
            value = value.squeeze(axis=drop_axes)
        target: Any = out.as_ndarray_like()
        target[out_sel] = value
