"""Checksums written with the data and checked on load, from Python: files ferry saves stay
plain safetensors for safetensors and huggingface_hub; a flipped byte raises
ferry.IntegrityError (an OSError) naming file, tensor, range and both checksums, and hands out
nothing; checkpoints of other tools load under verify="auto" and are refused under "always";
ferry.verify and its sidecars."""

import json
import os
import shutil

import numpy as np
import pytest

import ferry
from hub_checkpoints import hub_save, reference


def _flip(path, at, mask=0x20):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ mask]))


def _state(seed=0):
    rng = np.random.default_rng(seed)
    return {"w%d" % i: rng.standard_normal((64, 33)).astype(np.float32) for i in range(6)}


def test_saved_file_stays_plain_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    sd = _state()
    p = str(tmp_path / "m.safetensors")
    ferry.save(p, sd, {"step": "7"})
    back = st.load_file(p)
    assert sorted(back) == sorted(sd)
    for k in sd:
        np.testing.assert_array_equal(back[k], sd[k])
    from safetensors import safe_open
    with safe_open(p, "np") as f:
        meta = f.metadata()
    assert meta["step"] == "7"
    record = json.loads(meta["ferry.checksums"])
    assert record["alg"] == "crc32c" and sorted(record["tensors"]) == sorted(sd)
    got = ferry.load(p, verify="always")
    for k in sd:
        np.testing.assert_array_equal(got[k], sd[k])


def test_flipped_byte_raises_integrity_error(tmp_path):
    p = str(tmp_path / "m.safetensors")
    ferry.save(p, _state())
    arrays = ferry.info(p)["arrays"]
    w3 = next(a for a in arrays if a["name"] == "w3")
    _flip(p, w3["end"] - 1)
    with pytest.raises(ferry.IntegrityError) as e:
        ferry.load(p)
    err = e.value
    assert isinstance(err, OSError) and isinstance(err, ferry.Error)
    assert err.filename == p and err.tensor == "w3"
    assert err.begin <= w3["end"] - 1 < err.end
    assert err.expected.startswith("crc32c:") and err.expected != err.actual
    assert p in str(err) and "w3" in str(err)
    assert len(ferry.load(p, verify="never")) == 6
    assert len(ferry.load(p, names=["w1"])) == 1  # an intact tensor of the same file


def test_save_without_checksums_and_bad_verify_value(tmp_path):
    p = str(tmp_path / "m.safetensors")
    ferry.save(p, _state(), checksums=False)
    assert "ferry.checksums" not in (ferry.info(p)["metadata"] or {})
    assert len(ferry.load(p)) == 6
    with pytest.raises(ferry.IntegrityError, match="no checksums"):
        ferry.load(p, verify="always")
    with pytest.raises(ferry.UsageError, match="verify"):
        ferry.load(p, verify="sometimes")


def test_hub_checkpoint_auto_loads_always_refuses(tmp_path):
    pytest.importorskip("huggingface_hub")
    sd = _state(1)
    folder = str(tmp_path / "hub")
    split = hub_save(folder, sd, max_shard_size=20_000)
    assert split.is_sharded
    got = ferry.load_checkpoint(folder)
    for k, v in reference(folder).items():
        np.testing.assert_array_equal(got[k], v)
    with pytest.raises(ferry.IntegrityError, match="no checksums recorded"):
        ferry.load_checkpoint(folder, verify="always")
    rep = ferry.verify(folder)
    assert rep["status"] == 2 and len(rep["unverifiable"]) == len(split.filename_to_tensors)
    rep = ferry.verify(folder, record=True)
    assert rep["status"] == 0 and len(rep["recorded"]) == len(split.filename_to_tensors)
    assert ferry.verify(folder)["status"] == 0
    shard = os.path.join(folder, sorted(split.filename_to_tensors)[1])
    _flip(shard, os.path.getsize(shard) - 1)
    rep = ferry.verify(folder)
    assert rep["status"] == 1 and rep["mismatches"][0]["file"] == shard


def test_checkpoint_flip_into_and_slices(tmp_path):
    sd = _state(2)
    folder = str(tmp_path / "ck")
    ferry.save_checkpoint(folder, sd, max_shard_size=20_000)
    assert ferry.verify(folder)["status"] == 0
    # Flip the first byte of w4's data in its shard.
    idx = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
    shard = os.path.join(folder, idx["weight_map"]["w4"])
    desc = next(a for a in ferry.info(shard)["arrays"] if a["name"] == "w4")
    _flip(shard, desc["begin"])
    with pytest.raises(ferry.IntegrityError) as e:
        ferry.load_checkpoint(folder)
    assert e.value.tensor == "w4" and e.value.filename == shard
    with pytest.raises(ferry.IntegrityError):
        ferry.load_checkpoint(folder, slices={"w4": ferry.split(1, 2, 1)})
    dst = {k: np.zeros_like(v) for k, v in sd.items()}
    with pytest.raises(ferry.IntegrityError, match="already written 6 into= destinations"):
        ferry.load_checkpoint(folder, into=dst)
    got = ferry.load_checkpoint(folder, verify="never")
    assert not np.array_equal(got["w4"], sd["w4"])
    rep = ferry.verify(folder)
    assert rep["status"] == 1 and [m["tensor"] for m in rep["mismatches"]] == ["w4"]


def test_npy_sidecar(tmp_path):
    p = str(tmp_path / "x.npy")
    np.save(p, np.arange(100000, dtype=np.int64))
    assert ferry.verify(p)["status"] == 2
    assert ferry.verify(p, record=True)["recorded"] == [p + ".ferry-checksums.json"]
    assert ferry.verify(p)["status"] == 0
    _flip(p, 4000)
    rep = ferry.verify(p)
    assert rep["status"] == 1 and rep["mismatches"][0]["begin"] == 0


def _small_sidecar(path, chunk=4096):
    """A sidecar of 4 KiB chunks (``ferry verify --record`` writes 64 MiB ones), so that a
    small file has many chunks."""
    data = np.fromfile(path, dtype=np.uint8)
    crcs = ferry._ferry.crc32c_chunks([data], chunk)[0]
    with open(path + ".ferry-checksums.json", "w") as f:
        json.dump({"v": 1, "alg": "crc32c", "chunk": chunk, "size": data.size,
                   "crcs": "".join("%08x" % c for c in crcs)}, f)


def test_fromfile_checks_a_sidecar(tmp_path):
    p = str(tmp_path / "x.bin")
    a = np.arange(10_000, dtype=np.float64)   # 80,000 bytes: 20 chunks of 4 KiB
    a.tofile(p)
    np.testing.assert_array_equal(ferry.fromfile(p, np.float64), a)   # no sidecar: unchecked
    with pytest.raises(ferry.IntegrityError, match="no checksums recorded"):
        ferry.fromfile(p, np.float64, verify="always")
    assert ferry.verify(p, record=True)["status"] == 0
    np.testing.assert_array_equal(ferry.fromfile(p, np.float64, verify="always"), a)
    _small_sidecar(p)
    for at in (0, 4095, 4096, 40_000, 79_999):
        _flip(p, at)
        with pytest.raises(ferry.IntegrityError) as e:
            ferry.fromfile(p, np.float64)
        _flip(p, at)
        assert (e.value.begin, e.value.end) == (at // 4096 * 4096, min(at // 4096 * 4096 + 4096, 80_000))
        assert e.value.filename == p and e.value.expected != e.value.actual and p in str(e.value)
    # A part: the chunks it covers are checked, those beside it are not.
    _flip(p, 20_000)                       # chunk 4: [16384, 20480)
    np.testing.assert_array_equal(ferry.fromfile(p, np.float64, count=2048), a[:2048])   # chunks 0-3
    with pytest.raises(ferry.IntegrityError):
        ferry.fromfile(p, np.float64, count=10, offset=20_480 - 8)   # the end of chunk 4
    np.testing.assert_array_equal(ferry.fromfile(p, np.float64, offset=20_480), a[2560:])
    out = np.zeros(3000)
    with pytest.raises(ferry.IntegrityError):
        ferry.fromfile(p, np.float64, out=out)
    # An open file is checked against the sidecar of the name it was opened by.
    with open(p, "rb") as f:
        with pytest.raises(ferry.IntegrityError):
            ferry.fromfile(f, np.float64)
    assert ferry.fromfile(p, np.float64, verify="never")[2500] != a[2500]
    _flip(p, 20_000)
    # A file that grew since its sidecar was written.
    with open(p, "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(ferry.IntegrityError, match="80008 bytes, its sidecar recorded 80000"):
        ferry.fromfile(p, np.float64)


@pytest.mark.skipif(ferry.cuda_device_count() == 0, reason="needs a CUDA GPU")
def test_gpu_save_and_verified_load(tmp_path):
    torch = pytest.importorskip("torch")
    sd = {k: torch.from_numpy(v).cuda() for k, v in _state(3).items()}
    p = str(tmp_path / "g.safetensors")
    h = str(tmp_path / "h.safetensors")
    ferry.save(p, sd)
    ferry.save(h, {k: v.cpu() for k, v in sd.items()})
    assert open(p, "rb").read() == open(h, "rb").read()  # the GPU's checksums are the CPU's
    got = ferry.load(p, device="cuda", like="torch", verify="always")
    for k in sd:
        assert torch.equal(got[k], sd[k])
    desc = next(a for a in ferry.info(p)["arrays"] if a["name"] == "w2")
    _flip(p, desc["begin"] + 5)
    with pytest.raises(ferry.IntegrityError):
        ferry.load(p, device="cuda", like="torch")
    folder = str(tmp_path / "ck")
    ferry.save_checkpoint(folder, sd, max_shard_size=20_000)
    got = ferry.load_checkpoint(folder, device="cuda", like="torch", verify="always")
    assert sorted(got) == sorted(sd)
    # A flipped byte in the last shard: found by the check of the batch that read it, on the GPU.
    shard = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors"))[-1]
    desc = ferry.info(shard)["arrays"][-1]
    _flip(shard, desc["begin"] + 3)
    with pytest.raises(ferry.IntegrityError, match=desc["name"]):
        ferry.load_checkpoint(folder, device="cuda", like="torch")
    shutil.rmtree(folder)


@pytest.mark.skipif(ferry.cuda_device_count() == 0, reason="needs a CUDA GPU")
def test_gpu_fromfile_checks_a_sidecar_on_the_device(tmp_path):
    cupy = pytest.importorskip("cupy")
    p = str(tmp_path / "x.bin")
    a = np.arange(10_000, dtype=np.float32)
    a.tofile(p)
    _small_sidecar(p)
    got = ferry.fromfile(p, np.float32, device="cuda", like="cupy", verify="always")
    assert isinstance(got, cupy.ndarray) and (cupy.asnumpy(got) == a).all()
    _flip(p, 9000)
    with pytest.raises(ferry.IntegrityError) as e:
        ferry.fromfile(p, np.float32, device="cuda", like="cupy")
    assert (e.value.begin, e.value.end) == (8192, 12288)
    with pytest.raises(ferry.IntegrityError):   # byte-swapped on the GPU: checked by a re-read
        ferry.fromfile(p, ">f4", device="cuda", like="cupy")


def test_load_many_keeps_the_integrity_error(tmp_path):
    p = str(tmp_path / "m.safetensors")
    ferry.save(p, _state())
    w0 = next(a for a in ferry.info(p)["arrays"] if a["name"] == "w0")
    _flip(p, w0["begin"])
    with pytest.raises(ferry.IntegrityError) as e:
        ferry.load_many([p])
    assert e.value.index == 0 and e.value.tensor == "w0" and e.value.filename == p
    assert "paths[0]" in str(e.value)


def test_integrity_bench_runs_small(tmp_path):
    """bench/integrity_bench.py end to end on a few MiB: every figure it prints is measured."""
    import subprocess
    import sys
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "integrity_bench.py")
    cli = os.environ.get("FERRY_CLI", "/nonexistent/ferry")
    r = subprocess.run([sys.executable, bench, "--dir", str(tmp_path), "--size", "8M", "--tensors", "16",
                        "--rounds", "1", "--cli", cli], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for key in ("save_checksums_gbps", "save_plain_gbps", "load_never_gbps", "load_always_gbps",
                "verify_python_gbps"):
        assert res[key] > 0, key
    assert ("verify_cli_gbps" in res) == os.path.exists(cli)
