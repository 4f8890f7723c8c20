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
from collections.abc import Iterable, Sequence
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

from . import _zarr_kernels as K
from ._zarr_store import ReadRequest, Store, is_gpu_prototype

if TYPE_CHECKING:
    from zarr.abc.codec import Codec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.indexing import SelectorTuple

__all__ = ["CodecPipeline"]

_MAX_U64 = 2**64 - 1
# Decoded bytes one group of a read may hold at once; the next group's reads run while a group
# decodes, so two groups' worth of memory is in use.
GROUP_BYTES = 1 << 30

_BatchItem = tuple[Any, ArraySpec, "SelectorTuple", "SelectorTuple", bool]


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
        ours = bool(batch) and all(
            isinstance(bg, StorePath) and isinstance(bg.store, Store) for bg, *_ in batch
        )
        if ours and _supported_dtype(batch[0][1]) and self._chunk_chain_supported():
            await self._read_chunks(batch, out, drop_axes)
        elif ours and _supported_dtype(batch[0][1]) and self._sharded_supported():
            await self._read_shards(batch, out, drop_axes)
        else:
            await super().read(batch, out, drop_axes)

    async def _read_chunks(self, batch: list[_BatchItem], out: NDBuffer, drop_axes: tuple[int, ...]) -> None:
        on_gpu = is_gpu_prototype(batch[0][1].prototype)
        groups = _groups(batch)
        store: Store = batch[0][0].store
        pending = store.start_reads([ReadRequest(bg.path) for bg, *_ in groups[0]], on_gpu=on_gpu)
        for g, group in enumerate(groups):
            raws = await pending.wait()
            if g + 1 < len(groups):
                pending = store.start_reads([ReadRequest(bg.path) for bg, *_ in groups[g + 1]], on_gpu=on_gpu)
            present = [i for i, r in enumerate(raws) if r is not None]
            arrays = self.decode_arrays(
                [raws[i] for i in present],
                [group[i][1] for i in present],
                [group[i][0].path for i in present],
                on_gpu,
            )
            decoded: list[Any] = [None] * len(group)
            for i, a in zip(present, arrays):
                decoded[i] = a
            _place(out, group, decoded, drop_axes)

    async def _read_shards(self, batch: list[_BatchItem], out: NDBuffer, drop_axes: tuple[int, ...]) -> None:
        sc = self.array_bytes_codec
        assert isinstance(sc, ShardingCodec)
        inner_pipeline = type(self).from_codecs(sc.codecs)
        spec0 = batch[0][1]
        on_gpu = is_gpu_prototype(spec0.prototype)
        store: Store = batch[0][0].store
        inner_shape = tuple(sc.chunk_shape)
        index_codecs = list(sc.index_codecs)
        index_crc = len(index_codecs) == 2
        index_endian = index_codecs[0].endian.value if index_codecs[0].endian is not None else "little"

        for group in _groups(batch):
            # 1. every shard index of the group, one plan, on the host (they are small)
            per_shard = []
            reqs = []
            for _bg, spec, *_ in group:
                cps = tuple(s // c for s, c in zip(spec.shape, inner_shape))
                size = 16 * math.prod(cps) + (4 if index_crc else 0)
                rng = SuffixByteRequest(size) if sc.index_location.value == "end" else RangeByteRequest(0, size)
                per_shard.append((cps, size))
                reqs.append(ReadRequest(_bg.path, rng))
            index_raws = await store.start_reads(reqs, on_gpu=False).wait()
            K.count("shard_indexes", sum(r is not None for r in index_raws))

            # 2. every inner chunk the selection touches, of every shard, one plan
            inner_reqs: list[ReadRequest] = []
            inner_where: list[tuple[int, tuple[int, ...]]] = []
            indexes: list[np.ndarray | None] = []
            for s, ((bg, spec, chunk_sel, _o, _c), (cps, size), raw) in enumerate(zip(group, per_shard, index_raws)):
                if raw is None:
                    indexes.append(None)
                    continue
                key = bg.path
                if raw.size != size:
                    raise K.chunk_error(key, "sharding_indexed", "the shard is shorter than its index (%d bytes)" % size)
                if index_crc:
                    raw = K.verify_crc32c([raw], [key + " (shard index)"], False)[0]
                table = raw.view("<u8" if index_endian == "little" else ">u8").reshape(cps + (2,))
                indexes.append(table)
                for coords in _touched(chunk_sel, inner_shape, cps):
                    off, n = (int(x) for x in table[coords])
                    if off == _MAX_U64 and n == _MAX_U64:
                        continue
                    inner_reqs.append(ReadRequest(key, RangeByteRequest(off, off + n)))
                    inner_where.append((s, coords))
            raws = await store.start_reads(inner_reqs, on_gpu=on_gpu).wait()
            inner_spec = ArraySpec(
                shape=inner_shape,
                dtype=spec0.dtype,
                fill_value=spec0.fill_value,
                config=spec0.config,
                prototype=spec0.prototype,
            )
            arrays = inner_pipeline.decode_arrays(
                list(raws),
                [inner_spec] * len(raws),
                ["%s[inner chunk %s]" % (group[s][0].path, ",".join(map(str, c))) for s, c in inner_where],
                on_gpu,
            )

            # 3. each shard assembled on the device (fill value where inner chunks are missing)
            by_shard: dict[int, list[tuple[tuple[int, ...], Any]]] = {}
            for (s, coords), a in zip(inner_where, arrays):
                by_shard.setdefault(s, []).append((coords, a))
            shards: list[Any] = []
            xp = _xp(on_gpu)
            for s, (_bg, spec, chunk_sel, _o, _c) in enumerate(group):
                parts = by_shard.get(s)
                if not parts:
                    shards.append(None)
                    continue
                shard = xp.full(spec.shape, _fill(spec), dtype=_result_dtype(spec, on_gpu))
                for coords, a in parts:
                    shard[tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, inner_shape))] = a
                shards.append(shard)
            _place(out, group, shards, drop_axes)

    # -- the codecs over a batch ---------------------------------------------------------------

    def decode_arrays(
        self, raws: Sequence[Any], specs: Sequence[ArraySpec], keys: Sequence[str], on_gpu: bool
    ) -> list[Any]:
        """Decodes 1-D uint8 chunk arrays (CuPy on the GPU) to arrays of each spec's shape."""
        if not raws:
            return []
        spec_ab = [self._ab_spec(s) for s in specs]
        dts = [np.dtype(s.dtype.to_native_dtype()) for s in spec_ab]
        nbytes = [math.prod(s.shape) * dt.itemsize for s, dt in zip(spec_ab, dts)]
        bb = self.bytes_bytes_codecs
        data = list(raws)
        for i in range(len(bb) - 1, -1, -1):
            codec = bb[i]
            if isinstance(codec, Crc32cCodec):
                data = K.verify_crc32c(data, keys, on_gpu)
            else:
                name = "zstd" if isinstance(codec, ZstdCodec) else "gzip"
                sizes = [n + 4 * i for n in nbytes]  # only checksums precede a compressor
                data = K.decompress(name, data, sizes, keys, on_gpu)
        K.count("chunks_gpu" if on_gpu else "chunks_cpu", len(data))
        ab = self.array_bytes_codec
        assert isinstance(ab, BytesCodec)
        stored = ab.endian.value if ab.endian is not None else None
        arrays = []
        for d, spec, dt, n, key in zip(data, spec_ab, dts, nbytes, keys):
            if int(d.size) != n:
                raise K.chunk_error(key, "bytes", "the chunk holds %d bytes, %d expected" % (d.size, n))
            arrays.append(_from_bytes(d, dt, stored, on_gpu).reshape(spec.shape))
        for codec in reversed(self.array_array_codecs):
            assert isinstance(codec, TransposeCodec)
            inverse = tuple(int(i) for i in np.argsort(codec.order))
            arrays = [a.transpose(inverse) for a in arrays]
        return arrays

    def _ab_spec(self, spec: ArraySpec) -> ArraySpec:
        for c in self.array_array_codecs:
            spec = c.resolve_metadata(spec)
        return spec

    async def decode_batch(
        self, chunk_bytes_and_specs: Iterable[tuple[Buffer | None, ArraySpec]]
    ) -> Iterable[NDBuffer | None]:
        items = list(chunk_bytes_and_specs)
        if not items or not self._chunk_chain_supported() or not _supported_dtype(items[0][1]):
            return await super().decode_batch(items)
        on_gpu = is_gpu_prototype(items[0][1].prototype)
        present = [i for i, (b, _) in enumerate(items) if b is not None]
        raws = [_as_bytes(items[i][0], on_gpu) for i in present]
        arrays = self.decode_arrays(raws, [items[i][1] for i in present], ["<chunk %d of the batch>" % i for i in present], on_gpu)
        result: list[NDBuffer | None] = [None] * len(items)
        for i, a in zip(present, arrays):
            result[i] = items[i][1].prototype.nd_buffer.from_ndarray_like(a)
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
        stored = ab.endian.value if ab.endian is not None else None
        data = []
        for i in present:
            nd = items[i][0]
            assert nd is not None
            a = nd.as_ndarray_like()
            for codec in self.array_array_codecs:
                assert isinstance(codec, TransposeCodec)
                a = a.transpose(codec.order)
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


def _swap(d: Any, size: int, on_gpu: bool) -> Any:
    # Each element's bytes reversed: a strided view copied by one device (or numpy) kernel.
    xp = _xp(on_gpu)
    return xp.ascontiguousarray(d.reshape(-1, size)[:, ::-1]).ravel()


def _from_bytes(d: Any, dt: np.dtype[Any], stored: str | None, on_gpu: bool) -> Any:
    want = _dtype_order(dt)
    if on_gpu and want is not None:  # CuPy holds native byte order only
        want, dt = _native_order(), dt.newbyteorder("=")
    if want is not None and stored is not None and want != stored:
        d = _swap(d, _element_size(dt), on_gpu)
    return d.view(dt)


def _result_dtype(spec: ArraySpec, on_gpu: bool) -> np.dtype[Any]:
    dt = np.dtype(spec.dtype.to_native_dtype())
    return dt.newbyteorder("=") if on_gpu and dt.byteorder != "|" else dt


def _to_bytes(a: Any, stored: str | None, on_gpu: bool) -> Any:
    dt = np.dtype(a.dtype)
    d = a.ravel().view(np.uint8) if not on_gpu else a.ravel().view("u1")
    have = _dtype_order(dt)
    if have is not None and stored is not None and have != stored:
        d = _swap(d, _element_size(dt), on_gpu)
    return d


def _fill(spec: ArraySpec) -> Any:
    fill = spec.fill_value
    return spec.dtype.default_scalar() if fill is None else fill


def _groups(batch: list[_BatchItem]) -> list[list[_BatchItem]]:
    groups: list[list[_BatchItem]] = [[]]
    used = 0
    for item in batch:
        spec = item[1]
        n = math.prod(spec.shape) * np.dtype(spec.dtype.to_native_dtype()).itemsize
        if groups[-1] and used + n > GROUP_BYTES:
            groups.append([])
            used = 0
        groups[-1].append(item)
        used += n
    return groups


def _touched(sel: Any, inner: tuple[int, ...], cps: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Inner chunks of a shard that the chunk selection reads (all of them for selections
    that are not slices or integers)."""
    ranges: list[Sequence[int]] = []
    if not isinstance(sel, tuple) or len(sel) != len(inner):
        ranges = [range(n) for n in cps]
    else:
        for s, c, n in zip(sel, inner, cps):
            if isinstance(s, slice) and (s.step in (None, 1)):
                start = 0 if s.start is None else s.start
                stop = n * c if s.stop is None else s.stop
                ranges.append(range(start // c, min(-(-stop // c), n)) if stop > start else range(0))
            elif isinstance(s, (int, np.integer)):
                ranges.append([int(s) // c])
            else:
                try:
                    ranges.append(sorted({int(i) // c for i in np.asarray(s).ravel()}))
                except Exception:
                    ranges.append(range(n))
    out: list[tuple[int, ...]] = [()]
    for r in ranges:
        out = [o + (i,) for o in out for i in r]
    return out


def _place(out: NDBuffer, group: list[_BatchItem], arrays: Sequence[Any], drop_axes: tuple[int, ...]) -> None:
    for a, (_bg, spec, chunk_sel, out_sel, _complete) in zip(arrays, group):
        if a is None:
            out[out_sel] = _fill(spec)
            continue
        value = a[chunk_sel]
        if drop_axes:
            value = value.squeeze(axis=drop_axes)
        out.as_ndarray_like()[out_sel] = value
