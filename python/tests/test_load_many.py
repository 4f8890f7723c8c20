"""ferry.load_many and ferry.iter_load against numpy: .npy of mixed dtypes, shapes, byte orders
and Fortran order, safetensors, raw files, order, duplicates, errors raised or skipped with the
file and its index, and a thousand small files."""

import errno
import os
import subprocess
import sys

import numpy as np
import pytest

import ferry

DTYPES = ["bool", "int8", "<i2", ">i4", "<u8", ">f2", "<f4", ">f8", "<c8", ">c16"]


def sample(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    a = rng.standard_normal(int(np.prod(shape))) * 100
    if dt.kind == "b":
        a = a > 0
    return a.astype(dt).reshape(shape)


def same(got, want):
    assert type(got) is np.ndarray
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.flags.f_contiguous == want.flags.f_contiguous
    np.testing.assert_array_equal(got, want)


@pytest.fixture
def npy_files(tmp_path):
    paths, arrays = [], []
    for i, dt in enumerate(DTYPES):
        shape = [(7,), (3, 5), (2, 3, 4), (), (0, 4)][i % 5]
        a = sample(dt, shape, i)
        if i % 3 == 1 and a.ndim >= 2:
            a = np.asfortranarray(a)
        p = tmp_path / ("a%02d.npy" % i)
        np.save(p, a)
        paths.append(str(p))
        arrays.append(np.load(p))
    return paths, arrays


def test_npy_mixed_in_order(npy_files):
    paths, arrays = npy_files
    got = ferry.load_many(paths)
    assert len(got) == len(paths)
    for g, w in zip(got, arrays):
        same(g, w)


def test_fortran_and_big_endian_kept(tmp_path):
    a = np.asfortranarray(np.arange(24, dtype=">f8").reshape(4, 6))
    np.save(tmp_path / "f.npy", a)
    (g,) = ferry.load_many([tmp_path / "f.npy"])
    same(g, np.load(tmp_path / "f.npy"))
    assert g.dtype.str == ">f8" and g.flags.f_contiguous


def test_npy_header_numpy_did_not_write(tmp_path):
    # A header in another spelling than np.save's still loads (numpy's own reader parses it).
    header = b"{'shape': (2, 2), 'fortran_order': False, 'descr': '<i2'}"
    header += b" " * (64 - 10 - len(header) - 1) + b"\n"
    (tmp_path / "x.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
                                     + np.arange(4, dtype="<i2").tobytes())
    (g,) = ferry.load_many([tmp_path / "x.npy"])
    same(g, np.arange(4, dtype="<i2").reshape(2, 2))


def test_structured_dtype(tmp_path):
    a = np.zeros(3, dtype=[("x", "<f4"), ("y", ">i8")])
    a["y"] = [1, 2, 3]
    np.save(tmp_path / "s.npy", a)
    (g,) = ferry.load_many([tmp_path / "s.npy"])
    np.testing.assert_array_equal(g, a)


def test_safetensors_dict_like_load(tmp_path, npy_files):
    p = tmp_path / "w.safetensors"
    want = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.ones(4, np.int64),
            "empty": np.zeros((0, 3), np.float16), "flag": np.array([True, False])}
    ferry.save(p, want, {"step": "3"})
    paths, arrays = npy_files
    got = ferry.load_many([paths[0], p, paths[1]])
    same(got[0], arrays[0])
    same(got[2], arrays[1])
    assert list(got[1]) == sorted(want) == list(ferry.load(p))
    for k in want:
        same(got[1][k], want[k])


def test_safetensors_bfloat16_goes_through_load(tmp_path):
    p = tmp_path / "bf.safetensors"
    ferry.save(p, {"w": np.ones(4, np.float32)}, checksums=False)  # the bytes are rewritten below
    text = p.read_bytes().replace(b'"F32"', b'"BF16"').replace(b"[0,16]", b"[0,8]")
    n = int.from_bytes(text[:8], "little")
    p.write_bytes(text[:8 + n] + text[8 + n:8 + n + 8])
    (g,) = ferry.load_many([p])
    want = ferry.load(p)
    assert list(g) == ["w"]
    assert np.asarray(g["w"], dtype=np.float32).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert type(g["w"]) is type(want["w"])


def test_raw_with_dtype_and_shape(tmp_path):
    a = np.arange(10, dtype="<u2")
    a.tofile(tmp_path / "r.bin")
    (g,) = ferry.load_many([tmp_path / "r.bin"], dtype="<u2")
    same(g, a)
    (g,) = ferry.load_many([tmp_path / "r.bin"], dtype="<u2", shape=(2, 4))
    same(g, a[:8].reshape(2, 4))
    with pytest.raises(ferry.FormatError, match=r"paths\[0\] .*r\.bin: .*needs 40 bytes"):
        ferry.load_many([tmp_path / "r.bin"], dtype="<u2", shape=(20,))
    with pytest.raises(ferry.UsageError, match=r"paths\[0\] .*r\.bin: .*raw file: pass dtype="):
        ferry.load_many([tmp_path / "r.bin"])


def test_dtype_converts_npy_like_load(tmp_path):
    np.save(tmp_path / "d.npy", np.arange(4, dtype=np.float64))
    (g,) = ferry.load_many([tmp_path / "d.npy"], dtype="float32")
    same(g, ferry.load(tmp_path / "d.npy", dtype="float32"))


def test_empty_list():
    assert ferry.load_many([]) == []
    assert ferry.load_many([], errors="skip") == ([], [])
    assert list(ferry.iter_load([])) == []


def test_duplicates_are_independent(npy_files):
    paths, arrays = npy_files
    got = ferry.load_many([paths[6], paths[6], paths[2]])
    same(got[0], arrays[6])
    same(got[1], arrays[6])
    got[0][...] = 0
    same(got[1], arrays[6])


def test_many_small_files(tmp_path):
    paths, arrays = [], []
    for i in range(1200):
        a = sample(DTYPES[i % len(DTYPES)], (i % 37 + 1,), i)
        p = tmp_path / ("m%04d.npy" % i)
        np.save(p, a)
        paths.append(p)
        arrays.append(a)
    got = ferry.load_many(paths)
    for g, w in zip(got, arrays):
        same(g, w)
    for g, w in zip(ferry.iter_load(paths, prefetch=32), arrays):
        same(g, w)


def test_raise_names_file_and_index(tmp_path, npy_files):
    paths, _ = npy_files
    missing = str(tmp_path / "missing.npy")
    with pytest.raises(FileNotFoundError) as e:
        ferry.load_many([paths[0], paths[1], missing, paths[2]])
    assert isinstance(e.value, ferry.FileError)
    assert e.value.errno == errno.ENOENT
    assert "paths[2]" in str(e.value) and missing in str(e.value)
    assert e.value.index == 2 and e.value.filename == missing


def test_raise_malformed(tmp_path, npy_files):
    paths, _ = npy_files
    bad = tmp_path / "bad.npy"
    np.save(bad, np.ones(100, np.float32))
    bad.write_bytes(bad.read_bytes()[:200])  # truncated in the payload
    with pytest.raises(ferry.FormatError) as e:
        ferry.load_many([paths[0], bad])
    assert "paths[1]" in str(e.value) and str(bad) in str(e.value)
    assert e.value.index == 1 and e.value.field == "shape"
    st = tmp_path / "bad.safetensors"
    st.write_bytes((10).to_bytes(8, "little") + b"{not json}")
    with pytest.raises(ferry.FormatError, match=r"paths\[0\] .*bad\.safetensors: .*not JSON"):
        ferry.load_many([st])


# Run as root, the check runs in a process that gives up its capabilities first (those that
# read any file whatever its mode), before ferry starts a thread: a file of mode 0 is then
# refused by the kernel as it is for any other user.
UNREADABLE = """
import ctypes, sys
if len(sys.argv) > 3:
    libc = ctypes.CDLL(None, use_errno=True)
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]
    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    for d in data:
        d.effective = 0
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
import ferry
try:
    ferry.load_many([sys.argv[1], sys.argv[2]])
except PermissionError as e:
    print("PermissionError:", e)
else:
    print("read")
"""


def test_unreadable(tmp_path, npy_files):
    paths, _ = npy_files
    p = tmp_path / "locked.npy"
    np.save(p, np.ones(3))
    p.chmod(0)
    args = [sys.executable, "-c", UNREADABLE, str(paths[0]), str(p)] + (["drop"] if os.geteuid() == 0 else [])
    run = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("PermissionError:") and "paths[1]" in run.stdout, run.stdout
    assert str(p) in run.stdout, run.stdout


def test_skip_returns_others_and_failures(tmp_path, npy_files):
    paths, arrays = npy_files
    missing = str(tmp_path / "missing.npy")
    got, failures = ferry.load_many([paths[0], missing, paths[3], str(tmp_path)], errors="skip")
    same(got[0], arrays[0])
    same(got[2], arrays[3])
    assert got[1] is None and got[3] is None
    assert [(f.index, f.path) for f in failures] == [(1, missing), (3, str(tmp_path))]
    assert isinstance(failures[0].error, FileNotFoundError)
    assert "paths[3]" in str(failures[1].error)
    got, failures = ferry.load_many(paths[:2], errors="skip")
    assert failures == [] and len(got) == 2


def test_bad_arguments(npy_files):
    paths, _ = npy_files
    with pytest.raises(ferry.UsageError, match="errors="):
        ferry.load_many(paths, errors="ignore")
    with pytest.raises(ferry.UsageError, match="list of paths"):
        ferry.load_many(paths[0])
    with pytest.raises(ferry.UsageError, match=r"paths\[1\] is int"):
        ferry.load_many([paths[0], 3])
    with pytest.raises(ferry.UsageError, match="prefetch"):
        next(ferry.iter_load(paths, prefetch=0))


def test_iter_load_in_order_and_errors(tmp_path, npy_files):
    paths, arrays = npy_files
    for g, w in zip(ferry.iter_load(paths, prefetch=3), arrays):
        same(g, w)
    missing = str(tmp_path / "missing.npy")
    it = ferry.iter_load([paths[0], missing, paths[1]])
    same(next(it), arrays[0])
    with pytest.raises(FileNotFoundError, match=r"paths\[1\]"):
        next(it)
    got = list(ferry.iter_load([paths[0], missing, paths[1]], errors="skip"))
    same(got[0], arrays[0])
    same(got[2], arrays[1])
    assert isinstance(got[1], ferry.LoadFailure) and got[1].index == 1


def test_device_cuda_loops_through_load(gpu, npy_files):
    from ferry._convert import host_to_numpy

    paths, arrays = npy_files
    got = ferry.load_many(paths[:4], device="cuda", like="ferry")
    for g, w in zip(got, arrays[:4]):
        assert g.device.startswith("cuda")
        np.testing.assert_array_equal(host_to_numpy(g.to_device("cpu")), w)
    it = ferry.iter_load(paths[:4], device="cuda", like="ferry")
    for g, w in zip(it, arrays[:4]):
        np.testing.assert_array_equal(host_to_numpy(g.to_device("cpu")), w)


def _gpu_lib(name):
    mod = pytest.importorskip(name, reason="%s is not installed" % name)
    return mod


def _to_host(x):
    if hasattr(x, "get"):  # CuPy
        return x.get()
    return x.cpu().numpy()


@pytest.mark.parametrize("lib", ["cupy", "cupy-capsules", "torch"])
def test_device_batched_equals_load(gpu, tmp_path, lib, monkeypatch):
    """Many files into GPU memory in one call: every array equals what ferry.load gives for
    its file (C order, native bytes), native C-ordered arrays come from the shared device
    blocks, and Fortran-ordered or big-endian files are made native and C-ordered on the GPU
    in one batch, with the same values. CuPy's arrays are made both ways: ndarrays over the
    memory's pointer (its default) and from DLPack capsules."""
    from ferry import _many_device

    if lib == "cupy-capsules":
        monkeypatch.setattr(_many_device, "views", False)
        lib = "cupy"
    mod = _gpu_lib(lib)
    paths, want = [], []
    for i in range(300):
        dt = ["<f4", "<i2", "<f8", "uint8", ">f4", "<c8", ">i8"][i % 7]
        shape = [(17,), (3, 5), (0, 2), (), (64, 33)][i % 5]
        a = sample(dt, shape, i)
        if i % 7 == 3 and a.ndim == 2:
            a = np.asfortranarray(a)
        p = tmp_path / ("f%03d.npy" % i)
        np.save(p, a)
        paths.append(str(p))
        # np.array, not np.ascontiguousarray: the latter makes a 0-d array 1-d.
        want.append(np.array(a, order="C").astype(a.dtype.newbyteorder("=")))
    like = mod.empty(0, device="cuda") if lib == "torch" else None
    got = ferry.load_many(paths, device="cuda", like=like)
    for g, w in zip(got, want):
        h = _to_host(g)
        assert h.shape == w.shape and h.dtype == w.dtype
        np.testing.assert_array_equal(h, w)
    if lib == "cupy":
        # Every array is C-contiguous, and keeps its memory: the pool's free blocks given
        # back and new arrays made over them leave the first ones' values as they were.
        assert all(g.flags.c_contiguous for g in got)
        mod.get_default_memory_pool().free_all_blocks()
        junk = [mod.full(1 << 20, 255, mod.uint8) for _ in range(8)]
        for g, w in zip(got[:50], want):
            np.testing.assert_array_equal(_to_host(g), w)
        del junk

    # Neighbouring files share blocks (runs of four here, for sixteen threads), one copy a
    # block, not one a file.
    assert _many_device.last_call["blocks"] < len(paths) / 2, _many_device.last_call


def test_device_batched_safetensors_and_errors(gpu, tmp_path):
    cupy = _gpu_lib("cupy")
    from safetensors.numpy import save_file

    save_file({"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.int64)},
              str(tmp_path / "m.safetensors"))
    np.save(tmp_path / "x.npy", np.arange(9, dtype=np.int32))
    paths = [str(tmp_path / "x.npy"), str(tmp_path / "nope.npy"), str(tmp_path / "m.safetensors")]
    got, failures = ferry.load_many(paths, device="cuda", errors="skip")
    assert got[1] is None and [f.index for f in failures] == [1]
    assert isinstance(got[0], cupy.ndarray)
    np.testing.assert_array_equal(got[0].get(), np.arange(9, dtype=np.int32))
    np.testing.assert_array_equal(got[2]["w"].get(), np.arange(12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(got[2]["b"].get(), np.ones(5, np.int64))
    with pytest.raises(FileNotFoundError, match=r"paths\[1\]"):
        ferry.load_many(paths, device="cuda")


def test_torch_host_tensors_and_the_dataloader_recipe(tmp_path):
    """like= a host torch tensor loads file by file (no GPU batching is asked for), and the
    DataLoader recipe of docs/python.md runs as written, on the CPU."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    paths = []
    for i in range(10):
        np.save(tmp_path / ("t%d.npy" % i), np.full((3, i + 1), i, np.float32))
        paths.append(str(tmp_path / ("t%d.npy" % i)))

    class NpyBatches(torch.utils.data.Dataset):
        def __init__(self, paths, device="cpu"):
            self.paths, self.like = paths, torch.empty(0, device=device)

        def __len__(self):
            return len(self.paths)

        def __getitem__(self, batch):
            return ferry.load_many([self.paths[i] for i in batch], like=self.like)

    ds = NpyBatches(paths)
    loader = DataLoader(ds, sampler=BatchSampler(SequentialSampler(ds), batch_size=4, drop_last=False),
                        batch_size=None, num_workers=0)
    got = [t for batch in loader for t in batch]
    assert len(got) == 10
    for i, t in enumerate(got):
        assert isinstance(t, torch.Tensor)
        np.testing.assert_array_equal(t.numpy(), np.full((3, i + 1), i, np.float32))


def test_a_sidecar_is_checked(tmp_path):
    """A raw or .npy file with a sidecar manifest (ferry verify --record) is checked against it,
    as ferry.fromfile checks it: a flipped byte raises IntegrityError naming the file."""
    raw = tmp_path / "r.bin"
    np.arange(1000, dtype=np.float32).tofile(raw)
    good = tmp_path / "g.npy"
    np.save(good, np.arange(5, dtype=np.float32))
    assert ferry.verify(str(raw), record=True)["status"] == 0
    (g, r) = ferry.load_many([good, raw], dtype=np.float32)
    np.testing.assert_array_equal(r, np.arange(1000, dtype=np.float32))
    data = bytearray(raw.read_bytes())
    data[100] ^= 1
    raw.write_bytes(bytes(data))
    with pytest.raises(ferry.IntegrityError, match=r"paths\[1\]"):
        ferry.load_many([good, raw], dtype=np.float32)


def test_the_device_reader_without_a_gpu_says_why(tmp_path):
    """The batched GPU reader where no GPU is seen: a clear error that says why, no crash and
    no arrays. In a process of its own with CUDA_VISIBLE_DEVICES empty, so that a machine with
    a GPU checks it too."""
    np.save(tmp_path / "a.npy", np.arange(3))
    code = "\n".join([
        "import ferry",
        "from ferry import _ferry",
        "try:",
        "    _ferry.read_whole_files_to_device([%r], viewable=lambda name: True, make=lambda cap: cap)" % str(
            tmp_path / "a.npy"),
        "except ferry.Error as e:",
        "    print('refused:', e)",
        "else:",
        "    print('loaded')",
    ])
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("refused:") and "GPU memory" in r.stdout, r.stdout


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_device_pinned_blocks_are_reused_without_corrupting(gpu, tmp_path, monkeypatch, lib):
    """A GPU load_many of more blocks than it keeps pinned: with one reading thread each block
    is read after earlier copies were done, so their pinned blocks are taken again, and every
    byte of every array still equals the file's."""
    mod = _gpu_lib(lib)
    from ferry import _many, _many_device

    monkeypatch.setattr(_many, "_WORKERS", 1)
    paths, want = [], []
    for i in range(96):  # 96 files of 512 KiB: 16 blocks of 3 MiB
        a = np.random.default_rng(i).integers(0, 1 << 31, 128 << 10, dtype=np.int32)
        p = tmp_path / ("r%02d.npy" % i)
        np.save(p, a)
        paths.append(str(p))
        want.append(a)
    like = mod.empty(0, device="cuda") if lib == "torch" else None
    got = ferry.load_many(paths, device="cuda", like=like)
    info = dict(_many_device.last_call)
    assert info["blocks"] >= 12
    assert info["pinned_reused"] > 0, info
    assert info["pinned_made"] + info["pinned_reused"] == info["blocks"]
    for g, w in zip(got, want):
        assert isinstance(g, mod.ndarray if lib == "cupy" else mod.Tensor)
        np.testing.assert_array_equal(_to_host(g), w)


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_device_types_the_library_lacks_go_through_load(gpu, tmp_path, lib):
    """bfloat16 tensors (which CuPy lacks) among files the batched reader takes: each file
    comes back as ferry.load gives it, in the order given."""
    mod = _gpu_lib(lib)
    pytest.importorskip("ml_dtypes", reason="ml_dtypes makes the bfloat16 sample")
    import ml_dtypes
    from safetensors.numpy import save_file

    bf = np.arange(12, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(3, 4)
    save_file({"w": bf, "b": np.ones(5, np.int64)}, str(tmp_path / "m.safetensors"))
    np.save(tmp_path / "x.npy", np.arange(9, dtype=">i4"))
    paths = [str(tmp_path / n) for n in ("x.npy", "m.safetensors", "x.npy")]
    like = mod.empty(0, device="cuda") if lib == "torch" else None
    got = ferry.load_many(paths, device="cuda", like=like)
    for p, g in zip(paths, got):
        w = ferry.load(p, device="cuda", like=like)
        assert type(g) is type(w), p
        if isinstance(w, dict):
            assert sorted(g) == sorted(w)
            for k in w:
                assert type(g[k]) is type(w[k]) and tuple(g[k].shape) == tuple(w[k].shape), k
            if lib == "torch":
                assert bool((g["w"] == w["w"]).all()) and str(g["w"].dtype) == "torch.bfloat16"
    np.testing.assert_array_equal(_to_host(got[0]), np.arange(9, dtype=np.int32))
    np.testing.assert_array_equal(_to_host(got[2]), np.arange(9, dtype=np.int32))
