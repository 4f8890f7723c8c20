"""Checksums of DCP checkpoints (ferry.dcp._checksums): ferry's writers record a CRC-32C of
every chunk of every tensor, ferry's readers check what they read, and a flipped byte anywhere
in a tensor's bytes (its first, its last, random places, a chunk boundary, a small record read
whole, a part read for a reshard) raises ferry.IntegrityError naming the file, the tensor, the
byte range and both checksums. A checkpoint another writer replaced, or one torch wrote, loads
unchecked under verify="auto" and is refused under "always". `ferry verify` checks the folder."""

import json
import os
import random
import subprocess

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/deps.sh installs it)")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import ferry  # noqa: E402
import ferry.dcp  # noqa: E402
from ferry.dcp import _checksums, _writer  # noqa: E402

from conftest import GPU_REASON, HAVE_GPU  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

MANIFEST = ".ferry-checksums.json"
SMALL_CHUNK = 4096


@pytest.fixture
def small_chunks(monkeypatch):
    """4 KiB chunks instead of 64 MiB, so small tensors span several."""
    monkeypatch.setattr(_checksums, "CHUNK", SMALL_CHUNK)
    monkeypatch.setattr(_writer, "CHUNK", SMALL_CHUNK)


def _state(device="cpu"):
    g = torch.Generator().manual_seed(3)
    sd = {
        "big": torch.randn(1 << 16, generator=g),              # 256 KiB: read by ranges
        "bf16": torch.randn(300, 129, generator=g).to(torch.bfloat16),
        "small": torch.arange(10, dtype=torch.int32),          # a record read whole
        "empty": torch.empty(0, 3),
        "step": 5,
    }
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in sd.items()}


def _blank(sd):
    return {k: (torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0) for k, v in sd.items()}


def _cause(e):
    failures = getattr(e, "failures", None)
    return next(iter(failures.values()))[0] if failures else e


def _load(folder, sd, **kw):
    out = _blank(sd)
    reader = ferry.dcp.FileSystemReader(folder, **kw)
    dcp.load(out, storage_reader=reader)
    return out, reader


def _load_error(folder, sd, **kw):
    with pytest.raises((CheckpointException, Exception)) as e:
        _load(folder, sd, **kw)
    return _cause(e.value)


def _entries(folder):
    m = json.load(open(os.path.join(folder, MANIFEST)))
    return {e[2]: (os.path.join(folder, f), e[0], e[1]) for f, es in m["files"].items() for e in es}


def _flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))


def test_writer_records_a_manifest_and_the_reader_checks_it(tmp_path):
    folder = str(tmp_path / "ck")
    sd = _state()
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    entries = _entries(folder)
    assert sorted(entries) == ["bf16", "big", "small"]   # empty tensors have nothing to check
    assert entries["big"][2] == sd["big"].nbytes
    out, reader = _load(folder, sd)
    assert all(torch.equal(out[k], sd[k]) for k in ("big", "bf16", "small"))
    assert reader.stats["verified_bytes"] == sum(sd[k].nbytes for k in ("big", "bf16", "small"))
    # torch's own reader ignores the manifest.
    out = _blank(sd)
    dcp.load(out, storage_reader=dcp.FileSystemReader(folder))
    assert torch.equal(out["big"], sd["big"])


@pytest.mark.parametrize("prefetch", [None, "cpu"])
@pytest.mark.parametrize("tensor", ["big", "bf16", "small"])
def test_flipped_bytes_are_caught_where_they_are(tmp_path, tensor, prefetch):
    """Also where the bytes were read ahead while DCP planned (``prefetch``)."""
    folder = str(tmp_path / "ck")
    sd = _state()
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    path, begin, length = _entries(folder)[tensor]
    rng = random.Random(7)
    for at in [begin, begin + length - 1] + [begin + rng.randrange(length) for _ in range(6)]:
        _flip(path, at)
        e = _load_error(folder, sd, prefetch=prefetch)
        _flip(path, at)
        assert isinstance(e, ferry.IntegrityError), e
        assert e.tensor == tensor and e.filename == path and e.begin <= at < e.end, (e, at)
        assert e.expected.startswith("crc32c:") and e.actual.startswith("crc32c:") and e.expected != e.actual
        text = str(e)
        assert os.path.basename(path) in text and repr(tensor) in text and e.expected in text, text
    # Nothing was left corrupted, and nothing raised falsely.
    out, _ = _load(folder, sd)
    assert torch.equal(out[tensor], sd[tensor])


def test_a_flip_at_a_chunk_boundary_names_that_chunk(tmp_path, small_chunks):
    folder = str(tmp_path / "ck")
    sd = _state()
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    m = json.load(open(os.path.join(folder, MANIFEST)))
    assert m["chunk"] == SMALL_CHUNK
    path, begin, length = _entries(folder)["big"]
    for at in (begin + SMALL_CHUNK - 1, begin + SMALL_CHUNK, begin + 5 * SMALL_CHUNK):
        _flip(path, at)
        e = _load_error(folder, sd)
        _flip(path, at)
        k = (at - begin) // SMALL_CHUNK
        assert (e.begin, e.end) == (begin + k * SMALL_CHUNK, begin + (k + 1) * SMALL_CHUNK), (e, at)


def test_a_part_of_a_tensor_is_checked_by_the_chunks_it_covers(tmp_path, small_chunks):
    """What a reshard reads (a part of a tensor's bytes): the chunks it covers are read again
    and checked; a flip outside them goes unnoticed, as it must."""
    folder = str(tmp_path / "ck")
    sd = _state()
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    crcs, why = _checksums.read_manifest(folder, ".metadata")
    assert crcs is not None, why
    path, begin, length = _entries(folder)["big"]
    files = ferry.dcp._reads.Files()
    try:
        def check(first, end):
            c = _checksums.Checker(crcs, files)
            c.part(path, begin, length, "big", first, end)
            c.run()
            return c.bytes

        assert check(SMALL_CHUNK + 10, 3 * SMALL_CHUNK) == 2 * SMALL_CHUNK
        _flip(path, begin + 2 * SMALL_CHUNK + 7)
        with pytest.raises(ferry.IntegrityError) as e:
            check(SMALL_CHUNK + 10, 3 * SMALL_CHUNK)
        assert e.value.begin == begin + 2 * SMALL_CHUNK
        assert check(0, SMALL_CHUNK) == SMALL_CHUNK    # outside the flip
    finally:
        files.close()


def test_a_manifest_of_another_save_is_not_used(tmp_path):
    folder = str(tmp_path / "ck")
    sd = _state()
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    sd2 = dict(sd, big=sd["big"] + 1)
    dcp.save(sd2, storage_writer=dcp.FileSystemWriter(folder))   # torch's writer leaves it
    assert os.path.exists(os.path.join(folder, MANIFEST))
    out, reader = _load(folder, sd2)
    assert torch.equal(out["big"], sd2["big"]) and reader.stats["verified_bytes"] == 0
    e = _load_error(folder, sd2, verify="always")
    assert isinstance(e, ferry.IntegrityError) and "describes another save" in str(e), e
    # A ferry save again replaces it.
    dcp.save(sd2, storage_writer=ferry.dcp.FileSystemWriter(folder))
    assert _load(folder, sd2)[1].stats["verified_bytes"] > 0


def test_verify_modes(tmp_path):
    sd = _state()
    torchs = str(tmp_path / "torch")
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(torchs))
    assert _load(torchs, sd)[1].stats["verified_bytes"] == 0
    e = _load_error(torchs, sd, verify="always")
    assert isinstance(e, ferry.IntegrityError) and "no checksum manifest" in str(e), e
    ours = str(tmp_path / "ferry")
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(ours))
    path, begin, _ = _entries(ours)["big"]
    _flip(path, begin + 100)
    out, reader = _load(ours, sd, verify="never")
    assert not torch.equal(out["big"], sd["big"]) and reader.stats["verified_bytes"] == 0
    with pytest.raises(ferry.UsageError, match="verify="):
        ferry.dcp.FileSystemReader(ours, verify="sometimes")
    nosums = str(tmp_path / "nosums")
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(nosums, checksums=False))
    assert not os.path.exists(os.path.join(nosums, MANIFEST))


def test_a_corrupt_manifest_is_refused_clearly(tmp_path):
    folder = str(tmp_path / "ck")
    sd = _state()
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    with open(os.path.join(folder, MANIFEST), "w") as f:
        f.write('{"v": 1, "alg": "crc32c"')
    e = _load_error(folder, sd)
    assert isinstance(e, ferry.IntegrityError) and MANIFEST in str(e) and "manifest" in str(e), e


def test_hugging_face_files_are_checked(tmp_path):
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    sd = {k: v for k, v in _state().items() if isinstance(v, torch.Tensor) and v.numel()}
    ours = str(tmp_path / "ferry")
    dcp.save(sd, storage_writer=ferry.dcp.HuggingFaceStorageWriter(ours))
    [name] = [f for f in os.listdir(ours) if f.endswith(".safetensors")]
    path = os.path.join(ours, name)
    arrays = {a["name"]: a for a in ferry.info(path)["arrays"]}
    out = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(out, storage_reader=ferry.dcp.HuggingFaceStorageReader(ours))
    assert all(torch.equal(out[k], sd[k]) for k in sd)
    _flip(path, arrays["bf16"]["end"] - 1)
    with pytest.raises((CheckpointException, Exception)) as e:
        dcp.load(out, storage_reader=ferry.dcp.HuggingFaceStorageReader(ours))
    err = _cause(e.value)
    assert isinstance(err, ferry.IntegrityError) and err.tensor == "bf16", err
    torchs = str(tmp_path / "torch")
    dcp.save(sd, storage_writer=HuggingFaceStorageWriter(torchs))
    dcp.load(out, storage_reader=ferry.dcp.HuggingFaceStorageReader(torchs))
    with pytest.raises((CheckpointException, Exception)) as e:
        dcp.load(out, storage_reader=ferry.dcp.HuggingFaceStorageReader(torchs, verify="always"))
    assert isinstance(_cause(e.value), ferry.IntegrityError), e.value


def test_ferry_verify_checks_a_dcp_folder(tmp_path, small_chunks):
    cli = os.environ.get("FERRY_CLI")
    folder = str(tmp_path / "ck")
    sd = _state()
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    report = ferry.verify(folder)
    assert report["status"] == 0 and not report["mismatches"], report
    assert report["bytes"] == sum(sd[k].nbytes for k in ("big", "bf16", "small")), report
    path, begin, _ = _entries(folder)["bf16"]
    _flip(path, begin + SMALL_CHUNK + 3)
    report = ferry.verify(folder)
    assert report["status"] == 1, report
    [m] = report["mismatches"]
    assert m["tensor"] == "bf16" and m["begin"] == begin + SMALL_CHUNK and m["file"] == path, m
    if cli:
        run = subprocess.run([cli, "verify", folder], capture_output=True, text=True, timeout=60)
        assert run.returncode == 1 and "bf16" in run.stdout + run.stderr, run
    # Another writer's save makes the manifest stale: nothing verifiable, said so.
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(folder))
    report = ferry.verify(folder)
    assert report["status"] == 2 and report["unverifiable"], report


def test_gpu_tensors_are_hashed_on_the_gpu_and_checked(tmp_path):
    if not HAVE_GPU or not torch.cuda.is_available():
        pytest.skip(GPU_REASON or "PyTorch has no CUDA")
    folder = str(tmp_path / "ck")
    sd = _state("cuda")
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    host = str(tmp_path / "host")
    dcp.save(_state("cpu"), storage_writer=ferry.dcp.FileSystemWriter(host))
    # The same bytes hash the same on the GPU and on the host.
    assert [e[3] for es in json.load(open(os.path.join(folder, MANIFEST)))["files"].values() for e in es] == \
        [e[3] for es in json.load(open(os.path.join(host, MANIFEST)))["files"].values() for e in es]
    out, reader = _load(folder, sd)
    assert out["big"].is_cuda and torch.equal(out["big"], sd["big"]) and reader.stats["verified_bytes"] > 0
    path, begin, length = _entries(folder)["big"]
    _flip(path, begin + length - 1)
    e = _load_error(folder, sd)
    assert isinstance(e, ferry.IntegrityError) and e.tensor == "big", e
