"""GPU tests: reads straight into GPU memory, the return rule, DLPack and CUDA array interface
round trips with CuPy, PyTorch and JAX, like=, device selection. Each test skips, with the
reason, when the GPU or the library it needs is missing."""

import numpy as np
import pytest

import ferry
import ferry.numpy as fnp

from test_host import CASES, sample


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "x.bin"
    a = np.arange(1 << 20, dtype=np.float32)
    a.tofile(p)
    return p, a


def test_fromfile_to_gpu_returns_cupy(cupy, data):
    p, a = data
    x = ferry.fromfile(p, np.float32, device="cuda")
    assert isinstance(x, cupy.ndarray)
    assert x.device.id == 0
    np.testing.assert_array_equal(cupy.asnumpy(x), a)
    assert ferry.stats()["bytes_read"] >= a.nbytes


def test_fromfile_out_on_the_gpu(cupy, torch, tmp_path):
    # Into the caller's tensor, no allocation: native as it is, big-endian swapped in place.
    p = tmp_path / "x.bin"
    a = np.arange(1 << 22, dtype=np.float32)
    a.tofile(p)
    out = torch.full((1 << 22,), -1.0, device="cuda")
    assert ferry.fromfile(p, np.float32, out=out) is out
    np.testing.assert_array_equal(out.cpu().numpy(), a)
    a.astype(">f4").tofile(p)
    c = cupy.zeros((1 << 10, 1 << 12), np.float32)
    ferry.fromfile(p, ">f4", out=c)
    np.testing.assert_array_equal(cupy.asnumpy(c).ravel(), a)
    with pytest.raises(ferry.UsageError, match="dtype"):
        ferry.fromfile(p, ">f4", out=torch.zeros(10, dtype=torch.int32, device="cuda"))


def test_large_reads_take_the_stream_lanes(cupy, tmp_path):
    # At or above FERRY_LANE_THRESHOLD a read into GPU memory goes through the stream lanes,
    # byte-exact, counted on the lanes route; below it through the workers' own buffers.
    p = tmp_path / "x.bin"
    a = np.random.default_rng(7).integers(0, 255, size=(40 << 20) + 4099, dtype=np.uint8)
    a.tofile(p)
    with ferry.settings(lane_threshold="8M", lane_buffer_size="1M"):
        ferry.reset_stats()
        x = ferry.fromfile(p, np.uint8, device="cuda")
        assert np.array_equal(cupy.asnumpy(x), a)
        routes = {(r["source"], r["mover"]): r for r in ferry.stats().get("routes", [])}
        assert routes[("posix", "lanes")]["read"]["bytes"] == a.nbytes, routes
        y = ferry.fromfile(p, np.uint8, count=(8 << 20) - 1, device="cuda")
        assert np.array_equal(cupy.asnumpy(y), a[: (8 << 20) - 1])
        assert ferry.stats()["routes"] and ("posix", "staged") in {
            (r["source"], r["mover"]) for r in ferry.stats()["routes"]}
    with ferry.settings(lane_threshold="off"):
        ferry.reset_stats()
        ferry.fromfile(p, np.uint8, device="cuda")
        assert ("posix", "lanes") not in {(r["source"], r["mover"]) for r in ferry.stats().get("routes", [])}


@pytest.mark.parametrize("name,order", CASES)
def test_fromfile_gpu_every_dtype(cupy, tmp_path, name, order):
    dt = np.dtype(name).newbyteorder(order) if order != "|" else np.dtype(name)
    a = sample(dt, (6, 7))
    p = tmp_path / "d.bin"
    a.tofile(p)
    x = ferry.fromfile(p, dt, device="cuda", shape=(6, 7))
    assert x.dtype == dt.newbyteorder("=")  # swapped to native on the GPU
    np.testing.assert_array_equal(cupy.asnumpy(x), a)


@pytest.mark.parametrize("name,order", CASES)
@pytest.mark.parametrize("fortran", [False, True])
def test_npy_gpu_every_dtype(cupy, tmp_path, name, order, fortran):
    dt = np.dtype(name).newbyteorder(order) if order != "|" else np.dtype(name)
    a = sample(dt, (5, 4))
    if fortran:
        a = np.asfortranarray(a)
    np.save(tmp_path / "a.npy", a)
    x = ferry.load(tmp_path / "a.npy", device="cuda")
    np.testing.assert_array_equal(cupy.asnumpy(x), a)
    y = ferry.load(tmp_path / "a.npy", device="cuda", c_order=True)
    assert y.flags.c_contiguous
    np.testing.assert_array_equal(cupy.asnumpy(y), a)


def test_file_object_position_gpu(cupy, data):
    p, a = data
    with open(p, "rb") as f:
        f.seek(400)
        x = fnp.fromfile(f, np.float32, count=100, like=cupy.empty(0))
        assert f.tell() == 800
    np.testing.assert_array_equal(cupy.asnumpy(x), a[100:200])


def test_device_selection(cupy, data, gpu):
    p, a = data
    last = gpu - 1
    x = ferry.fromfile(p, np.float32, device="cuda:%d" % last)
    assert x.device.id == last
    x = ferry.fromfile(p, np.float32, device=last)
    assert x.device.id == last
    with cupy.cuda.Device(last):
        like = cupy.zeros(1)
    x = ferry.fromfile(p, np.float32, like=like)  # like's device when device= is absent
    assert x.device.id == last
    np.testing.assert_array_equal(cupy.asnumpy(x), a)
    arr = ferry.fromfile(p, np.float32, device="cuda:%d" % last, like="ferry")
    assert arr.device == "cuda:%d" % last
    assert arr.__dlpack_device__() == (2, last)


def test_like_torch(torch, data, tmp_path):
    p, a = data
    t = ferry.fromfile(p, np.float32, like=torch.empty(0, device="cuda"))
    assert isinstance(t, torch.Tensor) and t.is_cuda
    np.testing.assert_array_equal(t.cpu().numpy(), a)
    t = ferry.fromfile(p, np.float32, like="torch", device="cuda")
    assert t.is_cuda
    h = ferry.fromfile(p, np.float32, like="torch")  # no device: host memory
    assert isinstance(h, torch.Tensor) and not h.is_cuda
    tensors = {"w": torch.randn(64, 32, device="cuda"), "b": torch.arange(7, device="cuda"),
               "h": torch.randn(3, device="cuda").to(torch.bfloat16)}
    st = tmp_path / "m.safetensors"
    ferry.save(st, tensors, {"m": "v"})
    back = ferry.load(st, device="cuda", like="torch")
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and back[k].is_cuda
        assert torch.equal(back[k], v)
    # float32 -> float16 converts, integers stay; bfloat16 -> float16 is no supported pair.
    conv = ferry.load(st, device="cuda", like="torch", dtype="float16", names=["w", "b"])
    assert conv["w"].dtype == torch.float16 and conv["b"].dtype == torch.int64
    with pytest.raises(ferry.UsageError, match="bfloat16 to float16"):
        ferry.load(st, device="cuda", like="torch", dtype="float16")


def test_torch_reference_safetensors(torch, tmp_path):
    st = pytest.importorskip("safetensors.torch", reason="safetensors is not installed")
    tensors = {"a": torch.randn(10, 10), "b": torch.randn(5).to(torch.bfloat16),
               "c": torch.arange(4, dtype=torch.int16)}
    p = tmp_path / "r.safetensors"
    st.save_file(tensors, str(p))
    got = ferry.load(p, device="cuda", like="torch")
    for k, v in tensors.items():
        assert torch.equal(got[k].cpu(), v)


def test_dlpack_round_trips(cupy, torch, tmp_path):
    p = tmp_path / "x.bin"
    np.arange(12, dtype=np.float32).tofile(p)
    arr = ferry.fromfile(p, np.float32, device="cuda", shape=(3, 4), like="ferry")
    c = cupy.from_dlpack(arr)
    t = torch.from_dlpack(arr)
    assert c.data.ptr == arr.data_ptr == t.data_ptr()  # one allocation, shared
    c[0, 0] = 42
    assert float(t[0, 0]) == 42
    cai = arr.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["data"][0] == arr.data_ptr
    assert cupy.asarray(arr).data.ptr == arr.data_ptr  # through the CUDA array interface
    del arr, c
    assert float(t[0, 0]) == 42  # the export keeps the memory alive


def test_file_io_with_gpu_buffers(cupy, torch, tmp_path):
    p = tmp_path / "f.bin"
    src = cupy.arange(1 << 18, dtype=cupy.float64)
    with ferry.File(p, "w") as f:
        assert f.write(src) == src.nbytes
        assert f.pwrite(torch.ones(16, device="cuda"), src.nbytes).result() == 64
    host = np.fromfile(p, np.float64, count=1 << 18)
    np.testing.assert_array_equal(host, np.arange(1 << 18))
    with ferry.File(p) as f:
        dst = cupy.empty_like(src)
        assert f.pread(dst).result() == src.nbytes
        assert bool((dst == src).all())
        t = torch.empty(1 << 18, dtype=torch.float64, device="cuda")
        f.read(t)
        assert torch.equal(t.cpu(), torch.arange(1 << 18, dtype=torch.float64))
        small = torch.zeros(4, device="cuda", dtype=torch.float64)
        assert f.read(small, 8, size=16) == 16
        assert small.tolist() == [1.0, 2.0, 0.0, 0.0]


def test_read_batch_into_gpu_memory(cupy, torch, tmp_path):
    rng = np.random.default_rng(3)
    blobs = [rng.integers(0, 256, (1 << 20) + 7 * i, dtype=np.uint8) for i in range(3)]
    for i, b in enumerate(blobs):
        b.tofile(tmp_path / ("%d.bin" % i))
    files = [ferry.File(tmp_path / ("%d.bin" % i)) for i in range(3)]
    pieces, want, views = [], [], []
    block = cupy.empty(200 * 5000, dtype=cupy.uint8)
    at = 0
    for k in range(200):  # many small pieces of three files, packed into one block
        n, off = 1 + (k * 977) % 5000, (k * 4099) % (1 << 19)
        view = block[at : at + n]
        pieces.append((files[k % 3], off, view))
        want.append(blobs[k % 3][off : off + n])
        views.append(view)
        at += n
    t = torch.empty(4096, dtype=torch.uint8, device="cuda")
    pieces.append((files[0], 12345, t))
    assert ferry.read_batch(pieces).result() == at + 4096
    for k, (v, w) in enumerate(zip(views, want)):
        assert cupy.asnumpy(v).tobytes() == w.tobytes(), k
    assert t.cpu().numpy().tobytes() == blobs[0][12345 : 12345 + 4096].tobytes()
    with pytest.raises(ferry.UsageError, match="one kind of memory"):
        ferry.read_batch([(files[0], 0, block[:8]), (files[1], 0, np.empty(8, np.uint8))])
    for f in files:
        f.close()


def test_tofile_and_save_from_gpu(cupy, torch, tmp_path):
    a = cupy.asfortranarray(cupy.arange(20, dtype=cupy.int32).reshape(4, 5))
    ferry.tofile(a, tmp_path / "a.bin")
    assert (tmp_path / "a.bin").read_bytes() == cupy.asnumpy(a).tobytes(order="C")
    ferry.save(tmp_path / "a.npy", a)
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), cupy.asnumpy(a))
    t = torch.arange(6, device="cuda", dtype=torch.float32).reshape(2, 3) * 2
    ferry.save(tmp_path / "t.npy", t)  # pending work on the tensor is waited for
    np.testing.assert_array_equal(np.load(tmp_path / "t.npy"), t.cpu().numpy())


def test_jax(jax, data):
    p, a = data
    x = ferry.fromfile(p, np.float32, like="jax", device="cuda")
    np.testing.assert_array_equal(np.asarray(x), a)


def test_pinned(data):
    if ferry.cuda_device_count() == 0:
        pytest.skip("no usable GPU: " + ferry.cuda_unavailable_reason())
    p, a = data
    x = ferry.fromfile(p, np.float32, device="pinned")
    assert isinstance(x, np.ndarray)
    np.testing.assert_array_equal(x, a)


def test_without_cupy_returns_ferry_array(gpu, data, monkeypatch):
    from ferry import _convert

    monkeypatch.setitem(_convert._modules, "cupy", None)
    p, a = data
    x = ferry.fromfile(p, np.float32, device="cuda")
    assert isinstance(x, ferry.Array) and x.device == "cuda:0"
    assert x.__dlpack_device__() == (2, 0)
    np.testing.assert_array_equal(np.from_dlpack(x.to_device("cpu")), a)


def _routes():
    return {(r["source"], r["mover"]): r["read"]["bytes"] for r in ferry.stats().get("routes", [])}


def test_a_registered_file_is_read_by_dma_from_its_pages(cupy, torch, tmp_path):
    # Registered once, every read of the file into GPU memory (fromfile, load of .npy and
    # safetensors, checkpoints) comes from its pinned page-cache pages; byte-exact.
    p = tmp_path / "x.bin"
    a = np.random.default_rng(3).integers(0, 255, size=(24 << 20) + 77, dtype=np.uint8)
    a.tofile(p)
    held = ferry.registered_bytes()
    with ferry.register_file(p) as reg:
        assert reg.size == a.nbytes and reg.seconds > 0 and not reg.closed
        assert ferry.registered_bytes() == held + a.nbytes
        ferry.reset_stats()
        for _ in range(2):
            x = ferry.fromfile(p, np.uint8, device="cuda")
            assert np.array_equal(cupy.asnumpy(x), a)
        assert _routes().get(("registered", "device-dma")) == 2 * a.nbytes, _routes()
        assert ("posix", "lanes") not in _routes()
        y = ferry.fromfile(p, np.uint8, device="cuda", offset=4099, count=1000)
        assert np.array_equal(cupy.asnumpy(y), a[4099:5099])
        # Host memory is not what a registration is for: the usual route.
        z = ferry.fromfile(p, np.uint8)
        assert np.array_equal(z, a)
    assert reg.closed and ferry.registered_bytes() == held

    t = {"w": torch.arange(1 << 20, dtype=torch.float32).reshape(1024, 1024),
         "b": torch.ones(77, dtype=torch.bfloat16)}
    st = tmp_path / "m.safetensors"
    import safetensors.torch as stt
    stt.save_file(t, str(st))
    with ferry.register_file(st):
        ferry.reset_stats()
        got = ferry.load(st, device="cuda", like="torch")
        for k, v in t.items():
            assert torch.equal(got[k].cpu(), v), k
        assert _routes().get(("registered", "device-dma"), 0) > 0, _routes()
        ferry.reset_stats()
        ck = ferry.load_checkpoint(st, device="cuda", like="torch")
        assert torch.equal(ck["w"].cpu(), t["w"])
        assert _routes().get(("registered", "device-dma"), 0) > 0, _routes()


def test_a_registered_file_changed_since_is_read_the_usual_way(cupy, tmp_path):
    p = tmp_path / "x.bin"
    a = np.arange(1 << 20, dtype=np.float32)
    a.tofile(p)
    with ferry.register_file(p):
        b = a.copy()
        b[5] = -1
        with open(p, "r+b") as f:  # rewritten in place, with a modification time of its own
            f.write(b.tobytes())
        import os
        os.utime(p, ns=(0, 1234567))
        ferry.reset_stats()
        x = ferry.fromfile(p, np.float32, device="cuda")
        assert np.array_equal(cupy.asnumpy(x), b)
        assert ("registered", "device-dma") not in _routes()


def test_registration_refusals_name_the_file(gpu, tmp_path):
    p = tmp_path / "x.bin"
    np.zeros(1 << 20, np.uint8).tofile(p)
    held = ferry.registered_bytes()
    ferry.set_registration_limit(held + 1000)
    try:
        with pytest.raises(ferry.UsageError, match="registration limit") as e:
            ferry.register_file(p)
        assert str(p) in str(e.value)
    finally:
        ferry.set_registration_limit(0)
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(ferry.UsageError, match="empty"):
        ferry.register_file(tmp_path / "empty.bin")
    with pytest.raises(ferry.FileError):
        ferry.register_file(tmp_path / "missing.bin")
    assert ferry.registered_bytes() == held
