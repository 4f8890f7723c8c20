"""ferry.dcp against torch.distributed.checkpoint itself: files ferry writes load with torch's
readers and files torch writes load with ferry's, value for value and byte for byte (nested
state dicts, a real optimizer's state, non-tensor values, a step, empty tensors, bf16, fp8);
reads that need staging (strided destinations) under any memory budget; dcp.async_save; the
Hugging Face flavour against torch's, safetensors and ferry.load_checkpoint; a writer killed
mid-save, a truncated file and a full disk; 2 and 4 real ranks on gloo, reading shared bytes
once across the group and resharding a DTensor. GPU cases skip without a GPU."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/deps.sh installs it)")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import ferry  # noqa: E402
import ferry.dcp  # noqa: E402

from conftest import GPU_REASON, HAVE_GPU  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dcp_worker.py")
PROCESS_TIMEOUT = 180
FP8 = getattr(torch, "float8_e4m3fn", None)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


# ---------------------------------------------------------------------------- state dicts

def _model_and_optimizer(device="cpu"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.LayerNorm(64),
                                torch.nn.Linear(64, 8)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):
        model(torch.randn(4, 48, device=device)).square().sum().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _state(device="cpu"):
    model, opt = _model_and_optimizer(device)
    g = torch.Generator().manual_seed(1)
    extra = {
        "bf16": torch.randn(300, 129, generator=g).to(torch.bfloat16),
        "int64": torch.arange(-5, 1000),
        "bool": torch.rand(77, generator=g) > 0.5,
        "empty": torch.empty(0, 7),
        "scalar": torch.tensor(3.5),
        "transposed": torch.randn(40, 30, generator=g).t(),
        "big": torch.randn(1 << 18, generator=g),   # 1 MiB: read by ranges, not whole
    }
    if FP8 is not None:
        extra["fp8"] = torch.randn(64, generator=g).to(FP8)
    extra = {k: v.to(device) for k, v in extra.items()}
    return {"model": model.state_dict(), "optim": opt.state_dict(), "extra": extra,
            "step": 1234, "config": {"name": "run-7", "lrs": [0.1, 0.01]}}


def _blank(sd):
    """The shape of ``sd`` to load into: tensors zeroed, other values changed."""
    if isinstance(sd, dict):
        return {k: _blank(v) for k, v in sd.items()}
    if isinstance(sd, list):
        return [_blank(v) for v in sd]
    if isinstance(sd, torch.Tensor):
        return torch.zeros_like(sd)
    return None if not isinstance(sd, (int, float)) else type(sd)(0)


def _bytes(t):
    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def _same(want, got, where="state"):
    if isinstance(want, dict):
        assert sorted(want, key=str) == sorted(got, key=str), where
        for k in want:
            _same(want[k], got[k], "%s.%s" % (where, k))
    elif isinstance(want, list):
        assert len(want) == len(got), where
        for i, (a, b) in enumerate(zip(want, got)):
            _same(a, b, "%s[%d]" % (where, i))
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), where
        assert (got.dtype, tuple(got.shape)) == (want.dtype, tuple(want.shape)), where
        assert _bytes(got) == _bytes(want), where
    else:
        assert got == want, where


# DCP raises each rank's error wrapped in a CheckpointException, a BaseException.
DCP_ERRORS = (CheckpointException, Exception)


def _cause(excinfo):
    """The error a DCP load or save raised on this rank: DCP wraps each rank's error in a
    CheckpointException (``failures``: rank -> (exception, traceback))."""
    e = excinfo.value
    failures = getattr(e, "failures", None)
    return next(iter(failures.values()))[0] if failures else e


WRITERS = {"ferry": ferry.dcp.FileSystemWriter, "torch": dcp.FileSystemWriter}
READERS = {"ferry": ferry.dcp.FileSystemReader, "torch": dcp.FileSystemReader}


# ---------------------------------------------------------------------------- interop

@pytest.mark.parametrize("writer,reader", [("ferry", "torch"), ("torch", "ferry"),
                                           ("ferry", "ferry")])
def test_interop_both_ways_byte_exact(tmp_path, writer, reader):
    sd = _state()
    ferry.reset_stats()
    dcp.save(sd, storage_writer=WRITERS[writer](str(tmp_path / "ck")))
    written = ferry.stats()["bytes_written"]
    assert (written >= sd["extra"]["big"].nbytes) == (writer == "ferry"), written
    out = _blank(sd)
    ferry.reset_stats()
    dcp.load(out, storage_reader=READERS[reader](str(tmp_path / "ck")))
    assert (ferry.stats()["bytes_read"] >= sd["extra"]["big"].nbytes) == (reader == "ferry")
    _same(sd, out)


def test_a_planner_of_its_own_resolves_every_item(tmp_path, monkeypatch):
    """ferry's reader finds the destination of a plain tensor itself when the planner is
    torch's own DefaultLoadPlanner (what its resolve_tensor would return, without its per-item
    Protocol checks); a planner of the caller's, even a subclass, and a state dict tensor with
    attributes of its own are asked through resolve_tensor, each item once."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    sd = _state()
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(str(tmp_path / "ck")))
    asked = []

    class Counting(DefaultLoadPlanner):
        def resolve_tensor(self, read_item):
            asked.append(read_item.dest_index.fqn)
            return super().resolve_tensor(read_item)

    out = _blank(sd)
    dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(str(tmp_path / "ck")), planner=Counting())
    _same(sd, out)
    ours = sorted(asked)
    asked.clear()
    dcp.load(_blank(sd), storage_reader=dcp.FileSystemReader(str(tmp_path / "ck")), planner=Counting())
    assert ours == sorted(asked)  # the items torch's own reader asks for, each as often
    assert "extra.big" in ours and "extra.bf16" in ours

    # torch's own planner: the same bytes; a tensor carrying attributes of its own goes through
    # resolve_tensor, the plain ones do not.
    asked.clear()
    seen = []
    real = DefaultLoadPlanner.resolve_tensor

    def spy(self, read_item):
        seen.append(read_item.dest_index.fqn)
        return real(self, read_item)
    out = _blank(sd)
    out["extra"]["bf16"].note = "mine"
    monkeypatch.setattr(DefaultLoadPlanner, "resolve_tensor", spy)
    dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(str(tmp_path / "ck")))
    monkeypatch.undo()
    _same(sd, out)
    assert seen == ["extra.bf16"], seen


def test_a_save_planner_of_its_own_resolves_every_item(tmp_path, monkeypatch):
    """ferry's writer takes a plain tensor of the state dict itself under torch's own
    DefaultSavePlanner (what its resolve_data returns, without its per-item Protocol checks);
    a planner of the caller's, even a subclass, and a tensor with attributes of its own are
    asked through resolve_data. The files are the same either way."""
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    from torch.distributed.checkpoint.planner import WriteItemType

    sd = _state()
    asked = []

    class Counting(DefaultSavePlanner):
        def resolve_data(self, write_item):
            if write_item.type != WriteItemType.BYTE_IO:
                asked.append(write_item.index.fqn)
            return super().resolve_data(write_item)

    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(str(tmp_path / "a")), planner=Counting())
    assert "extra.big" in asked and "extra.bf16" in asked and len(asked) == len(set(asked)), asked

    seen = []
    real = DefaultSavePlanner.resolve_data

    def spy(self, write_item):
        if write_item.type != WriteItemType.BYTE_IO:
            seen.append(write_item.index.fqn)
        return real(self, write_item)
    sd["extra"]["bf16"].note = "mine"
    monkeypatch.setattr(DefaultSavePlanner, "resolve_data", spy)
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(str(tmp_path / "b")))
    monkeypatch.undo()
    assert seen == ["extra.bf16"], seen
    for folder in ("a", "b"):
        out = _blank(sd)
        dcp.load(out, storage_reader=dcp.FileSystemReader(str(tmp_path / folder)))
        _same(sd, out)
    names = sorted(f for f in os.listdir(tmp_path / "a") if f.endswith(".distcp"))
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_files_are_dcps_own(tmp_path):
    """The same files, and the same records in them, as torch's writer makes."""
    sd = _state()
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(str(tmp_path / "f")))
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(tmp_path / "t")))
    # ferry's writer adds its checksum manifest (ferry.dcp._checksums), nothing else.
    assert sorted(os.listdir(tmp_path / "f")) == sorted(os.listdir(tmp_path / "t") + [".ferry-checksums.json"])
    mf = dcp.FileSystemReader(str(tmp_path / "f")).read_metadata()
    mt = dcp.FileSystemReader(str(tmp_path / "t")).read_metadata()
    assert mf.state_dict_metadata.keys() == mt.state_dict_metadata.keys()
    assert {k: v.length for k, v in mf.storage_data.items()} == \
        {k: v.length for k, v in mt.storage_data.items()}


@pytest.mark.parametrize("budget", [1, 4096, ferry.dcp.DEFAULT_MEMORY_BUDGET])
def test_strided_destinations_are_staged_under_any_budget(tmp_path, budget):
    g = torch.Generator().manual_seed(2)
    sd = {"a%d" % i: torch.randn(300 + i, 50, generator=g) for i in range(6)}
    sd["b"] = torch.randn(20, 30, generator=g).to(torch.bfloat16)
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(str(tmp_path / "ck")))
    # Destinations that are views with strides: the bytes cannot land in them directly.
    bases = {k: torch.zeros(v.shape[1], v.shape[0], dtype=v.dtype) for k, v in sd.items()}
    out = {k: b.t() for k, b in bases.items()}
    dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(str(tmp_path / "ck"),
                                                            memory_budget=budget))
    for k, v in sd.items():
        assert torch.equal(out[k], v), k


@pytest.mark.parametrize("budget", [64 << 10, ferry.dcp.DEFAULT_MEMORY_BUDGET])
def test_read_ahead_while_dcp_plans(tmp_path, budget):
    """prefetch= reads the records' bytes from the moment DCP hands over the metadata; the items
    are copied from there (contiguous destinations and staged strided ones alike), and what the
    budget leaves out is read as without it."""
    sd = _state()
    sd["extra"]["strided"] = torch.randn(70, 90)
    folder = str(tmp_path / "ck")
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    out = _blank(sd)
    out["extra"]["strided"] = torch.zeros(90, 70).t()
    reader = ferry.dcp.FileSystemReader(folder, prefetch="cpu", memory_budget=budget)
    dcp.load(out, storage_reader=reader)
    _same(sd, out)
    stats = reader.stats
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".distcp"))
    assert 0 < stats["prefetched_bytes"] <= min(size, budget - budget // 4), stats
    assert 0 < stats["copied_from_prefetch"] <= stats["prefetched_bytes"], stats
    if budget > 4 * size:
        # Every tensor byte came from what was read ahead; only records' edges were read again.
        assert stats["copied_from_prefetch"] >= sd["extra"]["big"].nbytes, stats
    else:
        assert stats["prefetched_bytes"] < size, stats
    assert reader.ahead is None  # let go once the load is done
    # Off (the default), and "auto" without CUDA initialized: nothing is read ahead.
    for prefetch in (None, "auto"):
        if prefetch == "auto" and torch.cuda.is_available() and torch.cuda.is_initialized():
            continue
        reader = ferry.dcp.FileSystemReader(folder, prefetch=prefetch)
        dcp.load(_blank(sd), storage_reader=reader)
        assert reader.stats["prefetched_bytes"] == 0, (prefetch, reader.stats)


@pytest.mark.parametrize("prefetch", [None, "cpu"])
def test_a_small_budget_reads_in_rounds_and_checks_every_byte(tmp_path, monkeypatch, prefetch):
    """Strided destinations staged under a budget smaller than their sum: the reads go to ferry
    in several rounds, each checked before its items are committed, and the load is byte-exact;
    checksums still catch a flipped byte."""
    from ferry.dcp import _reads

    sd = _state()
    for i in range(4):
        sd["extra"]["strided%d" % i] = torch.randn(256, 300)
    folder = str(tmp_path / "ck")
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    calls = []
    batch = _reads._read_batch

    def counted(group):
        calls.append(len(group))
        return batch(group)

    monkeypatch.setattr(_reads, "_read_batch", counted)
    out = _blank(sd)
    for i in range(4):
        out["extra"]["strided%d" % i] = torch.zeros(300, 256).t()
    reader = ferry.dcp.FileSystemReader(folder, prefetch=prefetch, memory_budget=400 << 10)
    dcp.load(out, storage_reader=reader)
    _same(sd, out)
    if prefetch is None:
        assert len(calls) >= 4, calls  # 4 staged spans of 300 KiB under 400 KiB: one a round
    assert reader.stats["verified_bytes"] >= sd["extra"]["big"].nbytes, reader.stats
    [name] = [f for f in os.listdir(folder) if f.endswith(".distcp")]
    path = os.path.join(folder, name)
    at = os.path.getsize(path) // 2  # in "big", most of the file
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(DCP_ERRORS) as e:
        dcp.load(_blank(sd), storage_reader=ferry.dcp.FileSystemReader(folder, prefetch=prefetch))
    assert isinstance(_cause(e), ferry.IntegrityError) and _cause(e).tensor == "extra.big", e.value


def test_records_of_one_layout_are_parsed_from_their_first_bytes(tmp_path):
    """A record's last bytes (its zip directory) are read only for the first record of each
    layout; the others' layouts come from their first bytes."""
    g = torch.Generator().manual_seed(3)
    sd = {"w%d" % i: torch.randn(64, 64, generator=g) for i in range(20)}
    sd.update({"b%d" % i: torch.randn(4000, generator=g).to(torch.bfloat16) for i in range(10)})
    folder = str(tmp_path / "ck")
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(folder))
    out = _blank(sd)
    reader = ferry.dcp.FileSystemReader(folder)
    dcp.load(out, storage_reader=reader)
    _same(sd, out)
    assert 1 <= reader.stats["record_tails_read"] <= 2, reader.stats


@pytest.mark.parametrize("sync", [True, False])
def test_a_ranks_files_are_written_side_by_side(tmp_path, sync):
    """thread_count files per rank, as torch's writer makes them, written at once: each file
    DCP's own (torch's reader loads them), each tensor's checksum recorded and checked."""
    sd = _state()
    folder = str(tmp_path / "ck")
    writer = ferry.dcp.FileSystemWriter(folder, thread_count=4, sync_files=sync)
    dcp.save(sd, storage_writer=writer)
    names = sorted(f for f in os.listdir(folder) if f.endswith(".distcp"))
    assert len(names) == 4 and not [f for f in os.listdir(folder) if f.endswith(".tmp")], names
    for reader in (dcp.FileSystemReader(folder), ferry.dcp.FileSystemReader(folder, verify="always")):
        out = _blank(sd)
        dcp.load(out, storage_reader=reader)
        _same(sd, out)
    assert reader.stats["verified_bytes"] >= sd["extra"]["big"].nbytes, reader.stats


def test_a_second_save_into_the_same_folder_replaces_it(tmp_path):
    folder = str(tmp_path / "ck")
    dcp.save({"w": torch.ones(1000)}, storage_writer=ferry.dcp.FileSystemWriter(folder))
    dcp.save({"w": torch.full((1000,), 2.0)}, storage_writer=ferry.dcp.FileSystemWriter(folder))
    out = {"w": torch.zeros(1000)}
    dcp.load(out, storage_reader=dcp.FileSystemReader(folder))
    assert torch.equal(out["w"], torch.full((1000,), 2.0))
    assert not [f for f in os.listdir(folder) if f.endswith(".tmp")]


def test_async_save_with_ferrys_writer(tmp_path):
    sd = _state()
    fut = dcp.async_save(sd, storage_writer=ferry.dcp.FileSystemWriter(str(tmp_path / "ck")))
    result = fut.result(timeout=120) if hasattr(fut, "result") else fut.wait()
    assert result is not None or os.path.exists(tmp_path / "ck" / ".metadata")
    out = _blank(sd)
    dcp.load(out, storage_reader=dcp.FileSystemReader(str(tmp_path / "ck")))
    _same(sd, out)


def test_repeated_async_saves_reuse_one_writers_staged_copy(tmp_path):
    writer = ferry.dcp.FileSystemWriter(str(tmp_path / "unused"), cache_staged_state_dict=True)
    sd = {"w": torch.ones(1000), "step": 1}
    for step in (1, 2, 3):
        sd["w"].fill_(step)
        sd["step"] = step
        dcp.async_save(sd, checkpoint_id=str(tmp_path / ("s%d" % step)), storage_writer=writer).result(timeout=120)
    for step in (1, 2, 3):
        out = {"w": torch.zeros(1000), "step": 0}
        folder = str(tmp_path / ("s%d" % step))
        dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(folder))
        assert torch.all(out["w"] == step) and out["step"] == step


def test_unsupported_options_are_refused():
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    with pytest.raises(ValueError, match="HuggingFaceStorageWriter"):
        ferry.dcp.FileSystemWriter("/tmp/x", serialization_format=SerializationFormat.SAFETENSORS)


# ---------------------------------------------------------------------------- failures

@pytest.mark.parametrize("prefetch", [None, "cpu"])
def test_a_truncated_file_names_the_file_and_the_tensor(tmp_path, prefetch):
    folder = tmp_path / "ck"
    sd = {"small": torch.ones(10), "big": torch.randn(1 << 16)}
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(str(folder)))
    [name] = [f for f in os.listdir(folder) if f.endswith(".distcp")]
    path = folder / name
    size = path.stat().st_size
    for cut in (size - 10, size // 2):
        with open(path, "r+b") as f:
            f.truncate(cut)
        out = _blank(sd)
        with pytest.raises(DCP_ERRORS) as e:
            dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(str(folder), prefetch=prefetch))
        assert isinstance(_cause(e), ferry.CheckpointError), e.value
        text = str(_cause(e))
        assert name in text and "truncated" in text, text
        assert "'big'" in text or "'small'" in text, text
        assert not torch.any(out["big"] != 0), "nothing read from a truncated file"
    # A file missing altogether, with reads ahead asked for: the same clear error.
    path.unlink()
    with pytest.raises(DCP_ERRORS) as e:
        dcp.load(_blank(sd), storage_reader=ferry.dcp.FileSystemReader(str(folder), prefetch=prefetch))
    assert isinstance(_cause(e), ferry.CheckpointError) and "missing" in str(_cause(e)), e.value


def test_a_corrupt_record_is_refused_clearly(tmp_path):
    folder = tmp_path / "ck"
    dcp.save({"big": torch.randn(1 << 16)}, storage_writer=ferry.dcp.FileSystemWriter(str(folder)))
    [name] = [f for f in os.listdir(folder) if f.endswith(".distcp")]
    with open(folder / name, "r+b") as f:
        f.write(b"\0" * 64)   # the archive's first local header
    with pytest.raises(DCP_ERRORS) as e:
        dcp.load({"big": torch.zeros(1 << 16)},
                 storage_reader=ferry.dcp.FileSystemReader(str(folder)))
    text = str(_cause(e))
    assert isinstance(_cause(e), ferry.CheckpointError), e.value
    assert "not a torch.save tensor record" in text and name in text and "'big'" in text, text


_KILLED_WRITER = textwrap.dedent("""
    import sys, torch, torch.distributed.checkpoint as dcp, ferry.dcp
    prev, nxt = sys.argv[1], sys.argv[2]
    sd = {"w%d" % i: torch.full((1 << 20,), float(i)) for i in range(24)}   # 96 MiB
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(prev))
    dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(nxt))
    print("saved", flush=True)
    while True:   # saves again and again into nxt until killed
        dcp.save(sd, storage_writer=ferry.dcp.FileSystemWriter(nxt))
""")


def test_a_writer_killed_mid_save(tmp_path):
    prev, nxt = str(tmp_path / "prev"), str(tmp_path / "next")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, prev, nxt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "saved", proc.stderr.read()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until a data file is half-written
            if any(f.endswith(".tmp") for f in os.listdir(nxt)):
                break
            time.sleep(0.001)
        else:
            pytest.fail("the writer never had a file in flight within 60 s")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert not os.path.exists(os.path.join(nxt, ".metadata"))
    with pytest.raises(DCP_ERRORS) as e:
        dcp.load({"w0": torch.zeros(1 << 20)}, storage_reader=ferry.dcp.FileSystemReader(nxt))
    # DCP retries with rank-local metadata and reports both failures as one assertion (torch
    # 2.11 reports it as "metadata is None" alone; the reader's own message is checked below).
    text = str(_cause(e))
    assert ("did not finish" in text and nxt in text) or text == "metadata is None", text
    with pytest.raises(ferry.CheckpointError, match="did not finish"):
        ferry.dcp.FileSystemReader(nxt).read_metadata()
    with pytest.raises(DCP_ERRORS):
        dcp.load({"w0": torch.zeros(1 << 20)}, storage_reader=dcp.FileSystemReader(nxt))
    out = {"w%d" % i: torch.zeros(1 << 20) for i in range(24)}
    dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(prev))
    for i in range(24):
        assert torch.all(out["w%d" % i] == i)


@pytest.mark.parametrize("files", [1, 4])
def test_a_full_disk_leaves_nothing_loadable_behind(tmp_path, files):
    """Also when a rank's files are written side by side (thread_count files)."""
    from test_checkpoint_generations import _mount_tmpfs

    disk = tmp_path / "small"
    disk.mkdir()
    _mount_tmpfs(disk, "6m")
    try:
        ok = {"w": torch.ones(1 << 18)}   # 1 MiB
        dcp.save(ok, storage_writer=ferry.dcp.FileSystemWriter(str(disk / "prev")))
        big = {"w%d" % i: torch.ones((2 << 20) // files) for i in range(files)}  # 8 MiB: more than is left
        with pytest.raises(DCP_ERRORS) as e:
            dcp.save(big, storage_writer=ferry.dcp.FileSystemWriter(str(disk / "next"), thread_count=files))
        assert isinstance(_cause(e), OSError), e.value
        assert "space" in str(_cause(e)).lower(), _cause(e)
        assert sorted(os.listdir(disk / "next")) == []
        out = {"w": torch.zeros(1 << 18)}
        dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(str(disk / "prev")))
        assert torch.equal(out["w"], ok["w"])
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# ---------------------------------------------------------------------------- Hugging Face

def _hf_state():
    g = torch.Generator().manual_seed(4)
    return {"model.embed.weight": torch.randn(100, 64, generator=g).to(torch.bfloat16),
            "model.norm.weight": torch.randn(64, generator=g),
            "lm_head.weight": torch.randn(32, 64, generator=g).to(torch.bfloat16)}


def test_hugging_face_writer_is_read_by_torch_safetensors_and_ferry(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    sd = _hf_state()
    mapping = {"model.embed.weight": 1, "model.norm.weight": 1, "lm_head.weight": 2}
    folder = str(tmp_path / "hf")
    ferry.reset_stats()
    dcp.save(sd, storage_writer=ferry.dcp.HuggingFaceStorageWriter(folder, fqn_to_index_mapping=mapping))
    assert ferry.stats()["bytes_written"] >= sd["model.embed.weight"].nbytes
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
    assert sorted(index["weight_map"]) == sorted(sd)
    assert len(set(index["weight_map"].values())) == 2
    for reader in (dcp.HuggingFaceStorageReader, ferry.dcp.HuggingFaceStorageReader):
        out = _blank(sd)
        dcp.load(out, storage_reader=reader(folder))
        _same(sd, out)
    loaded = {}
    for name in set(index["weight_map"].values()):
        loaded.update(st.load_file(os.path.join(folder, name)))
    _same(sd, loaded)
    got = ferry.load_checkpoint(folder, like="torch")
    _same(sd, dict(got))


def test_hugging_face_reader_reads_torchs_files(tmp_path):
    pytest.importorskip("safetensors.torch")
    sd = _hf_state()
    folder = str(tmp_path / "hf")
    dcp.save(sd, storage_writer=dcp.HuggingFaceStorageWriter(folder))
    out = _blank(sd)
    dcp.load(out, storage_reader=ferry.dcp.HuggingFaceStorageReader(folder, memory_budget=1))
    _same(sd, out)


def test_hugging_face_checkpoint_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    folder = str(tmp_path / "hf")
    dcp.save(sd, storage_writer=ferry.dcp.HuggingFaceStorageWriter(folder))
    config.save_pretrained(folder)
    again = transformers.GPT2LMHeadModel.from_pretrained(folder)
    for k, v in again.state_dict().items():
        assert torch.equal(v, sd[k]), k


def test_hugging_face_writer_refuses_non_tensors(tmp_path):
    with pytest.raises(DCP_ERRORS) as e:
        dcp.save({"w": torch.ones(3), "step": 3},
                 storage_writer=ferry.dcp.HuggingFaceStorageWriter(str(tmp_path / "hf")))
    assert isinstance(_cause(e), ValueError) and "'step'" in str(_cause(e)), e.value
    assert not [f for f in os.listdir(tmp_path / "hf") if f.endswith(".safetensors")]


# ---------------------------------------------------------------------------- GPU

def test_gpu_save_and_load_both_ways(tmp_path):
    if not HAVE_GPU or not torch.cuda.is_available():
        pytest.skip(GPU_REASON or "PyTorch has no CUDA")
    sd = _state("cuda")
    for w, r in (("ferry", "torch"), ("torch", "ferry"), ("ferry", "ferry")):
        folder = str(tmp_path / (w + r))
        dcp.save(sd, storage_writer=WRITERS[w](folder))
        out = _blank(sd)
        dcp.load(out, storage_reader=READERS[r](folder, **({"memory_budget": 4096} if r == "ferry" else {})))
        _same(sd, out)
        assert out["extra"]["bf16"].is_cuda
    # Read ahead into GPU memory while DCP plans (prefetch="auto": CUDA is initialized here).
    out = _blank(sd)
    reader = ferry.dcp.FileSystemReader(str(tmp_path / "ferryferry"), prefetch="auto")
    dcp.load(out, storage_reader=reader)
    _same(sd, out)
    assert reader.stats["copied_from_prefetch"] >= sd["extra"]["big"].nbytes, reader.stats


def test_gpu_async_save(tmp_path):
    if not HAVE_GPU or not torch.cuda.is_available():
        pytest.skip(GPU_REASON or "PyTorch has no CUDA")
    sd = _state("cuda")
    fut = dcp.async_save(sd, storage_writer=ferry.dcp.FileSystemWriter(str(tmp_path / "ck")))
    fut.result(timeout=120)
    out = _blank(sd)
    dcp.load(out, storage_reader=ferry.dcp.FileSystemReader(str(tmp_path / "ck")))
    _same(sd, out)


# ---------------------------------------------------------------------------- real ranks

def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_read_shared_bytes_once(tmp_path, world):
    port = _free_port()
    folder = str(tmp_path / "ck")
    outs = [str(tmp_path / ("rank%d.json" % r)) for r in range(world)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, WORKER, "--rank", str(r), "--world", str(world),
                               "--port", str(port), "--ckpt", folder, "--out", outs[r]],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=PROCESS_TIMEOUT)[0])
    finally:
        for p in procs:
            p.kill()
    results = []
    for r, path in enumerate(outs):
        assert os.path.exists(path), "rank %d wrote nothing:\n%s" % (r, logs[r][-3000:])
        results.append(json.load(open(path)))
    for res in results:
        assert res["ok"], res.get("error")
    try:
        import torch.distributed.tensor  # noqa: F401
        assert all(res["dtensor"] for res in results), "DTensor reshard not run"
    except ImportError:
        pass
    shared = results[0]["loads"]["dedup"]["shared_bytes"]
    assert shared > 0 and all(res["loads"]["dedup"]["shared_bytes"] == shared for res in results)
    # Each shared byte came off storage once across the group.
    assert sum(res["loads"]["dedup"]["shared_bytes_read"] for res in results) == shared
    # A truncated file fails the shared load on every rank, naming the file, within the timeout.
    for res in results:
        assert "truncated" in res["truncated"] and ".distcp" in res["truncated"], res["truncated"]
    # A flipped byte fails every rank's load with IntegrityError naming the tensor, whether the
    # group read it once or each rank read its reshard parts.
    for res in results:
        for victim in ("model.embed",) + (("sharded",) if results[0]["dtensor"] else ()):
            got = res["corrupt_" + victim]
            assert got.startswith("IntegrityError") and victim in got and "crc32c:" in got, got
    alone = sum(res["loads"]["alone"]["bytes_read"] for res in results)
    together = sum(res["loads"]["dedup"]["bytes_read"] for res in results)
    assert together < alone, (together, alone)
