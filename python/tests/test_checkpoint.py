"""Checkpoints written by real tools (safetensors, huggingface_hub, torch), loaded byte-exact,
sliced, into existing arrays, with every bad input; and ferry's own save."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import ferry
from hub_checkpoints import hub_save, reference

safetensors_numpy = pytest.importorskip("safetensors.numpy")
hub = pytest.importorskip("huggingface_hub")


def _state(seed=0):
    rng = np.random.default_rng(seed)
    sd = {"model.embed_tokens.weight": rng.standard_normal((128, 64)).astype(np.float16)}
    for i in range(4):
        p = "model.layers.%d." % i
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + "self_attn.%s.weight" % n] = rng.standard_normal((64, 64)).astype(np.float16)
        sd[p + "self_attn.q_proj.bias"] = rng.standard_normal(64).astype(np.float32)
        sd[p + "mlp.gate_proj.weight"] = rng.standard_normal((96, 64)).astype(np.float16)
        sd[p + "mlp.up_proj.weight"] = rng.standard_normal((96, 64)).astype(np.float16)
        sd[p + "mlp.down_proj.weight"] = rng.standard_normal((64, 96)).astype(np.float16)
        sd[p + "input_layernorm.weight"] = rng.standard_normal(64).astype(np.float32)
    sd["model.norm.weight"] = np.ones(64, np.float32)
    sd["lm_head.weight"] = rng.standard_normal((128, 64)).astype(np.float16)
    sd["step"] = np.array([7], np.int64)
    return sd


@pytest.fixture
def ckpt(tmp_path):
    sd = _state()
    split = hub_save(str(tmp_path / "ckpt"), sd)
    assert split.is_sharded and len(split.filename_to_tensors) >= 4
    return str(tmp_path / "ckpt"), sd


def test_loads_hub_sharded_checkpoint_byte_exact(ckpt):
    folder, sd = ckpt
    ref = reference(folder)
    # The folder and its index: the shards huggingface_hub named are read from the folder's
    # listing before the index is parsed; a glob or a list of files, once their headers are in.
    for src, began in ((folder, "listing"), (os.path.join(folder, "model.safetensors.index.json"), "listing"),
                       (os.path.join(folder, "model-*.safetensors"), "headers"),
                       (sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors")),
                        "headers")):
        got = ferry.load_checkpoint(src)
        assert got.stats["reads_began"] == began, src
        assert list(got) == sorted(ref)
        for k, v in ref.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape
            assert got[k].tobytes() == v.tobytes(), k
        assert got.stats["bytes_read"] == sum(v.nbytes for v in ref.values())
        # the open (index and headers) is timed apart from the load's own seconds
        assert 0 < got.stats["open_seconds"] < 60 and got.stats["seconds"] > 0
    info = ferry.info_checkpoint(folder)
    assert len(info["shards"]) >= 4 and len(info["tensors"]) == len(sd)
    assert info["metadata"]["total_size"] == str(sum(v.nbytes for v in sd.values()))


def test_selection_by_names_glob_regex_and_callable(ckpt):
    folder, sd = ckpt
    names = ["lm_head.weight", "model.norm.weight"]
    assert list(ferry.load_checkpoint(folder, tensors=names)) == names
    got = ferry.load_checkpoint(folder, tensors="model.layers.*.mlp.*")
    assert len(got) == 12
    got = ferry.load_checkpoint(folder, tensors=re.compile(r"layers\.[01]\.self_attn\.q"))
    assert sorted(got) == sorted(k for k in sd if re.search(r"layers\.[01]\.self_attn\.q", k))
    got = ferry.load_checkpoint(folder, tensors=lambda n: n.endswith("bias"))
    assert len(got) == 4
    with pytest.raises(ferry.CheckpointError) as e:
        ferry.load_checkpoint(folder, tensors=["nope"])
    assert e.value.tensor == "nope"


@pytest.mark.parametrize("route", ["auto", "segments", "span"])
def test_slices_dim0_dim1_and_tensor_parallel_rules(ckpt, route):
    folder, sd = ckpt
    got = ferry.load_checkpoint(folder, route=route, slices={
        "model.embed_tokens.weight": (0, 32, 96),
        "model.layers.0.mlp.down_proj.weight": (1, 10, 50),
        "model.layers.1.*.weight": ferry.split(-1, 4, 3),
    })
    assert np.array_equal(got["model.embed_tokens.weight"], sd["model.embed_tokens.weight"][32:96])
    assert np.array_equal(got["model.layers.0.mlp.down_proj.weight"],
                          sd["model.layers.0.mlp.down_proj.weight"][:, 10:50])
    w = sd["model.layers.1.mlp.down_proj.weight"]
    assert np.array_equal(got["model.layers.1.mlp.down_proj.weight"], w[:, 72:96])
    ln = sd["model.layers.1.input_layernorm.weight"]
    assert np.array_equal(got["model.layers.1.input_layernorm.weight"], ln[48:64])
    assert np.array_equal(got["lm_head.weight"], sd["lm_head.weight"])


def test_tensor_parallel_half_reads_about_half(ckpt):
    folder, sd = ckpt
    rules = ferry.tensor_parallel(1, 2, column=["*.q_proj.*", "*.k_proj.*", "*.v_proj.*", "*.gate_proj.*",
                                                "*.up_proj.*", "*embed_tokens*", "lm_head.*"],
                                  row=["*.o_proj.weight", "*.down_proj.weight"])
    rules["*layernorm*"] = ferry.split(0, 2, 1)
    rules["model.norm.weight"] = ferry.split(0, 2, 1)
    whole = ferry.load_checkpoint(folder)
    ranks = [ferry.load_checkpoint(folder, slices=dict(rules, **{}), route="segments")]
    half = ranks[0]
    ratio = half.stats["bytes_read"] / whole.stats["bytes_read"]
    assert 0.45 < ratio < 0.55, ratio
    q = sd["model.layers.2.self_attn.q_proj.weight"]
    assert np.array_equal(half["model.layers.2.self_attn.q_proj.weight"], q[32:])
    o = sd["model.layers.2.self_attn.o_proj.weight"]
    assert np.array_equal(half["model.layers.2.self_attn.o_proj.weight"], o[:, 32:])
    routes = {p["name"]: p["route"] for p in half.stats["plan"]}
    assert routes["model.layers.2.self_attn.o_proj.weight"] == "segments"
    assert routes["model.layers.2.self_attn.q_proj.weight"] == "whole"
    # Both ranks together are the whole tensor.
    other = ferry.load_checkpoint(folder, slices=ferry.tensor_parallel(
        0, 2, row=["*.o_proj.weight"]), tensors="*.o_proj.weight")
    joined = np.concatenate([other["model.layers.2.self_attn.o_proj.weight"],
                             half["model.layers.2.self_attn.o_proj.weight"]], axis=1)
    assert np.array_equal(joined, o)


def test_into_dict_of_arrays_without_a_second_copy(ckpt):
    folder, sd = ckpt
    dst = {k: np.zeros_like(v) for k, v in sd.items() if "layers.3" in k}
    ptrs = {k: v.ctypes.data for k, v in dst.items()}
    with pytest.raises(ferry.UsageError, match="unexpected"):
        ferry.load_checkpoint(folder, into=dst)
    assert all(not v.any() for v in dst.values())
    r = ferry.load_checkpoint(folder, into=dst, strict=False)
    assert r.missing_keys == [] and len(r.unexpected_keys) == len(sd) - len(dst)
    for k, v in dst.items():
        assert v.ctypes.data == ptrs[k]
        assert v.tobytes() == sd[k].tobytes(), k
    assert r.stats["bytes_read"] == sum(v.nbytes for v in dst.values())
    # A key the checkpoint lacks is missing; with tensors= the selection is strict-matched.
    extra = {"model.layers.0.input_layernorm.weight": np.zeros(64, np.float32), "ghost": np.zeros(1)}
    r = ferry.load_checkpoint(folder, into=extra, strict=False)
    assert r.missing_keys == ["ghost"]
    # Conversion into a float32 destination from float16.
    d32 = {"lm_head.weight": np.zeros((128, 64), np.float32)}
    ferry.load_checkpoint(folder, into=d32, tensors=["lm_head.weight"])
    assert np.array_equal(d32["lm_head.weight"], sd["lm_head.weight"].astype(np.float32))


def test_bad_destinations_and_slices_touch_nothing(ckpt):
    folder, sd = ckpt
    guard = np.full((64, 64), 7, np.float16)
    name = "model.layers.0.self_attn.q_proj.weight"
    cases = [
        ({"model.layers.0.self_attn.k_proj.weight": np.zeros((64, 63), np.float16)}, None,
         "model.layers.0.self_attn.k_proj.weight"),
        ({"model.layers.0.self_attn.k_proj.weight": np.zeros((64, 64), np.int16)}, None,
         "model.layers.0.self_attn.k_proj.weight"),
        ({}, {"model.layers.0.mlp.up_proj.weight": (1, 0, 65)}, "model.layers.0.mlp.up_proj.weight"),
        ({}, {"model.layers.0.mlp.up_proj.weight": (2, 0, 1)}, "model.layers.0.mlp.up_proj.weight"),
    ]
    for extra, slices, bad in cases:
        into = dict(extra, **{name: guard})
        if slices:
            into["model.layers.0.mlp.up_proj.weight"] = np.zeros((96, 64), np.float16)
        with pytest.raises(ferry.CheckpointError) as e:
            ferry.load_checkpoint(folder, into=into, strict=False, slices=slices)
        assert e.value.tensor == bad
        assert ".safetensors" in e.value.filename
        assert (guard == 7).all()
    with pytest.raises(ferry.CheckpointError):
        ferry.load_checkpoint(folder, into={name: guard}, strict=False, device="cuda")
    assert (guard == 7).all()
    with pytest.raises(ferry.UsageError):
        ferry.load_checkpoint(folder, into={name: guard[:, ::2]}, strict=False)


def _rewrite_index(folder, change):
    p = os.path.join(folder, "model.safetensors.index.json")
    with open(p) as f:
        j = json.load(f)
    change(j["weight_map"])
    with open(p, "w") as f:
        json.dump(j, f)


def test_index_naming_a_missing_shard(ckpt):
    folder, _ = ckpt
    _rewrite_index(folder, lambda m: m.__setitem__("lm_head.weight", "model-00099-of-00099.safetensors"))
    with pytest.raises(ferry.CheckpointError, match="does not exist") as e:
        ferry.load_checkpoint(folder)
    assert e.value.tensor == "lm_head.weight"


def test_tensor_in_none_or_two_shards_and_disagreeing_index(ckpt, tmp_path):
    folder, sd = ckpt
    _rewrite_index(folder, lambda m: m.__setitem__("ghost", m["lm_head.weight"]))
    with pytest.raises(ferry.CheckpointError) as e:
        ferry.info_checkpoint(folder)
    assert e.value.tensor == "ghost"

    other = str(tmp_path / "two")
    split = hub_save(other, sd)
    shards = sorted(split.filename_to_tensors)
    first = os.path.join(other, shards[0])
    tensors = safetensors_numpy.load_file(first)
    stolen = split.filename_to_tensors[shards[1]][0]
    tensors[stolen] = sd[stolen]
    safetensors_numpy.save_file(tensors, first)
    with pytest.raises(ferry.CheckpointError) as e:
        ferry.info_checkpoint(other)
    assert e.value.tensor == stolen

    third = str(tmp_path / "three")
    split = hub_save(third, sd)
    shards = sorted(split.filename_to_tensors)
    moved = split.filename_to_tensors[shards[0]][0]
    _rewrite_index(third, lambda m: m.__setitem__(moved, shards[1]))
    with pytest.raises(ferry.CheckpointError) as e:
        ferry.info_checkpoint(third)
    assert e.value.tensor == moved and shards[1] in str(e.value)


def test_out_of_file_ranges_are_format_errors(ckpt):
    folder, _ = ckpt
    shard = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))[1]
    path = os.path.join(folder, shard)
    os.truncate(path, os.path.getsize(path) - 10)
    with pytest.raises(ferry.FormatError) as e:
        ferry.load_checkpoint(folder)
    assert e.value.filename == path


def test_budget_too_small_for_one_piece(ckpt):
    # Slices land in place; a conversion goes through temporaries held under the budget.
    folder, sd = ckpt
    saved = ferry.checkpoint_memory_budget()
    kw = dict(tensors=["lm_head.weight"], slices={"lm_head.weight": (1, 0, 8)}, route="span", dtype="float32")
    try:
        ferry.set_checkpoint_memory_budget(16)
        with pytest.raises(ferry.CheckpointError, match="budget") as e:
            ferry.load_checkpoint(folder, **kw)
        assert e.value.tensor == "lm_head.weight"
        ferry.set_checkpoint_memory_budget(4096)
        got = ferry.load_checkpoint(folder, **kw)
        assert np.array_equal(got["lm_head.weight"], sd["lm_head.weight"][:, :8].astype(np.float32))
        assert 0 < got.stats["peak_temp_bytes"] <= 4096
        # Without a conversion nothing is held: the same slice under the tiny budget.
        ferry.set_checkpoint_memory_budget(16)
        got = ferry.load_checkpoint(folder, slices={"lm_head.weight": (1, 0, 8)}, route="span")
        assert np.array_equal(got["lm_head.weight"], sd["lm_head.weight"][:, :8])
        assert got.stats["peak_temp_bytes"] == 0
    finally:
        ferry.set_checkpoint_memory_budget(saved)


def test_dtype_conversion_on_load(ckpt):
    folder, sd = ckpt
    got = ferry.load_checkpoint(folder, tensors=["lm_head.weight", "step"], dtype="float32")
    assert got["lm_head.weight"].dtype == np.float32
    assert np.array_equal(got["lm_head.weight"], sd["lm_head.weight"].astype(np.float32))
    assert got["step"].dtype == np.int64


def test_progress_callback(ckpt):
    folder, _ = ckpt
    seen = []
    ferry.load_checkpoint(folder, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1]


def test_results_are_wrapped_while_the_reads_run(ckpt):
    """The binding wraps each tensor (convert) while its bytes arrive; what it returns is the
    wrapped object, complete once the call returned; an error of the wrapping is the call's."""
    from ferry import _ferry

    folder, sd = ckpt
    ref = reference(folder)
    wrapped = []

    def convert(a):
        wrapped.append(a)
        return ("wrapped", a)

    arrays, stats = _ferry.load_checkpoint([folder], convert=convert)
    assert len(wrapped) == len(ref) == len(arrays) == len(stats["plan"])
    for (name, (tag, a)), w in zip(arrays, wrapped):
        assert tag == "wrapped" and a is w
        assert np.from_dlpack(a).tobytes() == ref[name].tobytes(), name

    def fails(a):
        raise ValueError("no wrapping today")

    with pytest.raises(ValueError, match="no wrapping today"):
        _ferry.load_checkpoint([folder], convert=fails)
    # the library holds nothing back after the failed call
    got = ferry.load_checkpoint(folder, like="numpy")
    assert all(got[k].tobytes() == v.tobytes() for k, v in ref.items())


def test_host_loads_are_numpy_views_of_one_block(tmp_path):
    """Into host memory for numpy, the binding returns places in the load's block and the
    tensors become numpy views of it: byte-exact for every dtype (scalars, empty tensors, a
    dtype numpy needs ml_dtypes for), one block behind them all, writable, and alive after
    the block's other views are gone."""
    from ferry import _ferry
    from safetensors.numpy import save_file

    rng = np.random.default_rng(3)
    sd = {"f32": rng.standard_normal((3, 5), dtype=np.float32), "i64": np.arange(7, dtype=np.int64),
          "b": np.array([True, False, True]), "scalar": np.array(2.5, dtype=np.float64),
          "empty": np.zeros((0, 4), dtype=np.float16), "u8": np.arange(9, dtype=np.uint8).reshape(3, 3),
          "f16": rng.standard_normal(11).astype(np.float16)}
    ml = importlib.util.find_spec("ml_dtypes")
    if ml is not None:
        import ml_dtypes
        sd["bf16"] = rng.standard_normal(6).astype(ml_dtypes.bfloat16)
    save_file(sd, str(tmp_path / "model.safetensors"))
    got = ferry.load_checkpoint(str(tmp_path / "model.safetensors"))
    assert sorted(got) == sorted(sd)
    for k, v in sd.items():
        assert isinstance(got[k], np.ndarray), k
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        assert got[k].tobytes() == v.tobytes(), k
    bases = {id(np.asarray(got[k]).base) for k in sd if got[k].size}
    assert len(bases) == 1  # every tensor a view of the one block
    got["f32"][0, 0] = 42.0
    assert got["f32"][0, 0] == 42.0
    keep = got["i64"]
    del got
    assert keep.tobytes() == sd["i64"].tobytes()
    from ferry._convert import numpy_view_dtype

    # the binding's form: {name: ndarray}, a dtype views() refuses passed to convert as an Array
    got, stats = _ferry.load_checkpoint([str(tmp_path / "model.safetensors")], convert=lambda a: ("converted", a),
                                        views=lambda d: None if d == "int64" else numpy_view_dtype(d))
    assert got["i64"][0] == "converted" and isinstance(got["i64"][1], _ferry.Array)
    assert got["empty"].shape == (0, 4) and got["scalar"].shape == () and got["scalar"] == 2.5
    assert got["f32"].dtype == np.float32 and got["f32"].shape == (3, 5)
    assert 0 <= stats["wrap_seconds"] <= stats["seconds"]


def test_the_young_objects_of_a_large_load_are_collected_while_it_reads(tmp_path):
    """A load of thousands of tensors makes as many objects the cycle collector tracks, with
    the collector paused; its pass over them runs inside the load, while the reads are in
    flight (the collector still paused), not at the first allocation after the load resumed
    it, once every byte had arrived (4.4 ms for 50,000 tensors on an H100)."""
    import gc

    pytest.importorskip("torch")  # torch's tensors are tracked by the collector, numpy's arrays are not
    from safetensors.numpy import save_file
    sd = {"t.%05d" % i: np.full(3, i, dtype=np.int32) for i in range(3000)}
    save_file(sd, str(tmp_path / "model.safetensors"))
    passes = []  # (generation, collector enabled) of each pass that starts

    def seen(phase, info):
        if phase == "start":
            passes.append((info["generation"], gc.isenabled()))
    gc.collect()
    gc.callbacks.append(seen)
    try:
        got = ferry.load_checkpoint(str(tmp_path / "model.safetensors"), like="torch")
    finally:
        gc.callbacks.remove(seen)
    assert (0, False) in passes, passes
    assert gc.isenabled()
    assert len(got) == 3000 and got["t.02999"].tolist() == [2999] * 3
    small = {"a": np.zeros(2, np.float32)}  # a small load leaves the pass to the collector
    save_file(small, str(tmp_path / "small.safetensors"))
    passes.clear()
    gc.callbacks.append(seen)
    try:
        ferry.load_checkpoint(str(tmp_path / "small.safetensors"), like="torch")
    finally:
        gc.callbacks.remove(seen)
    assert (0, False) not in passes, passes


def test_save_checkpoint_round_trip_with_reference_readers(tmp_path):
    sd = _state(1)
    folder = str(tmp_path / "out")
    files = ferry.save_checkpoint(folder, sd, max_shard_size="40KB", metadata={"run": "a"})
    assert os.path.basename(files[-1]) == "model.safetensors.index.json"
    assert len(files) >= 5
    with open(files[-1]) as f:
        index = json.load(f)
    assert index["metadata"]["total_size"] == sum(v.nbytes for v in sd.values())
    assert set(index["weight_map"]) == set(sd)
    ref = reference(folder)
    for k, v in sd.items():
        assert ref[k].tobytes() == v.tobytes()
    # huggingface_hub reads the shard metadata of the folder's index.
    mtimes = [os.stat(p).st_mtime_ns for p in files]
    assert mtimes[-1] == max(mtimes)
    got = ferry.load_checkpoint(folder)
    assert all(got[k].tobytes() == v.tobytes() for k, v in sd.items())
    one = ferry.save_checkpoint(str(tmp_path / "one"), sd)
    assert [os.path.basename(p) for p in one] == ["model.safetensors"]


def test_failed_save_leaves_the_previous_generation(tmp_path):
    folder = str(tmp_path / "out")
    sd = _state(2)
    ferry.save_checkpoint(folder, sd, max_shard_size=40_000)
    before = sorted(os.listdir(folder))
    bad = dict(sd)
    bad["zz_complex"] = np.zeros(4, np.complex128)  # safetensors cannot store it: fails late
    with pytest.raises(ferry.UsageError):
        ferry.save_checkpoint(folder, bad, max_shard_size=40_000)
    # The older index stays until a new one replaces it; the failed save's shards are gone.
    assert sorted(os.listdir(folder)) == before
    got = ferry.load_checkpoint(folder)
    assert all(got[k].tobytes() == v.tobytes() for k, v in sd.items())


_TORCH_MODULE_INTO = r"""
import os, sys
import torch, huggingface_hub as hub, ferry
folder = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 64))
os.makedirs(folder)
hub.save_torch_state_dict(model.state_dict(), folder, max_shard_size=20_000)
assert len([f for f in os.listdir(folder) if f.endswith(".safetensors")]) >= 2
ref = {k: v.numpy() for k, v in model.state_dict().items()}
got = ferry.load_checkpoint(folder)
assert all(got[k].tobytes() == v.tobytes() for k, v in ref.items())
fresh = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 64))
ptrs = {k: v.data_ptr() for k, v in fresh.state_dict().items()}
r = ferry.load_checkpoint(folder, into=fresh)
assert r.missing_keys == [] and r.unexpected_keys == []
for k, v in fresh.state_dict().items():
    assert v.data_ptr() == ptrs[k]
    assert torch.equal(v, model.state_dict()[k])
# The destinations of a module are its state_dict's names and tensors, in its order: buffers
# (not the non-persistent ones), shared submodules under both names, parameters set to None left
# out; a module that changes its state_dict (extra state, a hook) is asked for it.
from ferry import _checkpoint as ck
class Extra(torch.nn.Linear):
    def get_extra_state(self):
        return {"k": 1}
shared = torch.nn.Linear(4, 4)
odd = torch.nn.Sequential(torch.nn.BatchNorm1d(4), shared, torch.nn.Sequential(shared), torch.nn.Linear(4, 4, bias=False))
odd.register_buffer("scratch", torch.zeros(2), persistent=False)
odd[0].register_buffer("gone", None)
for m in (odd, fresh, torch.nn.Sequential(Extra(2, 2))):
    want = m.state_dict()
    got = ck._targets(m)
    assert list(got) == list(want), (list(got), list(want))
    assert all(not torch.is_tensor(v) or got[k].data_ptr() == v.data_ptr() for k, v in want.items())
assert ck._plain_state(torch.nn.Sequential(Extra(2, 2))) is None
hooked = torch.nn.Linear(2, 2)
def drop_bias(mod, sd, prefix, meta):
    del sd[prefix + "bias"]
hooked._register_state_dict_hook(drop_bias)
assert ck._plain_state(hooked) is None and list(ck._targets(hooked)) == ["weight"]
bigger = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 64),
                             torch.nn.Linear(64, 8))
try:
    ferry.load_checkpoint(folder, into=bigger)
    raise SystemExit("strict load into a bigger module did not fail")
except ferry.UsageError as e:
    assert "missing" in str(e)
r = ferry.load_checkpoint(folder, into=bigger, strict=False)
assert r.missing_keys == ["3.bias", "3.weight"], r.missing_keys
print("ok")
"""


def test_torch_checkpoint_and_module_into(tmp_path):
    # In a child process: importing torch here would stay for the rest of the session, and
    # without a GPU driver torch's bundled CUDA libraries make later doctor probes hang.
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", _TORCH_MODULE_INTO, str(tmp_path / "t")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_gpu_load_like_torch_and_into_module(tmp_path, torch):
    folder = str(tmp_path / "g")
    os.makedirs(folder)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Linear(96, 64)).to(torch.bfloat16)
    hub.save_torch_state_dict(model.state_dict(), folder, max_shard_size=10_000)
    got = ferry.load_checkpoint(folder, device="cuda", like="torch")
    for k, v in model.state_dict().items():
        assert got[k].is_cuda and torch.equal(got[k].cpu(), v)
    # The tensors share one block from PyTorch's own pool, which accounts for it.
    base = torch.cuda.memory_allocated()
    again = ferry.load_checkpoint(folder, device="cuda", like="torch")
    assert torch.cuda.memory_allocated() - base >= again.stats["bytes_out"]
    del again
    assert torch.cuda.memory_allocated() == base
    dst = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Linear(96, 64)).to(torch.bfloat16).cuda()
    r = ferry.load_checkpoint(folder, into=dst)
    assert not r.missing_keys
    for k, v in model.state_dict().items():
        assert torch.equal(dst.state_dict()[k].cpu(), v)
    # Work still queued on the parameters (behind a sleeping kernel) ends before any byte of the
    # load lands: the load's bytes are what remains.
    with torch.no_grad():
        torch.cuda._sleep(50_000_000)
        for p in dst.parameters():
            p.fill_(7)
    ferry.load_checkpoint(folder, into=dst)
    for k, v in model.state_dict().items():
        assert torch.equal(dst.state_dict()[k].cpu(), v), k
    for route in ("segments", "span"):
        half = ferry.load_checkpoint(folder, device="cuda", like="torch", route=route,
                                     slices={"0.weight": (1, 32, 64), "1.weight": ferry.split(0, 2, 1)},
                                     dtype="float32")
        assert torch.equal(half["0.weight"].cpu(), model.state_dict()["0.weight"][:, 32:].float())
        assert torch.equal(half["1.weight"].cpu(), model.state_dict()["1.weight"][32:].float())


def test_gpu_load_with_cupy(ckpt, cupy):
    folder, sd = ckpt
    got = ferry.load_checkpoint(folder, device="cuda", like="cupy",
                                slices={"model.layers.0.mlp.down_proj.weight": (1, 0, 48)})
    assert np.array_equal(cupy.asnumpy(got["model.layers.0.mlp.down_proj.weight"]),
                          sd["model.layers.0.mlp.down_proj.weight"][:, :48])
    pool = cupy.get_default_memory_pool()
    used = pool.used_bytes()
    block = ferry.load_checkpoint(folder, device="cuda", like="cupy")
    assert pool.used_bytes() - used >= block.stats["bytes_out"]
    for k, v in sd.items():
        assert np.array_equal(cupy.asnumpy(block[k]), v)
    dst = {"lm_head.weight": cupy.zeros((128, 64), cupy.float32)}
    ferry.load_checkpoint(folder, into=dst, tensors=["lm_head.weight"])
    assert np.array_equal(cupy.asnumpy(dst["lm_head.weight"]), sd["lm_head.weight"].astype(np.float32))


def _torch_views_checkpoint(folder):
    """A checkpoint whose tensors torch views in runs (same dtype and shape, one after the
    other) and alone: bf16 scales, float32 matrices, a scalar, an empty tensor, integers."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(5)
    sd = {"layers.%d.scale" % i: torch.randn(16, generator=g).to(torch.bfloat16) for i in range(40)}
    sd.update({"layers.%d.w" % i: torch.randn(3, 4, generator=g) for i in range(7)})
    sd["step"] = torch.tensor(7, dtype=torch.int64)
    sd["empty"] = torch.zeros(0, 3, dtype=torch.float16)
    sd["ids"] = torch.arange(5, dtype=torch.int32)
    os.makedirs(folder)
    keys = sorted(sd)
    save_file({k: sd[k] for k in keys[:30]}, os.path.join(folder, "model-00001-of-00002.safetensors"))
    save_file({k: sd[k] for k in keys[30:]}, os.path.join(folder, "model-00002-of-00002.safetensors"))
    return sd


def _check_torch_views(got, sd, device):
    import torch

    assert list(got) == sorted(sd)
    for k, v in sd.items():
        t = got[k]
        assert isinstance(t, torch.Tensor) and t.dtype == v.dtype and t.shape == v.shape, k
        assert t.device.type == device, k
        assert torch.equal(t.cpu(), v), k
    # views of one block: writing one tensor leaves its neighbours as they were
    got["layers.3.scale"].fill_(1)
    assert torch.equal(got["layers.4.scale"].cpu(), sd["layers.4.scale"])
    assert torch.equal(got["layers.2.scale"].cpu(), sd["layers.2.scale"])


def test_torch_tensors_are_views_made_in_runs(tmp_path):
    """like="torch" into host memory: tensors are views of one tensor over the load's block,
    each run of one dtype and shape made by one unbind, byte-exact and alive after the result
    dict is gone."""
    sd = _torch_views_checkpoint(str(tmp_path / "ck"))
    got = ferry.load_checkpoint(str(tmp_path / "ck"), like="torch")
    _check_torch_views(got, sd, "cpu")
    keep = got["layers.6.w"]
    del got
    assert keep.tolist() == sd["layers.6.w"].tolist()


def test_torch_runs_come_from_the_library_as_one_entry_each(tmp_path):
    """The library hands a run of neighbouring same-dtype, same-shape tensors to the bulk
    wrapper as one entry with its count (one unbind in torch), in the load's name order, and
    names what comes back itself; the scales of layers 7 to 39 lie one after the other in one
    shard and come as few entries."""
    from ferry import _ferry
    from ferry._convert import torch_bulk, torch_view_dtype

    sd = _torch_views_checkpoint(str(tmp_path / "ck"))
    seen = []
    wrap = torch_bulk("cpu")

    def bulk(block, entries):
        seen.extend(entries)
        return wrap(block, entries)

    got, _ = _ferry.load_checkpoint([str(tmp_path / "ck")], "cpu", "all", [], [], None, [], False, False, "auto",
                                    None, views=torch_view_dtype, bulk=bulk)
    counts = [1 if len(e) == 1 else e[4] for e in seen]
    assert sum(counts) == len(sd) and list(got) == sorted(sd)
    assert max(counts) >= 10 and len(seen) < len(sd) // 2, counts
    _check_torch_views(got, sd, "cpu")


def test_torch_tensors_on_the_gpu_are_views_made_in_runs(tmp_path, gpu):
    sd = _torch_views_checkpoint(str(tmp_path / "ck"))
    got = ferry.load_checkpoint(str(tmp_path / "ck"), device="cuda", like="torch")
    _check_torch_views(got, sd, "cuda")


def test_numpy_destinations_are_imported_together_and_checked_by_name(tmp_path):
    """into= numpy arrays: plain ones (native or explicitly little-endian dtypes, as a host load
    returns) are imported in one call and filled byte-exact; a read-only or strided one is still
    refused naming its key, before any byte moves."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(11)
    sd = {"a": rng.standard_normal((4, 3), dtype=np.float32), "b": np.arange(6, dtype=np.int16),
          "c": np.array([True, False]), "d": rng.standard_normal(5).astype(np.float16)}
    save_file(sd, str(tmp_path / "model.safetensors"))
    dst = {k: np.zeros_like(v) for k, v in sd.items()}
    dst["a"] = np.zeros((4, 3), dtype=np.dtype("<f4"))
    r = ferry.load_checkpoint(str(tmp_path / "model.safetensors"), into=dst)
    assert r.missing_keys == [] and r.unexpected_keys == []
    assert all(dst[k].tobytes() == v.tobytes() for k, v in sd.items())
    ro = {k: np.zeros_like(v) for k, v in sd.items()}
    ro["b"].flags.writeable = False
    with pytest.raises(ferry.UsageError, match=r"into\['b'\]"):
        ferry.load_checkpoint(str(tmp_path / "model.safetensors"), into=ro)
    strided = {k: np.zeros_like(v) for k, v in sd.items()}
    strided["a"] = np.zeros((4, 6), dtype=np.float32)[:, ::2]
    with pytest.raises(ferry.UsageError, match=r"into\['a'\]"):
        ferry.load_checkpoint(str(tmp_path / "model.safetensors"), into=strided)
    assert not ro["a"].any() and not strided["c"].any()  # nothing written
