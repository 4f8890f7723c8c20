"""The edges a new user reaches early: destinations (out=, into=) checked before any byte moves,
numpy's drop-ins handing numpy the dtypes ferry has none for, names and paths that are not
UTF-8, files that say 0 bytes but have content, a GPU setting with no GPU, one-time imports kept
out of a load's timing, and the documented behaviour of split and save."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ferry
import ferry.numpy as fnp
from conftest import HAVE_GPU


def test_out_is_checked_before_any_byte_moves(tmp_path):
    p = tmp_path / "x.bin"
    np.arange(10, dtype=np.int16).tofile(p)
    data = bytes(20)
    with pytest.raises(ferry.UsageError, match=r"out=: the destination is read-only"):
        ferry.fromfile(p, np.int16, out=np.frombuffer(data, dtype=np.int16))
    with pytest.raises(ferry.UsageError, match=r"out=: the destination is read-only"):
        ferry.fromfile(p, np.uint8, out=memoryview(data))
    assert data == bytes(20)  # the immutable bytes object is untouched
    for out, why in [(np.zeros(5, np.int16), "count 10 does not match"),
                     (np.zeros(10, np.float32), "dtype"),
                     (np.zeros(20, np.int16)[::2], "C-contiguous"),
                     ([0] * 10, "a list has no memory")]:
        with pytest.raises(ferry.UsageError, match=why):
            ferry.fromfile(p, np.int16, count=10, out=out)
        if isinstance(out, np.ndarray):
            assert not out.any()
    out = bytearray(20)  # writable memory of another kind is taken as it is
    assert ferry.fromfile(p, np.uint8, out=out) is out
    assert bytes(out) == p.read_bytes()


def test_into_is_checked_before_any_byte_moves(tmp_path):
    st = tmp_path / "model.safetensors"
    ferry.save(st, {"w": np.arange(4, dtype=np.uint8)})
    data = bytes(4)
    for dest in (np.frombuffer(data, np.uint8), memoryview(data)):
        with pytest.raises(ferry.UsageError, match=r"into\['w'\]: the destination is read-only"):
            ferry.load_checkpoint(st, into={"w": dest})
    assert data == bytes(4)
    with pytest.raises(ferry.UsageError, match=r"into\['w'\]: a list has no memory"):
        ferry.load_checkpoint(st, into={"w": [0, 0, 0, 0]})
    dest = bytearray(4)
    ferry.load_checkpoint(st, into={"w": dest})
    assert bytes(dest) == bytes(range(4))


class _DLPackOnly:
    """Memory reachable only through DLPack: numpy's versioned export of a read-only array
    carries DLPack's read-only flag."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


class _CAIOnly:
    """Memory described only by the CUDA array interface, its read-only bit included."""

    def __init__(self, arr):
        self.__cuda_array_interface__ = {
            "shape": arr.shape, "typestr": arr.dtype.str, "version": 3, "stream": None,
            "data": (arr.ctypes.data, not arr.flags.writeable), "strides": None,
        }


def _read_only_arrays(data):
    """ferry.Arrays made from memory lent read-only, by each protocol that can say so."""
    ro = np.frombuffer(data, np.int16)
    yield "buffer", ferry._ferry.as_array(ro)
    yield "dlpack", ferry._ferry.as_array(_DLPackOnly(ro))
    yield "cai", ferry._ferry.as_array(_CAIOnly(ro))


def test_a_read_only_ferry_array_is_never_written(tmp_path):
    p = tmp_path / "x.bin"
    np.arange(10, dtype=np.int16).tofile(p)
    st = tmp_path / "model.safetensors"
    ferry.save(st, {"w": np.arange(10, dtype=np.int16)})
    data = bytes(20)
    for how, a in _read_only_arrays(data):
        assert a.readonly, how
        with pytest.raises(ferry.UsageError, match=r"fromfile: out=: the destination is read-only"):
            ferry.fromfile(p, np.int16, out=a)
        with pytest.raises(ferry.UsageError, match=r"out= is read-only"):  # the extension's own check
            ferry._ferry.fromfile_into(str(p), "<i2", a, -1, 0, True)
        with pytest.raises(ferry.UsageError, match=r"into\['w'\]: the destination is read-only"):
            ferry.load_checkpoint(st, into={"w": a})
        with ferry.File(p) as f:
            with pytest.raises(ferry.UsageError, match=r"File.read: buf: .*read-only"):
                f.read(a)
            with pytest.raises(ferry.UsageError, match=r"File.pread: buf: .*read-only"):
                f.pread(a)
            with pytest.raises(ferry.UsageError, match=r"piece 0 buffer: .*read-only"):
                ferry.read_batch([(f, 0, a)])
        # Its exports say read-only as well, so no consumer writes through them either.
        assert not np.from_dlpack(a).flags.writeable, how
        assert not a._host_bytes().flags.writeable, how
        ferry.save(tmp_path / "ro.npy", a)  # reading from it is fine
        np.testing.assert_array_equal(np.load(tmp_path / "ro.npy"), np.zeros(10, np.int16))
    assert data == bytes(20)
    # Writable memory gives writable arrays, which take the bytes.
    for a in (ferry._ferry.as_array(np.zeros(10, np.int16)), ferry.fromfile(p, np.int16, like="ferry")):
        assert not a.readonly
        ferry.fromfile(p, np.int16, out=a)
        np.testing.assert_array_equal(np.from_dlpack(a), np.arange(10, dtype=np.int16))


def _numpy_bytes(save, *args):
    import io

    buf = io.BytesIO()
    save(buf, *args)
    return buf.getvalue()


def test_numpy_drop_ins_give_numpy_the_dtypes_ferry_has_none_for(tmp_path):
    p = tmp_path / "s.bin"
    p.write_bytes(bytes(range(6)))
    structured = [("a", "u1"), ("b", "u1")]
    want = np.fromfile(p, dtype=structured)
    np.testing.assert_array_equal(fnp.fromfile(p, dtype=structured), want)
    with open(p, "rb") as f:
        np.testing.assert_array_equal(fnp.fromfile(f, dtype=structured), want)
    a = np.arange(3, dtype=np.longdouble)
    fnp.save(tmp_path / "l.npy", a)
    assert (tmp_path / "l.npy").read_bytes() == _numpy_bytes(np.save, a)
    fnp.tofile(a, tmp_path / "l.bin")
    assert (tmp_path / "l.bin").read_bytes() == a.tobytes()
    np.testing.assert_array_equal(fnp.fromfile(tmp_path / "l.bin", dtype=np.longdouble), a)


def test_save_takes_str_keys_of_utf8_text_only(tmp_path):
    st = tmp_path / "k.safetensors"
    a = np.ones(2, np.float32)
    for bad, why in [({None: a}, "must be a str, not NoneType"), ({1: a}, "must be a str, not int"),
                     ({os.fsdecode(b"w\xff"): a}, "is not UTF-8")]:
        with pytest.raises(ferry.UsageError, match="k.safetensors: .*tensor name.*" + why):
            ferry.save(st, bad)
        with pytest.raises(ferry.UsageError, match=why):
            ferry.save_checkpoint(tmp_path / "ck", bad)
    with pytest.raises(ferry.UsageError, match="metadata value of 'k'.* is not UTF-8"):
        ferry.save(st, {"w": a}, {"k": os.fsdecode(b"v\xfe")})
    assert not st.exists() and not (tmp_path / "ck" / "model.safetensors").exists()


def test_paths_that_are_not_utf8(tmp_path):
    missing = os.path.join(str(tmp_path), os.fsdecode(b"\xfe\xfdmissing.npy"))
    for call in (ferry.load, ferry.info, lambda p: ferry.fromfile(p, np.uint8)):
        with pytest.raises(FileNotFoundError) as e:
            call(missing)
        assert e.value.filename == missing
    name = os.path.join(str(tmp_path), os.fsdecode(b"\xff\xfex.npy"))
    np.save(name, np.arange(3))
    d = ferry.info(name)
    assert d["file"] == name  # the name reopens the file
    np.testing.assert_array_equal(ferry.load(d["file"]), np.arange(3))


def test_files_that_say_0_bytes_but_have_content_are_refused(tmp_path):
    for read in (lambda: ferry.fromfile("/proc/self/status", np.uint8),
                 lambda: ferry.load("/proc/self/status", dtype=np.uint8),
                 lambda: fnp.fromfile(open("/proc/self/status", "rb"), np.uint8)):
        with pytest.raises(ferry.FormatError, match="size: the file says it holds 0 bytes but has content"):
            read()
    (tmp_path / "empty.bin").write_bytes(b"")
    assert ferry.fromfile(tmp_path / "empty.bin", np.uint8).size == 0


@pytest.mark.skipif(HAVE_GPU, reason="the error of a machine without a GPU")
def test_pinned_memory_without_a_gpu_says_why(tmp_path):
    p = tmp_path / "x.bin"
    np.arange(4, dtype=np.float32).tofile(p)
    with pytest.raises(ferry.Error) as cuda:
        ferry.fromfile(p, np.float32, device="cuda")
    with pytest.raises(ferry.Error) as pinned:
        ferry.fromfile(p, np.float32, device="pinned")
    assert type(pinned.value) is type(cuda.value)
    assert ferry.cuda_unavailable_reason() in str(pinned.value)


def test_zarr_gpu_buffers_without_cupy_say_so(tmp_path):
    zarr = pytest.importorskip("zarr")
    import ferry.zarr
    from ferry._convert import optional_module

    if optional_module("cupy") is not None:
        pytest.skip("CuPy is installed")
    z = zarr.create_array(ferry.zarr.Store(tmp_path / "a.zarr"), shape=(8,), chunks=(4,), dtype="f4")
    z[:] = np.arange(8, dtype="f4")
    with zarr.config.enable_gpu(), pytest.raises(ferry.UsageError, match="CuPy cannot be imported"):
        zarr.open_array(store=ferry.zarr.Store(tmp_path / "a.zarr"), mode="r")[:]


_FIRST_LOAD = textwrap.dedent("""
    import importlib.abc, sys, time

    class SlowImport(importlib.abc.MetaPathFinder):
        # ml_dtypes as slow to import as it was on a cold machine (1.2 s seen there).
        def find_spec(self, name, path, target=None):
            if name == "ml_dtypes":
                time.sleep(0.5)
            return None

    sys.meta_path.insert(0, SlowImport())
    import ferry
    assert "ml_dtypes" not in sys.modules
    r = ferry.load_checkpoint(sys.argv[1])
    assert str(r["w"].dtype) == "bfloat16"
    print(r.stats["seconds"], r.stats["import_seconds"])
""")


def test_one_time_imports_are_kept_out_of_a_loads_seconds(tmp_path):
    pytest.importorskip("ml_dtypes")
    st = tmp_path / "bf16.safetensors"
    header = b'{"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}'
    st.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", _FIRST_LOAD, str(st)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seconds, imports = map(float, out.stdout.split())
    assert imports >= 0.5 and seconds < 0.4, (seconds, imports)


def test_split_puts_the_larger_parts_last_as_documented(tmp_path):
    st = tmp_path / "t.safetensors"
    ferry.save(st, {"w": np.arange(100, dtype=np.int32)})
    rows = [ferry.load_checkpoint(st, slices={"w": ferry.split(0, 3, k)})["w"] for k in range(3)]
    assert [len(r) for r in rows] == [33, 33, 34]
    np.testing.assert_array_equal(np.concatenate(rows), np.arange(100))
    assert "33, 33, 34" in ferry.split.__doc__


def test_a_dict_saves_as_safetensors_and_not_as_npy(tmp_path):
    a = np.ones(2, np.float32)
    ferry.save(tmp_path / "d", {"w": a})  # no extension ferry knows: safetensors
    assert ferry.info(tmp_path / "d")["format"] == "safetensors"
    with pytest.raises(ferry.UsageError, match="saved as safetensors, not npy"):
        ferry.save(tmp_path / "d.npy", {"w": a})
    assert not (tmp_path / "d.npy").exists()
    assert "a dict to ``.npy`` raises UsageError" in " ".join(ferry.save.__doc__.split())
