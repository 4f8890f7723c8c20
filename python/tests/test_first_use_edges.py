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

