"""What a new user meets first: numpy's own calls given to ferry.numpy, every dtype that loads
saved back, settings from code over a bad environment, errors that name the user's file,
numpy's bytes for Fortran-order saves, one shape of `info`, and bad values refused."""

import errno
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ferry
import ferry.numpy as fnp


def _numpy_save_bytes(a, **kwargs):
    buf = io.BytesIO()
    np.save(buf, a, **kwargs)
    return buf.getvalue()


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
        lambda: np.array([{"a": 1}, None], dtype=object),
        lambda: np.zeros(3, dtype=[("x", "<i4"), ("y", "<f8")]),
    ],
    ids=["float32", "object", "structured"],
)
def test_numpy_save_to_buffers_and_open_files(tmp_path, make):
    a = make()
    buf = io.BytesIO()
    fnp.save(buf, a)
    assert buf.getvalue() == _numpy_save_bytes(a)
    with open(tmp_path / "x.npy", "wb") as f:
        fnp.save(f, a)
    assert (tmp_path / "x.npy").read_bytes() == _numpy_save_bytes(a)
    # A path, too: object and structured arrays are numpy's to write.
    fnp.save(tmp_path / "y", a)
    assert (tmp_path / "y.npy").read_bytes() == _numpy_save_bytes(a)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_every_dtype_that_loads_saves(tmp_path, name):
    ml = pytest.importorskip("ml_dtypes")
    t = getattr(ml, name)
    a = np.linspace(-2, 2, 12).astype(t).reshape(3, 4)
    st = tmp_path / "a.safetensors"
    ferry.save(st, {"w": a})
    back = ferry.load(st)["w"]
    assert back.dtype == np.dtype(t)
    assert back.tobytes() == a.tobytes()
    ferry.save(st, {"w": back})  # what load returned saves again
    raw = tmp_path / "a.bin"
    ferry.tofile(back, raw)
    assert raw.read_bytes() == a.tobytes()
    again = ferry.fromfile(raw, t)
    assert again.dtype == np.dtype(t) and again.tobytes() == a.tobytes()
    fnp.tofile(a, raw)
    assert fnp.fromfile(raw, t).tobytes() == a.tobytes()


def _run_python(code, **env):
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                          capture_output=True, text=True, timeout=120)


def test_settings_in_code_win_over_a_bad_environment(tmp_path):
    p = tmp_path / "x.bin"
    np.arange(4, dtype=np.int32).tofile(p)
    r = _run_python(
        """
        import warnings, ferry, numpy as np
        # inspectable while the variable is bad
        assert ferry.settings.as_dict()["threads"] == 0, ferry.settings.as_dict()
        assert "FERRY_THREADS" in repr(ferry.settings), repr(ferry.settings)
        try:
            ferry.fromfile(%r, np.int32)
        except ferry.SettingsError as e:
            assert e.variable == "FERRY_THREADS", e.variable
        else:
            raise AssertionError("a bad FERRY_THREADS was used without a word")
        try:
            ferry.settings.gds = "off"      # another setting does not fix it
        except ferry.SettingsError as e:
            assert "FERRY_THREADS" in str(e)
        else:
            raise AssertionError("FERRY_THREADS ignored")
        with ferry.settings(threads=2):
            assert ferry.settings.threads == 2
            assert list(ferry.fromfile(%r, np.int32)) == [0, 1, 2, 3]
        ferry.settings.update(threads=3)
        assert ferry.settings.threads == 3
        ferry.settings.threads = 2
        assert ferry.settings.as_dict()["threads"] == 2
        assert list(ferry.fromfile(%r, np.int32)) == [0, 1, 2, 3]
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ferry.settings.reset()
        assert any("FERRY_THREADS" in str(x.message) for x in w), [str(x.message) for x in w]
        print("ok")
        """ % (str(p), str(p), str(p)),
        FERRY_THREADS="abc",
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_fortran_order_saves_are_numpys_bytes(tmp_path):
    for a in (
        np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4)),
        np.asfortranarray(np.arange(6, dtype=">i8").reshape(3, 2)),
        np.asfortranarray(np.arange(3, dtype=np.int16).reshape(3, 1)),  # C and F: C
    ):
        expect = _numpy_save_bytes(a)
        ferry.save(tmp_path / "a.npy", a)
        assert (tmp_path / "a.npy").read_bytes() == expect
        fnp.save(tmp_path / "b.npy", a)
        assert (tmp_path / "b.npy").read_bytes() == expect
        back = ferry.load(tmp_path / "a.npy")
        assert back.flags.f_contiguous and np.array_equal(back, a)


def test_save_errors_name_the_target(tmp_path):
    target = tmp_path / "missing" / "x.npy"
    for save in (lambda: ferry.save(target, np.ones(3, np.float32)),
                 lambda: ferry.save(tmp_path / "missing" / "m.safetensors", {"w": np.ones(3, np.float32)}),
                 lambda: ferry.tofile(np.ones(3, np.float32), tmp_path / "missing" / "x.bin"),
                 lambda: fnp.save(target, np.ones(3, np.float32))):
        with pytest.raises(ferry.FileError) as e:
            save()
        assert e.value.errno == errno.ENOENT
        assert e.value.filename.startswith(str(tmp_path / "missing"))
        assert ".tmp-" not in e.value.filename, e.value.filename


def test_info_has_the_shape_ferry_info_json_prints(tmp_path):
    p = tmp_path / "a.npy"
    np.save(p, np.arange(6, dtype=">f8").reshape(2, 3))
    d = ferry.info(p)
    assert d["file"] == str(p)
    assert d["file_size"] == os.path.getsize(p)
    assert "size" not in d and "byteorder" not in d["arrays"][0]
    assert d["arrays"][0]["byte_order"] == "big"
    assert d["arrays"][0]["shape"] == (2, 3)
    cli = os.environ.get("FERRY_CLI")
    if cli:
        j = json.loads(subprocess.run([cli, "info", "--json", str(p)], capture_output=True, text=True,
                                      check=True).stdout)
        j["arrays"][0]["shape"] = tuple(j["arrays"][0]["shape"])
        assert j == d


def test_counters_add_up_to_the_file(tmp_path):
    files = {"short.bin": None, "a.npy": None, "m.safetensors": None}
    (tmp_path / "short.bin").write_bytes(b"abc")
    np.save(tmp_path / "a.npy", np.arange(6.0).reshape(2, 3))
    ferry.save(tmp_path / "m.safetensors", {"a": np.ones(5, np.float32), "b": np.ones(3, np.int8)})
    for name in files:
        p = tmp_path / name
        ferry.reset_stats()
        if name.endswith(".bin"):
            ferry.load(p, dtype=np.uint8)
        else:
            ferry.load(p)
        assert ferry.stats()["bytes_read"] == os.path.getsize(p), name


def test_bad_values_are_refused(tmp_path):
    st = tmp_path / "m.safetensors"
    ferry.save(st, {"h": np.ones(4, np.float16), "d": np.ones(4, np.float64), "f": np.ones(4, np.float32)})
    with pytest.raises(ferry.UsageError, match="tensor 'd'|tensor 'h'"):
        ferry.load(st, dtype="bfloat16")  # float16/float64 -> bfloat16 is not supported
    got = ferry.load(st, dtype="float32")
    assert {a.dtype for a in got.values()} == {np.dtype(np.float32)}
    with pytest.raises(ferry.UsageError, match="metadata"):
        ferry.save(st, {"w": np.ones(2, np.float32)}, metadata={"step": object()})
    with pytest.raises(ferry.UsageError, match="metadata"):
        ferry.save(st, {"w": np.ones(2, np.float32)}, metadata={"step": [1]})
    ferry.save(st, {"w": np.ones(2, np.float32)}, metadata={"step": 1}, checksums=False)
    assert ferry.info(st)["metadata"] == {"step": "1"}


def test_package_namespace_and_fifo_message(tmp_path):
    assert not hasattr(ferry, "annotations")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ferry.FileError, match="FIFO"):
        ferry.fromfile(fifo, np.uint8)


def test_doctor_with_loadable_cufile_and_no_driver_does_not_hang(tmp_path):
    lib = None
    try:
        import nvidia
        for d in nvidia.__path__:
            cand = os.path.join(d, "cu13", "lib", "libcufile.so.0")
            if os.path.exists(cand):
                lib = cand
    except ImportError:
        pass
    if lib is None:
        pytest.skip("the nvidia-cufile wheel is not installed")
    env = dict(os.environ, FERRY_CUFILE_LIBRARY=lib)
    env.pop("CUFILE_LOGFILE_PATH", None)
    r = subprocess.run([sys.executable, "-c", "import ferry, json; print(json.dumps(ferry.doctor()['cufile']))"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    cufile = json.loads(r.stdout)
    assert cufile["available"] is True
    if ferry.cuda_device_count() == 0:
        assert cufile["driver"]["open"] is False
        assert "not opened" in cufile["driver"]["message"]
    assert not (tmp_path / "cufile.log").exists()
