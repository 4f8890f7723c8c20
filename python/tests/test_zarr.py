"""ferry.zarr against zarr-python itself: arrays written by zarr (v3) are read through ferry's
store and codec pipeline and compared byte for byte with zarr's own CPU result; arrays written
through ferry are read back by zarr; corrupt chunks raise ferry.ChunkError naming the key.
Host-memory paths run everywhere; GPU paths skip with the reason where there is no GPU."""

from __future__ import annotations

import math
import mmap
import os
import subprocess
import sys
import warnings

import ferry
import numpy as np
import pytest

zarr = pytest.importorskip(
    "zarr", reason="zarr-python 3 is not installed (scripts/deps.sh installs it)"
)
import ferry.zarr as fz  # noqa: E402
from zarr.codecs import (  # noqa: E402
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
)
from zarr.core.buffer import default_buffer_prototype  # noqa: E402

SHAPE = (37, 23, 5)  # partial edge chunks on every axis


def _write(
    path,
    dtype,
    *,
    endian="little",
    order=None,
    compressor=None,
    crc=False,
    shards=None,
    chunks=(8, 6, 5),
    fill_value=0,
    missing=False,
    seed=0,
):
    """An array written by zarr itself; returns zarr's own read of it (CPU)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "b":
        data = rng.integers(0, 2, SHAPE).astype(bool)
    elif np.dtype(dtype).kind == "c":
        data = (rng.standard_normal(SHAPE) + 1j * rng.standard_normal(SHAPE)).astype(dtype)
    elif np.dtype(dtype).kind == "f":
        data = rng.standard_normal(SHAPE).astype(dtype)
    else:
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, SHAPE, endpoint=True, dtype=dtype)
    compressors = [c for c in (compressor, Crc32cCodec() if crc else None) if c is not None]
    z = zarr.create_array(
        store=str(path),
        shape=SHAPE,
        chunks=chunks,
        shards=shards,
        dtype=dtype,
        serializer=BytesCodec(endian=endian if np.dtype(dtype).itemsize > 1 else None),
        filters=[TransposeCodec(order=order)] if order else None,
        compressors=compressors or None,
        fill_value=fill_value,
        overwrite=True,
    )
    if missing:  # leave the last chunks (or shards) unwritten: they read as the fill value
        z[: SHAPE[0] // 2] = data[: SHAPE[0] // 2]
    else:
        z[...] = data
    return zarr.open_array(store=str(path), mode="r")[...]


def _read_ferry(path, selection=Ellipsis):
    with fz.enable():
        z = zarr.open_array(store=fz.Store(path), mode="r")
        return z[selection]


def _same(a, b):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


CASES = {
    "u1": dict(dtype="uint8"),
    "bool": dict(dtype="bool", fill_value=True),
    "i2-big": dict(dtype="int16", endian="big"),
    "u4-zstd": dict(dtype="uint32", compressor=ZstdCodec(level=1)),
    "f4-big-zstd-crc": dict(dtype="float32", endian="big", compressor=ZstdCodec(level=3), crc=True),
    "f8-gzip": dict(dtype="float64", compressor=GzipCodec(level=1)),
    "i8-transpose": dict(dtype="int64", order=(2, 0, 1)),
    "c8-big-transpose-gzip-crc": dict(
        dtype="complex64", endian="big", order=(1, 2, 0), compressor=GzipCodec(level=1), crc=True
    ),
    "f2-missing-fill": dict(dtype="float16", missing=True, fill_value=-1.5),
    "f4-crc": dict(dtype="float32", crc=True, fill_value=7),
    "sharded-u2": dict(dtype="uint16", chunks=(4, 3, 5), shards=(8, 6, 5)),
    "sharded-f4-big-zstd-crc": dict(
        dtype="float32",
        endian="big",
        chunks=(4, 3, 5),
        shards=(8, 12, 5),
        compressor=ZstdCodec(level=1),
        crc=True,
    ),
    "sharded-i4-gzip-missing": dict(
        dtype="int32",
        chunks=(4, 3, 5),
        shards=(16, 6, 5),
        compressor=GzipCodec(level=1),
        missing=True,
        fill_value=-9,
    ),
    "sharded-f8-transpose": dict(
        dtype="float64", chunks=(4, 3, 5), shards=(8, 6, 5), order=(2, 1, 0)
    ),
}
SELECTIONS = [
    Ellipsis,
    (slice(3, 30), slice(5, 20), slice(1, 4)),
    (slice(None, None, 3), 4, slice(None)),
    (36, 22, 4),
]


@pytest.mark.parametrize("case", sorted(CASES))
def test_host_reads_match_zarr(tmp_path, case):
    ref = _write(tmp_path / "a.zarr", **CASES[case])
    fz.reset_stats()
    for sel in SELECTIONS:
        _same(_read_ferry(tmp_path / "a.zarr", sel), ref[sel])
    s = fz.stats()
    assert s["plans"] > 0 and s["chunks_cpu"] > 0 and s["chunks_gpu"] == 0
    if "sharded" in case:
        assert s["shard_indexes"] > 0


def _read_counted(path, selection=Ellipsis):
    """Reads through ferry; returns the result and the stats of the read alone."""
    with fz.enable():
        z = zarr.open_array(store=fz.Store(path), mode="r")
        fz.reset_stats()
        return z[selection], fz.stats()


def test_one_plan_per_read(tmp_path):
    ref = _write(tmp_path / "a.zarr", dtype="float32", compressor=ZstdCodec(level=1))
    got, s = _read_counted(tmp_path / "a.zarr")
    _same(got, ref)
    chunks = 5 * 4 * 1
    assert s["plans"] == 1 and s["requests"] == chunks and s["chunks_cpu"] == chunks


def test_sharded_inner_chunks_in_one_plan(tmp_path):
    ref = _write(tmp_path / "a.zarr", dtype="int16", chunks=(2, 3, 5), shards=(8, 12, 5))
    got, s = _read_counted(tmp_path / "a.zarr")
    _same(got, ref)
    shards = 5 * 2
    # one plan for the shard indexes, one for every inner chunk of every shard
    assert s["plans"] == 2 and s["shard_indexes"] == shards
    # a slice reads only the inner chunks it touches
    got, s = _read_counted(tmp_path / "a.zarr", (slice(0, 2), slice(0, 3)))
    _same(got, ref[0:2, 0:3])
    assert s["plans"] == 2 and s["requests"] == 1 + 1


def test_write_through_ferry_read_by_zarr(tmp_path):
    data = np.arange(np.prod(SHAPE), dtype=">i4").reshape(SHAPE)
    for shards in (None, (8, 12, 5)):
        path = tmp_path / ("w%s.zarr" % bool(shards))
        with fz.enable():
            z = zarr.create_array(
                store=fz.Store(path),
                shape=SHAPE,
                chunks=(4, 6, 5),
                shards=shards,
                dtype="int32",
                serializer=BytesCodec(endian="big"),
                compressors=[ZstdCodec(level=1), Crc32cCodec()],
                fill_value=0,
            )
            z[...] = data
            z[1:3, 2:4] = -1
        expect = data.astype("i4")
        expect[1:3, 2:4] = -1
        _same(zarr.open_array(store=str(path), mode="r")[...], expect)
        _same(_read_ferry(path), expect)


def test_store_byte_ranges(tmp_path):
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
    from zarr.core.sync import sync

    store = fz.Store(tmp_path / "s")
    proto = default_buffer_prototype()
    payload = bytes(range(256)) * 3
    sync(store.set("a/b/c", proto.buffer.from_bytes(payload)))
    assert sync(store.exists("a/b/c")) and not sync(store.exists("a/b/x"))
    assert sync(store.get("a/b/c", proto)).to_bytes() == payload
    assert sync(store.get("a/b/c", proto, RangeByteRequest(10, 20))).to_bytes() == payload[10:20]
    assert sync(store.get("a/b/c", proto, OffsetByteRequest(700))).to_bytes() == payload[700:]
    assert sync(store.get("a/b/c", proto, SuffixByteRequest(5))).to_bytes() == payload[-5:]
    assert sync(store.get("missing", proto)) is None
    got = sync(
        store.get_partial_values(
            proto,
            [("a/b/c", SuffixByteRequest(3)), ("nope", None), ("a/b/c", RangeByteRequest(0, 2))],
        )
    )
    assert got[0].to_bytes() == payload[-3:] and got[1] is None and got[2].to_bytes() == payload[:2]
    assert sync(store.getsize("a/b/c")) == len(payload)

    async def collect(it):
        return [x async for x in it]

    sync(store.set("a/d", proto.buffer.from_bytes(b"x")))
    assert sync(collect(store.list())) == ["a/b/c", "a/d"]
    assert sorted(sync(collect(store.list_dir("a")))) == ["b", "d"]
    assert sync(collect(store.list_prefix("a/b"))) == ["a/b/c"]
    sync(store.delete("a/d"))
    assert sync(collect(store.list())) == ["a/b/c"]
    with pytest.raises(ferry.UsageError):
        store.path_of("../etc/passwd")
    ro = store.with_read_only(True)
    with pytest.raises(ValueError):
        sync(ro.set("z", proto.buffer.from_bytes(b"1")))


def _chunk_file(path, key):
    return path.joinpath(*key.split("/"))


def test_bad_checksum_names_the_chunk(tmp_path):
    _write(tmp_path / "a.zarr", dtype="float32", crc=True)
    key = "c/1/2/0"
    p = _chunk_file(tmp_path / "a.zarr", key)
    raw = bytearray(p.read_bytes())
    raw[5] ^= 0xFF
    p.write_bytes(bytes(raw))
    with pytest.raises(ferry.ChunkError) as e:
        _read_ferry(tmp_path / "a.zarr")
    assert e.value.key == key and e.value.field == "crc32c" and key in str(e.value)
    assert isinstance(e.value, ferry.FormatError)


@pytest.mark.parametrize(
    "compressor", [ZstdCodec(level=1), GzipCodec(level=1)], ids=["zstd", "gzip"]
)
def test_truncated_chunk_names_the_chunk(tmp_path, compressor):
    _write(tmp_path / "a.zarr", dtype="int32", compressor=compressor)
    key = "c/2/0/0"
    p = _chunk_file(tmp_path / "a.zarr", key)
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ferry.ChunkError) as e:
        _read_ferry(tmp_path / "a.zarr")
    assert e.value.key == key and key in str(e.value)


def test_corrupt_inner_chunk_names_shard(tmp_path):
    _write(tmp_path / "a.zarr", dtype="float32", chunks=(4, 3, 5), shards=(8, 6, 5), crc=True)
    key = "c/0/0/0"
    p = _chunk_file(tmp_path / "a.zarr", key)
    raw = bytearray(p.read_bytes())
    raw[3] ^= 0x01  # inside the first inner chunk
    p.write_bytes(bytes(raw))
    with pytest.raises(ferry.ChunkError) as e:
        _read_ferry(tmp_path / "a.zarr")
    assert e.value.key.startswith(key + "[inner chunk") and e.value.field == "crc32c"


def test_crc32c_segmented_arithmetic():
    import google_crc32c
    from ferry.zarr import _kernels as K

    rng = np.random.default_rng(1)
    chunks = [
        rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        for n in (0, 1, 4095, 4096, 4097, 3 * 4096 + 17)
    ]
    assert K.crc32c_segmented_host(chunks) == [google_crc32c.value(c) for c in chunks]


# -- the frame check that guards nvCOMP -------------------------------------------------------


def _frames():
    """Real zstd and gzip chunks written by numcodecs: (codec, encoded bytes, decoded size)."""
    import numcodecs

    rng = np.random.default_rng(3)
    datas = [
        np.zeros(0, np.uint8),
        np.arange(960, dtype=np.uint8),
        rng.integers(0, 256, 5000, dtype=np.uint8),  # incompressible: raw blocks
        np.zeros(300_000, np.uint8),  # RLE / highly compressible, several blocks
        rng.integers(0, 256, 300_000, dtype=np.uint8),  # several raw blocks
        np.repeat(rng.integers(0, 256, 4000, dtype=np.uint8), 97),  # compressed blocks
    ]
    out = []
    for d in datas:
        for level in (1, 3):
            out.append(("zstd", bytes(numcodecs.Zstd(level=level).encode(d)), d.size))
        out.append(("gzip", bytes(numcodecs.GZip(level=1).encode(d)), d.size))
    return out


def _mutations(name, raw, size):
    """(label, chunk bytes, decoded size, expected status or None for "anything but OK")."""
    from ferry.zarr import _frames as F

    yield "truncated to half", raw[: len(raw) // 2], size, None
    yield "one byte short", raw[:-1], size, None
    yield "empty", b"", size, F.SHORT
    yield "trailing garbage", raw + b"\x00\x01\x02", size, None
    yield "wrong size", raw, size + 1, F.SIZE
    flipped = bytearray(raw)
    flipped[0] ^= 0xFF
    yield "magic flipped", bytes(flipped), size, F.MAGIC
    if name == "zstd":
        yield "two frames", raw + raw, size, F.TRAILING
        reserved = bytearray(raw)
        reserved[4] |= 0x08
        yield "reserved header bit", bytes(reserved), size, F.HEADER
        dictionary = bytearray(raw)
        dictionary[4] |= 0x01
        yield "dictionary ID", bytes(dictionary), size, F.HEADER
        skippable = (0x184D2A50).to_bytes(4, "little") + (4).to_bytes(4, "little") + b"abcd"
        yield "skippable frame", skippable + raw, size, F.MAGIC
    else:
        cm = bytearray(raw)
        cm[2] = 7
        yield "not deflate", bytes(cm), size, F.HEADER
        flags = bytearray(raw)
        flags[3] |= 0x20
        yield "reserved flag", bytes(flags), size, F.HEADER
        if len(raw) < 0xFFFF:
            fextra = bytearray(raw[:10])
            fextra[3] |= 0x04
            yield "FEXTRA past the end", bytes(fextra) + b"\xff\xff" + raw[10:], size, F.SHORT


def _zstd_block_header(raw, block):
    """The offset of the header of block `block` (0-based) of a single-frame zstd chunk."""
    fhd = raw[4]
    single = (fhd >> 5) & 1
    i = (5 if single else 6) + (single, 2, 4, 8)[fhd >> 6]
    for _ in range(block):
        h = int.from_bytes(raw[i : i + 3], "little")
        i += 3 + (1 if (h >> 1) & 3 == 1 else h >> 3)
    return i


def test_frame_check_reference():
    import numcodecs
    from ferry.zarr import _frames as F

    for name, raw, size in _frames():
        assert F.check(name, raw, size) == F.OK, (name, len(raw), size)
        assert F.check(name, np.frombuffer(raw, np.uint8), size) == F.OK
        for label, data, expect_size, want in _mutations(name, raw, size):
            got = F.check(name, data, expect_size)
            assert got != F.OK, (name, size, label)
            if want is not None:
                assert got == want, (name, size, label, got)
    # a reserved block type, and a block size over 128 KiB, in zstd's block headers
    raw = bytes(numcodecs.Zstd(level=1).encode(np.zeros(300_000, np.uint8)))
    i = _zstd_block_header(raw, 0)
    bad = bytearray(raw)
    bad[i] |= 0x06
    assert F.check("zstd", bytes(bad), 300_000) == F.BLOCK
    bad = bytearray(raw)
    bad[i + 2] = 0xFF
    assert F.check("zstd", bytes(bad), 300_000) == F.BLOCK
    # gzip's optional header fields are walked, and such members still decode
    import gzip
    import io

    payload = np.arange(1000, dtype=np.uint8).tobytes()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="chunk.bin", mode="wb", fileobj=buf, mtime=0) as g:
        g.write(payload)
    named = buf.getvalue()
    assert named[3] & 0x08
    assert F.check("gzip", named, len(payload)) == F.OK
    assert F.check("gzip", named[:14], len(payload)) == F.SHORT


def _compile_frame_check(tmp_path):
    """The CUDA C source of the frame check built for the host (a loop standing in for the
    grid), loaded through ctypes; None where there is no C++ compiler."""
    import ctypes
    import shutil

    from ferry.zarr import _frames as F

    cxx = next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if cxx is None:
        return None
    prelude = (
        "#define __device__ static\n#define __global__\n"
        "struct ferry_dim3 { unsigned int x; };\n"
        "static ferry_dim3 blockIdx, blockDim, threadIdx;\n"
    )
    driver = (
        'extern "C" void ferry_frame_check_host(const unsigned char* block,'
        " const long long* where, long long n, long long expected, int codec, int* status) {\n"
        "  blockDim.x = 1; threadIdx.x = 0;\n"
        "  for (long long c = 0; c < n; ++c) { blockIdx.x = (unsigned int)c;"
        " ferry_frame_check(block, where, n, expected, codec, status); }\n}\n"
    )
    src = tmp_path / "frames.cpp"
    src.write_text(prelude + F.SOURCE + driver)
    lib = tmp_path / "frames.so"
    subprocess.run(
        [cxx, "-O1", "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(lib), str(src)], check=True
    )
    return ctypes.CDLL(str(lib))


def _frame_cases():
    """Chunks (codec, bytes, decoded size): the real frames, their mutations, and random
    single-byte corruptions of their headers and block headers."""
    rng = np.random.default_rng(4)
    cases = []
    for name, raw, size in _frames():
        cases.append((name, raw, size))
        cases.extend((name, data, s) for _label, data, s, _want in _mutations(name, raw, size))
        for _ in range(40):
            bad = bytearray(raw)
            if bad:
                i = int(rng.integers(0, min(len(bad), 24)))
                bad[i] ^= 1 << int(rng.integers(0, 8))
            cases.append((name, bytes(bad), size))
        for _ in range(10):
            cases.append((name, raw[: int(rng.integers(0, len(raw) + 1))], size))
    return cases


def test_frame_check_kernel_source_matches_reference(tmp_path):
    import ctypes

    from ferry.zarr import _frames as F

    lib = _compile_frame_check(tmp_path)
    if lib is None:
        pytest.skip("no C++ compiler to build the kernel's source for the host")
    fn = lib.ferry_frame_check_host
    fn.restype = None
    fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_longlong,
        ctypes.c_longlong,
        ctypes.c_int,
        ctypes.c_void_p,
    ]
    # each chunk ends where an inaccessible page begins: a read past its end faults
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = mmap.PAGESIZE
    span = -(-max(len(d) for _n, d, _s in _frame_cases()) // page) * page
    area = mmap.mmap(-1, span + page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(area))
    assert libc.mprotect(base + span, page, 0) == 0  # PROT_NONE
    try:
        for name, data, size in _frame_cases():
            start = span - len(data)
            area[start:span] = data
            where = np.array([start, len(data)], dtype=np.int64)
            status = np.full(1, -1, dtype=np.int32)
            fn(base, where.ctypes.data, 1, size, F.CODECS[name], status.ctypes.data)
            assert int(status[0]) == F.check(name, data, size), (name, len(data), size)
    finally:
        libc.mprotect(base + span, page, 3)  # PROT_READ | PROT_WRITE, so that it unmaps


def test_import_ferry_does_not_import_zarr():
    code = "import sys, ferry; assert 'zarr' not in sys.modules and 'ferry.zarr' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))


# -- GPU ------------------------------------------------------------------------------------


def _read_ferry_gpu(path, selection=Ellipsis):
    with fz.enable(), zarr.config.enable_gpu():
        z = zarr.open_array(store=fz.Store(path), mode="r")
        return z[selection]


@pytest.fixture
def nvcomp(cupy):
    reason = fz.nvcomp_unavailable_reason()
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_reads_match_zarr(tmp_path, cupy, nvcomp, case):
    ref = _write(tmp_path / "a.zarr", **CASES[case])
    fz.reset_stats()
    for sel in SELECTIONS:
        got = _read_ferry_gpu(tmp_path / "a.zarr", sel)
        assert isinstance(got, cupy.ndarray)
        want = ref[sel]
        if want.dtype.byteorder == ">":
            want = want.astype(want.dtype.newbyteorder("="))
        _same(cupy.asnumpy(got), np.asarray(want))
    s = fz.stats()
    assert s["chunks_gpu"] > 0 and s["chunks_cpu"] == 0 and s["cpu_fallbacks"] == {}


def test_gpu_crc32c_kernel(cupy):
    import google_crc32c
    from ferry.zarr import _kernels as K

    rng = np.random.default_rng(2)
    host = [
        rng.integers(0, 256, n, dtype=np.uint8)
        for n in (0, 1, 4095, 4096, 4097, 1 << 20, (5 << 20) + 3)
    ]
    got = K.crc32c([cupy.asarray(h) for h in host], True).get()
    assert [int(x) for x in got] == [google_crc32c.value(h.tobytes()) for h in host]


def test_gpu_corrupt_chunks(tmp_path, cupy, nvcomp):
    _write(tmp_path / "a.zarr", dtype="float32", compressor=ZstdCodec(level=1), crc=True)
    key = "c/1/1/0"
    p = _chunk_file(tmp_path / "a.zarr", key)
    raw = bytearray(p.read_bytes())
    raw[2] ^= 0xFF
    p.write_bytes(bytes(raw))
    with pytest.raises(ferry.ChunkError) as e:
        _read_ferry_gpu(tmp_path / "a.zarr")
    assert e.value.key == key and e.value.field == "crc32c"
    # truncated or header-corrupt frames are caught before nvCOMP, which assumes well-formed
    # input (a truncated zstd chunk once ended the CUDA context with an illegal address)
    damages = {
        "truncated": lambda raw: raw[: len(raw) // 2],
        "magic": lambda raw: bytes([raw[0] ^ 0xFF]) + raw[1:],
        "header": lambda raw: raw[:3] + bytes([raw[3] ^ 0xC0, raw[4] ^ 0xC0]) + raw[5:],
        "trailing": lambda raw: raw + b"\x00" * 7,
    }
    for codec, cname in ((ZstdCodec(level=1), "zstd"), (GzipCodec(level=1), "gzip")):
        ref = _write(tmp_path / ("%s.zarr" % cname), dtype="float32", compressor=codec)
        for damage, fn in damages.items():
            path = tmp_path / ("%s-%s.zarr" % (cname, damage))
            _write(path, dtype="float32", compressor=codec)
            p = _chunk_file(path, key)
            p.write_bytes(fn(p.read_bytes()))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    got = _read_ferry_gpu(path)
                except ferry.ChunkError as e:
                    assert e.key == key and e.field == cname, (cname, damage, e)
                else:  # damage the host decoder tolerates: right data, counted fallback
                    _same(cupy.asnumpy(got), ref)
            # the CUDA context is intact: a clean read decodes on the GPU as before
            fz.reset_stats()
            _same(cupy.asnumpy(_read_ferry_gpu(tmp_path / ("%s.zarr" % cname))), ref)
            assert fz.stats()["cpu_fallbacks"] == {}, (cname, damage)
        path = tmp_path / ("%s-truncated.zarr" % cname)
        with pytest.raises(ferry.ChunkError) as err, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _read_ferry_gpu(path)
        assert err.value.key == key


def test_gpu_frame_check_kernel(cupy):
    from ferry.zarr import _frames as F
    from ferry.zarr import _kernels as K

    cases = _frame_cases()
    for name in ("zstd", "gzip"):
        for size in sorted({s for n, _d, s in cases if n == name}):
            chunks = [d for n, d, s in cases if n == name and s == size]
            sizes = np.array([len(d) for d in chunks], dtype=np.int64)
            offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
            block = cupy.asarray(np.frombuffer(b"".join(chunks) or b"\0", np.uint8))
            batch = K.Batch(block, offsets, sizes, str, True)
            want = [F.check(name, d, size) for d in chunks]
            assert K.frame_status(name, batch, size).tolist() == want, (name, size)


def test_gpu_write_read_by_zarr(tmp_path, cupy, nvcomp):
    data = cupy.arange(np.prod(SHAPE), dtype=cupy.float32).reshape(SHAPE)
    path = tmp_path / "g.zarr"
    fz.reset_stats()
    with fz.enable(), zarr.config.enable_gpu():
        z = zarr.create_array(
            store=fz.Store(path),
            shape=SHAPE,
            chunks=(8, 6, 5),
            dtype="float32",
            serializer=BytesCodec(endian="big"),
            filters=[TransposeCodec(order=(1, 0, 2))],
            compressors=[ZstdCodec(level=1), Crc32cCodec()],
            fill_value=0,
        )
        z[...] = data
    assert fz.stats()["encoded_gpu"] + fz.stats()["encoded_cpu"] > 0
    _same(zarr.open_array(store=str(path), mode="r")[...].astype("f4"), cupy.asnumpy(data))


def test_gpu_store_buffers_are_on_the_device(tmp_path, cupy):
    from zarr.abc.store import RangeByteRequest
    from zarr.core.buffer import gpu
    from zarr.core.sync import sync

    store = fz.Store(tmp_path / "s")
    sync(store.set("k", default_buffer_prototype().buffer.from_bytes(b"0123456789")))
    buf = sync(store.get("k", gpu.buffer_prototype))
    assert isinstance(buf.as_array_like(), cupy.ndarray)
    assert buf.to_bytes() == b"0123456789"
    # metadata documents are read on the host, and still handed over in the GPU buffer asked
    # for; byte ranges hold, a missing one is None
    doc = b'{"zarr_format": 3, "node_type": "group"}'
    sync(store.set("g/zarr.json", default_buffer_prototype().buffer.from_bytes(doc)))
    for key, rng, want in (("g/zarr.json", None, doc), ("g/zarr.json", RangeByteRequest(1, 12), doc[1:12]),
                           ("g/.zattrs", None, None)):
        buf = sync(store.get(key, gpu.buffer_prototype, rng))
        if want is None:
            assert buf is None
        else:
            assert isinstance(buf.as_array_like(), cupy.ndarray) and buf.to_bytes() == want


@pytest.mark.parametrize("endian", ["little", "big"])
def test_uncompressed_rows_read_in_place(tmp_path, endian):
    # chunks that span whole rows are read straight into the result where the byte order
    # allows; edge and missing chunks still come out right
    data = np.arange(50 * 7, dtype="int32").reshape(50, 7)
    z = zarr.create_array(
        store=str(tmp_path / "r.zarr"),
        shape=data.shape,
        chunks=(8, 7),
        dtype="int32",
        serializer=BytesCodec(endian=endian),
        compressors=None,
        fill_value=-1,
    )
    z[:30] = data[:30]
    ref = zarr.open_array(store=str(tmp_path / "r.zarr"), mode="r")[...]
    for sel in (Ellipsis, (slice(8, 40),), (slice(3, 45), slice(1, 5))):
        got, s = _read_counted(tmp_path / "r.zarr", sel)
        _same(got, ref[sel])
        assert s["plans"] == 1


def test_many_chunks_read_in_place_in_one_plan(tmp_path):
    # a read of many whole uncompressed chunks is one plan, every chunk straight into the
    # result, missing ones the fill value
    n_chunks = 100
    data = np.arange(n_chunks * 32, dtype="float32")
    z = zarr.create_array(store=str(tmp_path / "m.zarr"), shape=data.shape, chunks=(32,),
                          dtype="float32", compressors=None, fill_value=-2)
    z[:] = data
    for i in (3, 17, 99):  # chunks that are not there read as the fill value
        os.unlink(tmp_path / "m.zarr" / "c" / str(i))
    ref = zarr.open_array(store=str(tmp_path / "m.zarr"), mode="r")[...]
    got, s = _read_counted(tmp_path / "m.zarr")
    _same(got, ref)
    assert (ref == -2).sum() == 3 * 32
    assert s["plans"] == 1 and s["requests"] == s["chunks_cpu"] == n_chunks - 3


def test_contiguous_region_agrees_with_numpy():
    from ferry.zarr._pipeline import _contiguous_region

    rng = np.random.default_rng(5)
    for _ in range(400):
        shape = tuple(int(x) for x in rng.integers(1, 6, rng.integers(1, 4)))
        a = np.zeros(shape, dtype="int16")
        strides = list(a.strides)
        sel = []
        for n in shape:
            lo = int(rng.integers(0, n))
            sel.append(slice(lo, int(rng.integers(lo + 1, n + 1))))
        sel = tuple(sel)
        region = a[sel]
        want = None
        if region.flags.c_contiguous:
            want = (region.__array_interface__["data"][0] - a.__array_interface__["data"][0], region.nbytes)
        assert _contiguous_region(sel, region.shape, shape, strides) == want, (shape, sel)
        # another extent than the chunk's, or a step, is never a region
        assert _contiguous_region(sel, tuple(x + 1 for x in region.shape), shape, strides) is None
        assert _contiguous_region((slice(0, 1, 2),) + sel[1:], region.shape, shape, strides) is None


def test_gpu_without_nvcomp_falls_back_counted(tmp_path, cupy, monkeypatch):
    from ferry.zarr import _kernels as K

    ref = _write(tmp_path / "a.zarr", dtype="float32", compressor=ZstdCodec(level=1))
    monkeypatch.setattr(K, "_nvcomp", None)
    monkeypatch.setattr(K, "_nvcomp_error", "nvCOMP is unavailable (forced by the test)")
    monkeypatch.setattr(K, "_warned", set())
    fz.reset_stats()
    with pytest.warns(RuntimeWarning, match="forced by the test"):
        got = _read_ferry_gpu(tmp_path / "a.zarr")
    _same(cupy.asnumpy(got), ref)
    s = fz.stats()
    assert s["cpu_fallbacks"] == {"nvCOMP is unavailable (forced by the test)": 20}


def test_opened_outside_enable_gpu_read_inside_without_cupy_says_what_to_do(tmp_path, monkeypatch):
    # zarr allocates a read's result before the store or the pipeline hears of it: an array
    # opened outside enable_gpu() (where ferry's checks saw host buffers) and read inside it
    # failed with zarr's "'NoneType' object has no attribute 'empty'" where CuPy is missing.
    from zarr.core.buffer import gpu

    from ferry.zarr import _store

    ref = _write(tmp_path / "a.zarr", dtype="float32")
    monkeypatch.setattr(gpu, "cp", None)  # CuPy missing, whether or not it is installed here
    monkeypatch.setattr(_store, "optional_module", lambda name: None)
    for pipeline in (fz.enable, lambda: zarr.config.set({})):
        with pipeline():
            z = zarr.open_array(store=fz.Store(tmp_path / "a.zarr"), mode="r")
            with zarr.config.enable_gpu(), pytest.raises(ferry.UsageError, match="install CuPy"):
                z[:4]
            _same(z[:4], ref[:4])  # outside it, the same array reads into host memory


def test_gpu_opened_outside_enable_gpu_read_inside(tmp_path, cupy):
    ref = _write(tmp_path / "a.zarr", dtype="float32")
    with fz.enable():
        z = zarr.open_array(store=fz.Store(tmp_path / "a.zarr"), mode="r")
        with zarr.config.enable_gpu():
            got = z[:8]
    assert isinstance(got, cupy.ndarray)
    _same(cupy.asnumpy(got), ref[:8])


def test_read_only_store_needs_its_root(tmp_path):
    from zarr.core.sync import sync

    store = fz.Store(tmp_path / "nowhere", read_only=True)
    with pytest.raises(FileNotFoundError) as e:
        sync(store._open())
    assert isinstance(e.value, ferry.FileError) and "nowhere" in str(e.value)


@pytest.mark.parametrize(
    "dtype,shape,chunks,compressed",
    [
        ("float32", (1000, 1300), (256, 320), False),  # 16-byte rows; edge chunks partial
        ("uint8", (61, 45, 30), (7, 13, 11), False),  # rows of 11 bytes, three dimensions
        ("int16", (300, 200), (64, 40), True),  # decoded by nvCOMP, then placed
    ],
)
@pytest.mark.parametrize("one_kernel", [True, False])
def test_gpu_whole_chunks_placed_in_one_kernel(
    tmp_path, cupy, monkeypatch, dtype, shape, chunks, compressed, one_kernel
):
    # Chunks that do not fill contiguous bytes of the result (2-D and 3-D tiles) are placed by
    # one kernel a group (or one by one); partial edge chunks, missing chunks (fill value) and
    # selections that cut chunks come out as zarr's own read gives them.
    from ferry.zarr import _pipeline

    monkeypatch.setattr(_pipeline, "PLACE_TILES_IN_ONE_KERNEL", one_kernel)
    if compressed and fz.nvcomp_unavailable_reason():
        pytest.skip(fz.nvcomp_unavailable_reason())
    rng = np.random.default_rng(7)
    data = rng.integers(0, 100, size=shape).astype(dtype)
    path = tmp_path / "t.zarr"
    z = zarr.create_array(
        store=str(path),
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        compressors=ZstdCodec(level=1) if compressed else None,
        fill_value=5,
    )
    z[...] = data
    os.unlink(path / "c" / "/".join(["1"] * len(shape)))  # a missing chunk reads as 5
    ref = zarr.open_array(store=str(path), mode="r")
    cut = tuple(slice(c // 2, n - c // 3) for c, n in zip(chunks, shape))
    for sel in (Ellipsis, cut):
        fz.reset_stats()
        got = _read_ferry_gpu(path, sel)
        _same(cupy.asnumpy(got), np.asarray(ref[sel]))
        s = fz.stats()
        if sel is Ellipsis:  # every chunk not at an edge, but the missing one
            whole = math.prod(n // c for n, c in zip(shape, chunks)) - 1 if one_kernel else 0
            assert s["chunks_placed_in_one_kernel"] == whole, s
        assert s["cpu_fallbacks"] == {}, s
