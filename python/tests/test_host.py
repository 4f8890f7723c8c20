"""Host-memory tests against numpy: fromfile/tofile, .npy and safetensors load/save, every
dtype, both byte orders, Fortran order, open files with a position, errors."""

import errno
import os

import numpy as np
import pytest

import ferry
import ferry.numpy as fnp

NUMPY_TYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "float16", "float32", "float64", "complex64", "complex128"]


def sample(dtype, shape=(3, 5), seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt.kind == "b":
        a = rng.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt.newbyteorder("="), endpoint=True)
    elif dt.kind == "c":
        a = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    else:
        a = rng.standard_normal(n) * 100
    return a.astype(dt).reshape(shape)


def orders(dtype):
    return ["<", ">"] if np.dtype(dtype).itemsize > 1 else ["|"]


CASES = [(t, o) for t in NUMPY_TYPES for o in orders(t)]


@pytest.mark.parametrize("name,order", CASES)
def test_fromfile_matches_numpy(tmp_path, name, order):
    dt = np.dtype(name).newbyteorder(order) if order != "|" else np.dtype(name)
    a = sample(dt)
    p = tmp_path / "x.bin"
    a.tofile(p)
    got = ferry.fromfile(p, dtype=dt)
    want = np.fromfile(p, dtype=dt)
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    got = ferry.fromfile(str(p), dtype=dt, count=4, offset=dt.itemsize * 2)
    np.testing.assert_array_equal(got, np.fromfile(p, dtype=dt, count=4, offset=dt.itemsize * 2))
    got = fnp.fromfile(p, dt, 7, "", dt.itemsize)
    np.testing.assert_array_equal(got, np.fromfile(p, dt, 7, "", dt.itemsize))


@pytest.mark.parametrize("name,order", CASES)
def test_tofile_matches_numpy(tmp_path, name, order):
    dt = np.dtype(name).newbyteorder(order) if order != "|" else np.dtype(name)
    a = sample(dt, (4, 6))
    for arr in (a, np.asfortranarray(a)):
        ferry.tofile(arr, tmp_path / "f.bin")
        arr.tofile(tmp_path / "n.bin")
        assert (tmp_path / "f.bin").read_bytes() == (tmp_path / "n.bin").read_bytes()


def test_fromfile_shape_and_short_counts(tmp_path):
    p = tmp_path / "x.bin"
    np.arange(12, dtype=np.int32).tofile(p)
    got = ferry.fromfile(p, np.int32, shape=(3, 4))
    np.testing.assert_array_equal(got, np.arange(12, dtype=np.int32).reshape(3, 4))
    # numpy returns what there is when the count runs past the end, and drops a partial item.
    np.testing.assert_array_equal(ferry.fromfile(p, np.int32, count=100), np.fromfile(p, np.int32, count=100))
    with open(p, "ab") as f:
        f.write(b"\x01\x02")
    np.testing.assert_array_equal(ferry.fromfile(p, np.int32), np.fromfile(p, np.int32))
    assert ferry.fromfile(p, np.int32, offset=48).shape == (0,)
    with pytest.raises(ValueError):
        ferry.fromfile(p, np.int32, shape=(5, 5))  # more than the file holds
    with pytest.raises(ValueError):
        ferry.fromfile(p, np.int32, offset=1000)


def test_fromfile_out_reads_into_the_callers_array(tmp_path):
    p = tmp_path / "x.bin"
    a = np.arange(1000, dtype=np.float32)
    a.tofile(p)
    out = np.full(1000, -1, np.float32)
    assert ferry.fromfile(p, np.float32, out=out) is out
    np.testing.assert_array_equal(out, a)
    part = np.zeros(10, np.float32)
    ferry.fromfile(p, np.float32, count=10, offset=40, out=part)
    np.testing.assert_array_equal(part, a[10:20])
    big = np.zeros((4, 5), ">f4")  # numpy keeps the file's byte order, as asked
    a.astype(">f4").tofile(p)
    ferry.fromfile(p, ">f4", out=big)
    np.testing.assert_array_equal(big.ravel(), a[:20])
    with open(p, "rb") as f:  # an open file moves past what was read
        f.read(8)
        part = np.zeros(10, ">f4")
        ferry.fromfile(f, ">f4", out=part)
        assert f.tell() == 8 + part.nbytes
        np.testing.assert_array_equal(part, a[2:12])
    # Refused, with nothing read: another dtype, another byte order, a count that differs, a
    # view that is not contiguous, too few items left in the file, device= beside out=.
    with pytest.raises(ferry.UsageError, match="dtype"):
        ferry.fromfile(p, ">f4", out=np.zeros(10, np.int32))
    with pytest.raises(ferry.UsageError, match="byte order"):
        ferry.fromfile(p, ">f4", out=np.zeros(10, "<f4"))
    with pytest.raises(ferry.UsageError, match="count"):
        ferry.fromfile(p, ">f4", count=3, out=np.zeros(10, ">f4"))
    with pytest.raises(ferry.UsageError, match="contiguous"):
        ferry.fromfile(p, ">f4", out=np.zeros((10, 10), ">f4")[:, 1])
    with pytest.raises(ValueError, match="past the end"):
        ferry.fromfile(p, ">f4", out=np.zeros(2000, ">f4"))
    with pytest.raises(ferry.UsageError, match="out="):
        ferry.fromfile(p, ">f4", out=np.zeros(10, ">f4"), device="cpu")


def test_fromfile_open_file_position(tmp_path):
    p = tmp_path / "x.bin"
    a = np.arange(100, dtype=np.float64)
    a.tofile(p)
    with open(p, "rb") as f, open(p, "rb") as g:
        f.read(80)
        g.read(80)
        x = ferry.fromfile(f, np.float64, count=5, offset=8)
        y = np.fromfile(g, np.float64, count=5, offset=8)
        np.testing.assert_array_equal(x, y)
        assert f.tell() == g.tell()
        x = ferry.fromfile(f, np.float64)
        y = np.fromfile(g, np.float64)
        np.testing.assert_array_equal(x, y)
        assert f.tell() == g.tell() == p.stat().st_size
    with open(p, "rb") as f:
        parts = [fnp.fromfile(f, np.float64, count=30) for _ in range(4)]
    np.testing.assert_array_equal(np.concatenate(parts), a)


def test_tofile_open_file_position(tmp_path):
    p, q = tmp_path / "f.bin", tmp_path / "n.bin"
    parts = [np.arange(10, dtype=np.int16), np.ones((3, 3), np.float32, order="F"),
             np.array([True, False])]
    with open(p, "wb") as f, open(q, "wb") as g:
        f.write(b"header")
        g.write(b"header")
        for part in parts:
            fnp.tofile(part, f)
            part.tofile(g)
            assert f.tell() == g.tell()
    assert p.read_bytes() == q.read_bytes()


def test_text_mode_goes_to_numpy(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("1 2 3 4")
    np.testing.assert_array_equal(fnp.fromfile(p, dtype=int, sep=" "), [1, 2, 3, 4])
    fnp.tofile(np.array([1.5, 2.5]), tmp_path / "o.txt", sep=",")
    assert (tmp_path / "o.txt").read_text() == "1.5,2.5"


@pytest.mark.parametrize("name,order", CASES)
@pytest.mark.parametrize("fortran", [False, True])
def test_npy_load_matches_numpy(tmp_path, name, order, fortran):
    dt = np.dtype(name).newbyteorder(order) if order != "|" else np.dtype(name)
    a = sample(dt, (4, 3))
    if fortran:
        a = np.asfortranarray(a)
    p = tmp_path / "a.npy"
    np.save(p, a)
    want = np.load(p)
    for got in (ferry.load(p), fnp.load(p)):
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype
        assert got.flags.f_contiguous == want.flags.f_contiguous
        np.testing.assert_array_equal(got, want)
    got = ferry.load(p, c_order=True)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 0, 3), (2, 3, 4)])
def test_npy_shapes_round_trip(tmp_path, shape):
    a = sample(np.float32, shape) if 0 not in shape else np.zeros(shape, np.float32)
    ferry.save(tmp_path / "s.npy", a)
    b = np.load(tmp_path / "s.npy")
    assert b.shape == a.shape
    np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(ferry.load(tmp_path / "s.npy"), a)


@pytest.mark.parametrize("name,order", CASES)
def test_npy_save_matches_numpy(tmp_path, name, order):
    dt = np.dtype(name).newbyteorder(order) if order != "|" else np.dtype(name)
    a = sample(dt, (2, 5))
    ferry.save(tmp_path / "f.npy", a)
    np.save(tmp_path / "n.npy", a)
    assert (tmp_path / "f.npy").read_bytes() == (tmp_path / "n.npy").read_bytes()
    fnp.save(tmp_path / "g", a)  # numpy appends .npy
    assert (tmp_path / "g.npy").read_bytes() == (tmp_path / "n.npy").read_bytes()


def test_npy_dtype_conversion(tmp_path):
    a = sample(np.float64, (3, 3))
    np.save(tmp_path / "d.npy", a)
    got = ferry.load(tmp_path / "d.npy", dtype="float32")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, a.astype(np.float32))


def test_numpy_load_falls_back(tmp_path):
    np.savez(tmp_path / "z.npz", x=np.arange(3))
    with fnp.load(tmp_path / "z.npz") as z:
        np.testing.assert_array_equal(z["x"], np.arange(3))
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError):
        fnp.load(tmp_path / "o.npy")  # pickles need allow_pickle, as with numpy
    assert fnp.load(tmp_path / "o.npy", allow_pickle=True)[0] == {"a": 1}
    np.save(tmp_path / "m.npy", np.arange(4))
    m = fnp.load(tmp_path / "m.npy", mmap_mode="r")
    np.testing.assert_array_equal(m, np.arange(4))
    with open(tmp_path / "m.npy", "rb") as f:
        np.testing.assert_array_equal(fnp.load(f), np.arange(4))


ST_TYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64", "complex64"]


def test_safetensors_round_trip(tmp_path):
    tensors = {t: sample(t, (2, 3), seed=i) for i, t in enumerate(ST_TYPES)}
    tensors["scalar"] = np.array(3.5, np.float32)
    tensors["empty"] = np.zeros((0, 4), np.int32)
    tensors["fortran"] = np.asfortranarray(sample(np.float32, (3, 4)))
    tensors["bigendian"] = sample(">f4", (5,))
    p = tmp_path / "t.safetensors"
    ferry.save(p, tensors, metadata={"format": "np", "step": 7})
    got = ferry.load(p)
    assert list(got) == sorted(tensors)
    for k, v in tensors.items():
        assert got[k].dtype == v.dtype.newbyteorder("=")
        assert got[k].shape == v.shape
        np.testing.assert_array_equal(got[k], v)
    meta = ferry.info(p)["metadata"]
    assert "crc32c" in meta.pop("ferry.checksums")  # written with the data (docs/integrity.md)
    assert meta == {"format": "np", "step": "7"}
    sub = ferry.load(p, names=["int8", "float32"])
    assert sorted(sub) == ["float32", "int8"]
    conv = ferry.load(p, names=["float64", "int32"], dtype="float32")
    assert conv["float64"].dtype == np.float32 and conv["int32"].dtype == np.int32


def test_safetensors_against_reference(tmp_path):
    st = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed")
    tensors = {t: sample(t, (3, 2), seed=i) for i, t in enumerate(ST_TYPES) if t != "complex64"}
    p = tmp_path / "ref.safetensors"
    st.save_file(tensors, str(p), metadata={"who": "reference"})
    got = ferry.load(p)
    for k, v in tensors.items():
        np.testing.assert_array_equal(got[k], v)
    q = tmp_path / "ferry.safetensors"
    ferry.save(q, tensors, {"who": "ferry"})
    back = st.load_file(str(q))
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype
        np.testing.assert_array_equal(back[k], v)


def test_bfloat16_without_or_with_ml_dtypes(tmp_path):
    p = tmp_path / "b.safetensors"
    ferry.save(p, {"x": np.arange(4, dtype=np.float32)})
    got = ferry.load(p, dtype="bfloat16")["x"]
    try:
        import ml_dtypes
    except ImportError:
        assert isinstance(got, ferry.Array) and got.dtype == "bfloat16"
        back = np.from_dlpack(got.astype("float32"))
        np.testing.assert_array_equal(back, np.arange(4, dtype=np.float32))
    else:
        assert got.dtype == np.dtype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(got.astype(np.float32), np.arange(4))


def test_file_read_write(tmp_path):
    p = tmp_path / "f.bin"
    a = np.arange(1 << 16, dtype=np.uint32)
    with ferry.File(p, "w") as f:
        assert f.write(a) == a.nbytes
        assert f.pwrite(a[:10], a.nbytes).result() == 40
    assert p.stat().st_size == a.nbytes + 40
    with ferry.File(str(p)) as f:
        assert f.size() == a.nbytes + 40
        b = np.empty_like(a)
        assert f.read(b) == a.nbytes
        np.testing.assert_array_equal(a, b)
        c = bytearray(40)
        fut = f.pread(c, a.nbytes)
        assert fut.result(timeout=30) == 40
        assert fut.done()
        np.testing.assert_array_equal(np.frombuffer(c, np.uint32), a[:10])
        d = np.zeros(8, np.uint32)
        assert f.read(d, 4, size=8) == 8
        np.testing.assert_array_equal(d[:2], a[1:3])
        plan = f.plan()
        assert isinstance(plan, dict)
        # Each reason in words has its stable code beside it (docs/gds.md#reason-codes).
        assert len(plan["codes"]) == len(plan["reasons"])
        assert all(isinstance(c["code"], str) and c["code"] != "?" for c in plan["codes"])
        assert f.stats()["bytes_read"] >= a.nbytes
    assert f.closed
    with pytest.raises(ValueError):
        f.size()


def test_read_batch_of_many_files(tmp_path):
    a = np.arange(1 << 16, dtype=np.uint16)
    b = np.arange(1 << 14, dtype=np.float64)
    a.tofile(tmp_path / "a.bin")
    b.tofile(tmp_path / "b.bin")
    with ferry.File(tmp_path / "a.bin") as fa, ferry.File(tmp_path / "b.bin") as fb:
        x, y, z = np.empty(100, np.uint16), np.empty(7, np.float64), np.empty(3, np.uint8)
        fut = ferry.read_batch([(fa, 20, x), (fb, 8 * 50, y), (fa, 1, z)])
        assert fut.result() == x.nbytes + y.nbytes + z.nbytes
        np.testing.assert_array_equal(x, a[10:110])
        np.testing.assert_array_equal(y, b[50:57])
        assert z.tobytes() == a.tobytes()[1:4]
        assert ferry.read_batch([]).result() == 0
        with pytest.raises(ferry.EndOfFileError):
            ferry.read_batch([(fa, a.nbytes - 2, np.empty(4, np.uint8))]).result()
        with pytest.raises(ferry.UsageError, match="read-only"):
            ferry.read_batch([(fa, 0, np.frombuffer(b"abcd", np.uint8))])
        for bad in ([("a.bin", 0, z)], [(fa, 0)], [(fa, 1.5, z)], [fa]):
            with pytest.raises(TypeError, match="piece 0 is not"):
                ferry.read_batch(bad)
        with pytest.raises(ferry.UsageError, match="negative"):
            ferry.read_batch([(fa, -4, z)])
        assert ferry.read_batch([[fa, 0, z]]).result() == 3


def test_file_asyncio(tmp_path):
    import asyncio

    p = tmp_path / "f.bin"
    a = np.arange(1000, dtype=np.float64)
    a.tofile(p)

    async def main():
        with ferry.File(p) as f:
            b = np.empty_like(a)
            n = await f.pread(b)
            return n, b

    n, b = asyncio.run(main())
    assert n == a.nbytes
    np.testing.assert_array_equal(a, b)


def test_file_errors(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"0123456789")
    with ferry.File(p) as f:
        buf = np.empty(20, np.uint8)
        with pytest.raises(ferry.EndOfFileError) as e:
            f.read(buf)
        assert isinstance(e.value, OSError) and isinstance(e.value, EOFError)
        assert e.value.filename == str(p)
        with pytest.raises(EOFError):
            f.pread(buf).result()
        with pytest.raises(ValueError):
            f.read(np.empty(4, np.uint8), size=8)  # larger than the buffer
        with pytest.raises((BufferError, ValueError)):
            f.read(b"immutable")
        with pytest.raises(ValueError):
            f.read(np.empty((4, 4), np.uint8)[:, ::2])  # not contiguous
        with pytest.raises(TypeError):
            f.read(object())
    with pytest.raises(FileNotFoundError) as e:
        ferry.File(tmp_path / "missing.bin")
    assert isinstance(e.value, ferry.FileError)
    assert e.value.errno == errno.ENOENT
    assert e.value.filename == str(tmp_path / "missing.bin")
    with pytest.raises(ValueError):
        ferry.File(p, "x")


def test_format_errors(tmp_path):
    p = tmp_path / "bad.npy"
    p.write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': 'zz'}\n" + b"\0" * 16)
    with pytest.raises(ferry.FormatError) as e:
        ferry.load(p)
    assert isinstance(e.value, ValueError) and isinstance(e.value, ferry.Error)
    assert e.value.filename == str(p)
    q = tmp_path / "bad.safetensors"
    q.write_bytes((1000).to_bytes(8, "little") + b"{}")
    with pytest.raises(ferry.FormatError):
        ferry.load(q, format="safetensors")
    st = tmp_path / "ok.safetensors"
    ferry.save(st, {"a": np.zeros(2)})
    with pytest.raises(ValueError):
        ferry.load(st, names=["nope"])
    with pytest.raises(FileNotFoundError):
        ferry.load(tmp_path / "none.npy")
    with pytest.raises(ValueError):
        ferry.save(tmp_path / "x.npy", {"a": np.zeros(2)})
    with pytest.raises(ValueError):
        ferry.save(tmp_path / "x.safetensors", np.zeros(2))
    with pytest.raises(TypeError):
        ferry.save(tmp_path / "o.npy", np.array(["text"]))
    (tmp_path / "raw.bin").write_bytes(b"1234")
    with pytest.raises(ValueError):
        ferry.load(tmp_path / "raw.bin")  # a raw file needs dtype=
    np.testing.assert_array_equal(ferry.load(tmp_path / "raw.bin", dtype=np.uint8), list(b"1234"))


def test_device_errors(tmp_path):
    p = tmp_path / "x.bin"
    np.zeros(4, np.float32).tofile(p)
    with pytest.raises(ValueError):
        ferry.fromfile(p, np.float32, device="tpu")
    with pytest.raises(ValueError):
        ferry.fromfile(p, np.float32, device="cuda", like=np.zeros(1))
    with pytest.raises(ValueError):
        ferry.fromfile(p, np.float32, like="cupy", device="cpu")


def test_pinned_and_ferry_arrays(tmp_path):
    p = tmp_path / "x.bin"
    a = np.arange(10, dtype=np.int64)
    a.tofile(p)
    arr = ferry.fromfile(p, np.int64, like="ferry")
    assert isinstance(arr, ferry.Array)
    assert arr.shape == (10,) and arr.dtype == "int64" and arr.device == "cpu"
    assert arr.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(arr), a)
    np.testing.assert_array_equal(np.asarray(ferry.Array.to_native(arr)._host_bytes()).view(np.int64), a)
    assert not hasattr(arr, "__cuda_array_interface__")
    ferry.tofile(arr, tmp_path / "y.bin")
    assert (tmp_path / "y.bin").read_bytes() == p.read_bytes()


def test_settings():
    s = ferry.settings
    before = s.as_dict()
    s.threads = 3
    assert s.threads == 3
    with s(threads=5, gds="off", task_size="8M"):
        assert s.threads == 5 and s.gds == "off" and s.task_size == 8 << 20
    assert s.threads == 3 and s.gds == before["gds"]
    with pytest.raises(ferry.SettingsError) as e:
        s.threads = "many"
    assert e.value.variable == "FERRY_THREADS"
    assert isinstance(e.value, ValueError)
    with pytest.raises(AttributeError):
        s.no_such_setting = 1
    assert s.resolved()["threads"] > 0
    s.reset()
    assert s.as_dict() == ferry._ferry.environment_settings()


def test_stats_and_doctor(tmp_path):
    ferry.reset_stats()
    p = tmp_path / "x.bin"
    np.zeros(1000, np.uint8).tofile(p)
    ferry.fromfile(p, np.uint8)
    st = ferry.stats()
    assert st["bytes_read"] >= 1000
    assert set(st) >= {"bytes_read", "bytes_written", "read", "write", "fallbacks"}
    report = ferry.doctor([tmp_path, p])
    assert isinstance(report, dict) and report
    report2 = ferry.doctor(str(p))
    assert isinstance(report2, dict)


def test_version():
    assert ferry.__version__.count(".") == 2


def test_futures_dropped_threads_and_gather(tmp_path):
    import asyncio
    import gc
    import threading

    p = tmp_path / "big.bin"
    a = (np.arange(1 << 22) % 251).astype(np.uint8)
    a.tofile(p)
    with ferry.File(p) as f:
        for i in range(100):
            f.pread(np.empty(1 << 16, np.uint8), i * 1000)  # dropped unfinished: waited for
        gc.collect()

        async def gather():
            bufs = [np.empty(1 << 16, np.uint8) for _ in range(32)]
            counts = await asyncio.gather(*[f.pread(b, i << 16) for i, b in enumerate(bufs)])
            return counts, bufs

        counts, bufs = asyncio.run(gather())
        assert counts == [1 << 16] * 32
        for i, b in enumerate(bufs):
            np.testing.assert_array_equal(b, a[i << 16:(i + 1) << 16])
        errors = []

        def work(k):
            try:
                for i in range(20):
                    b = np.empty(1 << 18, np.uint8)
                    f.read(b, (k * 20 + i) << 10)
                    np.testing.assert_array_equal(b, a[(k * 20 + i) << 10:((k * 20 + i) << 10) + (1 << 18)])
            except Exception as e:  # reported below, with the thread's failure
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors


def test_dlpack_export_to_torch_cpu(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    p = tmp_path / "x.bin"
    np.arange(6, dtype=np.float32).tofile(p)
    t = ferry.fromfile(p, np.float32, like="torch", shape=(2, 3))
    assert isinstance(t, torch.Tensor) and t.shape == (2, 3)
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]]
    ferry.tofile(t, tmp_path / "y.bin")
    assert (tmp_path / "y.bin").read_bytes() == p.read_bytes()


def test_bfloat16_and_float8_to_torch_on_the_host(tmp_path):
    # numpy's DLPack knows no bfloat16: host tensors of it reach torch through ferry's own.
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    from safetensors.torch import save_file
    want = {"b": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "f": torch.arange(4, dtype=torch.float32)}
    save_file(want, tmp_path / "m.safetensors")
    got = ferry.load(tmp_path / "m.safetensors", like="torch")
    assert got["b"].dtype == torch.bfloat16 and torch.equal(got["b"], want["b"])
    assert torch.equal(got["f"], want["f"])
    ck = ferry.load_checkpoint(tmp_path / "m.safetensors", like="torch")
    assert torch.equal(ck["b"], want["b"])


def test_ml_dtypes_arrays(tmp_path):
    ml = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    x = np.arange(5, dtype=ml.bfloat16)
    y = np.arange(3, dtype=ml.float8_e4m3fn)
    z = np.asfortranarray(np.arange(6, dtype=ml.bfloat16).reshape(2, 3))
    p = tmp_path / "m.safetensors"
    ferry.save(p, {"x": x, "y": y, "z": z})
    got = ferry.load(p)
    assert got["x"].dtype == x.dtype and got["y"].dtype == y.dtype
    for k, v in {"x": x, "y": y, "z": z}.items():
        np.testing.assert_array_equal(got[k].astype(np.float32), v.astype(np.float32))
    ferry.tofile(x, tmp_path / "x.bin")
    np.testing.assert_array_equal(ferry.fromfile(tmp_path / "x.bin", ml.bfloat16), x)
    b = np.empty(5, ml.bfloat16)
    with ferry.File(tmp_path / "x.bin") as f:
        f.read(b)
    np.testing.assert_array_equal(b, x)
    assert ferry.load(p, names=["x", "z"], dtype="float32")["x"].dtype == np.float32
    with pytest.raises(ferry.UsageError, match="tensor 'y'"):  # float8 -> float32: refused, not skipped
        ferry.load(p, dtype="float32")


class DLPackOnly:
    """Memory reachable only through DLPack (as a CPU PyTorch tensor or JAX array is)."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


class CAIOnly:
    """Memory described only by the CUDA array interface (host memory here, no stream)."""

    def __init__(self, arr, strides=None):
        self._arr = arr
        self.__cuda_array_interface__ = {
            "shape": arr.shape, "typestr": arr.dtype.str, "version": 3, "stream": None,
            "data": (arr.ctypes.data, not arr.flags.writeable), "strides": strides,
        }


def test_memory_protocols(tmp_path):
    p = tmp_path / "x.bin"
    a = np.arange(64, dtype=np.int32).reshape(8, 8)
    a.tofile(p)
    for wrap in (DLPackOnly, CAIOnly):
        b = np.zeros_like(a)
        with ferry.File(p) as f:
            assert f.read(wrap(b)) == a.nbytes
        np.testing.assert_array_equal(a, b)
        ferry.save(tmp_path / "w.npy", wrap(a))
        np.testing.assert_array_equal(np.load(tmp_path / "w.npy"), a)
    f_order = np.asfortranarray(a)
    view = ferry._ferry.as_array(DLPackOnly(f_order))
    assert view.order == "F" and view.shape == (8, 8) and view.dtype == "int32"
    view = ferry._ferry.as_array(CAIOnly(f_order, strides=f_order.strides))
    assert view.order == "F"
    ferry.tofile(view, tmp_path / "c.bin")
    assert (tmp_path / "c.bin").read_bytes() == a.tobytes()
    with pytest.raises(ValueError):
        ferry._ferry.as_array(CAIOnly(a[:, ::2], strides=a[:, ::2].strides))
    ro = a.copy()
    ro.flags.writeable = False
    with ferry.File(p) as f, pytest.raises(ValueError):
        f.read(CAIOnly(ro))


def test_dlpack_export_forms(tmp_path):
    import ctypes

    p = tmp_path / "x.bin"
    np.arange(10, dtype=np.float64).tofile(p)
    arr = ferry.fromfile(p, np.float64, like="ferry")
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.restype = ctypes.c_int
    is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    assert is_valid(arr.__dlpack__(), b"dltensor")
    assert is_valid(arr.__dlpack__(max_version=(1, 1)), b"dltensor_versioned")
    assert is_valid(arr.__dlpack__(stream=None, max_version=(0, 8)), b"dltensor")
    same = np.from_dlpack(arr)
    assert same.ctypes.data == arr.data_ptr
    copy = arr.__dlpack__(max_version=(1, 1), copy=True)
    assert is_valid(copy, b"dltensor_versioned")
    with pytest.raises(BufferError):
        arr.__dlpack__(dl_device=(2, 0), copy=False)
    big = ferry._ferry.fromfile(p, ">f8", keep_byte_order=True)
    assert big.byteorder == ">"
    with pytest.raises(BufferError):
        big.__dlpack__()
    np.testing.assert_array_equal(np.from_dlpack(big.to_native()), np.fromfile(p, ">f8"))


def test_registering_a_file_holds_its_bytes_or_says_why_not(tmp_path):
    # With a GPU the registration holds the file's bytes until closed; without one it is
    # refused with the reason and the path (test_gpu.py reads through registrations).
    p = tmp_path / "x.bin"
    np.zeros(4096, np.uint8).tofile(p)
    held = ferry.registered_bytes()
    assert ferry.registration_limit() > 0
    if ferry.cuda_device_count() > 0:
        with ferry.register_file(p) as r:
            assert r.size == 4096 and ferry.registered_bytes() == held + 4096
            assert str(p) in repr(r)
    else:
        with pytest.raises(ferry.CudaError) as e:
            ferry.register_file(p)
        assert str(p) in str(e.value)
    assert ferry.registered_bytes() == held
