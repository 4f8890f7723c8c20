"""One generation per checkpoint load: loads racing saves into the same folder return one save's
tensors or a retryable CheckpointChangedError, never a mix and never a missing index; a save that
fails (a full disk) leaves the previous generation loadable and nothing of its own; checkpoints
without a generation (written by safetensors and huggingface_hub) load as before."""

import json
import multiprocessing as mp
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

import ferry
from hub_checkpoints import hub_save, reference

# 24 tensors of 200 KB in shards of at most 1 MB: five shards and an index per save.
TENSORS = 24
FLOATS = 50_000
SHARD = "1MB"
RACE_SECONDS = float(os.environ.get("FERRY_TEST_RACE_SECONDS", "20"))


def _generation(g):
    return {"t%02d" % i: np.full(FLOATS, g, np.float32) for i in range(TENSORS)}


def _writer(folder, seconds, out):
    saves = 0
    end = time.monotonic() + seconds
    g = 1
    while time.monotonic() < end:
        g += 1
        ferry.save_checkpoint(folder, _generation(g), max_shard_size=SHARD)
        saves += 1
    out.put(("writer", {"saves": saves}))


def _reader(folder, seconds, out):
    counts = {"loads": 0, "mixed": 0, "changed": 0, "other": 0, "examples": []}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            got = ferry.load_checkpoint(folder)
        except ferry.CheckpointChangedError:
            counts["changed"] += 1
            continue
        except Exception as e:  # anything else is a failure of the guarantee
            counts["other"] += 1
            if len(counts["examples"]) < 5:
                counts["examples"].append("%s: %s" % (type(e).__name__, e))
            continue
        counts["loads"] += 1
        values = set()
        for name, v in got.items():
            a = np.asarray(v)
            values.update(np.unique(a).tolist())
        if len(values) != 1 or len(got) != TENSORS:
            counts["mixed"] += 1
            if len(counts["examples"]) < 5:
                counts["examples"].append("mixed: %s" % sorted(values)[:5])
    out.put(("reader", counts))


def race(folder):
    """RACE_SECONDS of one writer saving new generations into `folder` (a path or a URL) and two
    readers loading it in a loop: the writer's and the readers' counts, each checked."""
    ferry.save_checkpoint(folder, _generation(1), max_shard_size=SHARD)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(folder, RACE_SECONDS, out))]
    procs += [ctx.Process(target=_reader, args=(folder, RACE_SECONDS, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            results.append(out.get(timeout=RACE_SECONDS + 120))
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    writer = [r for k, r in results if k == "writer"][0]
    print("race (%g s, %s):" % (RACE_SECONDS, folder), results)
    readers = [r for k, r in results if k == "reader"]
    assert writer["saves"] > 10, writer
    for r in readers:
        assert r["mixed"] == 0 and r["other"] == 0, r
        assert r["loads"] > 0, r
    return writer, readers


def test_loads_racing_saves_never_mix_generations(tmp_path):
    folder = str(tmp_path / "ckpt")
    race(folder)
    # Nothing of the earlier saves is left: the last one's shards and its index.
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
    assert sorted(os.listdir(folder)) == sorted(set(index["weight_map"].values()) |
                                                {"model.safetensors.index.json"})


def _mount_tmpfs(path, size):
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here: " + (r.stderr.strip() or "mount failed"))


def test_a_save_that_fills_the_disk_leaves_the_previous_generation(tmp_path):
    disk = tmp_path / "small"
    disk.mkdir()
    _mount_tmpfs(disk, "7m")  # room for one generation (4.8 MB), not for two
    try:
        folder = str(disk / "ckpt")
        ferry.save_checkpoint(folder, _generation(1), max_shard_size=SHARD)
        before = sorted(os.listdir(folder))
        with pytest.raises(ferry.Error) as e:
            ferry.save_checkpoint(folder, _generation(2), max_shard_size=SHARD)
        assert "space" in str(e.value).lower(), e.value
        assert sorted(os.listdir(folder)) == before
        got = ferry.load_checkpoint(folder)
        assert len(got) == TENSORS
        for v in got.values():
            assert np.all(np.asarray(v) == 1)
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_saved_generations_are_plain_safetensors_and_index(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    folder = str(tmp_path / "ckpt")
    for g in (1, 2):
        ferry.save_checkpoint(folder, _generation(g), max_shard_size=SHARD, metadata={"who": "test"})
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
    gen = index["metadata"]["ferry.generation"]
    assert len(gen) == 32 and index["metadata"]["who"] == "test"
    for name in set(index["weight_map"].values()):
        with open(os.path.join(folder, name), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        assert header["__metadata__"]["ferry.generation"] == gen
        assert header["__metadata__"]["format"] == "pt"
        loaded = safetensors_numpy.load_file(os.path.join(folder, name))
        for k, v in loaded.items():
            assert index["weight_map"][k] == name and np.all(v == 2)


def test_checkpoints_without_a_generation_still_load(tmp_path):
    pytest.importorskip("huggingface_hub")
    rng = np.random.default_rng(3)
    sd = {"w%d" % i: rng.standard_normal((64, 64)).astype(np.float32) for i in range(8)}
    folder = str(tmp_path / "hub")
    split = hub_save(folder, sd, max_shard_size=40_000)
    assert split.is_sharded
    ref = reference(folder)
    got = ferry.load_checkpoint(folder)
    assert sorted(got) == sorted(ref)
    for k, v in ref.items():
        assert np.asarray(got[k]).tobytes() == v.tobytes(), k


def test_the_changed_error_is_a_ferry_error_to_retry():
    assert issubclass(ferry.CheckpointChangedError, ferry.Error)
    assert ferry.CheckpointChangedError.__module__ == "ferry"
