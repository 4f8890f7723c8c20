"""Shared fixtures: which optional libraries and GPUs are here. GPU tests skip with a reason
when something is missing; they never pass without running."""

import importlib

import pytest

import ferry


def _module(name):
    try:
        return importlib.import_module(name)
    except Exception:  # a library that cannot load its CUDA libraries counts as absent
        return None


HAVE_GPU = ferry.cuda_device_count() > 0
GPU_REASON = "no usable GPU: " + ferry.cuda_unavailable_reason() if not HAVE_GPU else ""


@pytest.fixture
def gpu():
    if not HAVE_GPU:
        pytest.skip(GPU_REASON)
    return ferry.cuda_device_count()


@pytest.fixture
def cupy(gpu):
    cp = _module("cupy")
    if cp is None:
        pytest.skip("CuPy is not installed")
    return cp


@pytest.fixture
def torch(gpu):
    t = _module("torch")
    if t is None:
        pytest.skip("PyTorch is not installed")
    if not t.cuda.is_available():
        pytest.skip("PyTorch has no CUDA")
    return t


@pytest.fixture
def jax(gpu):
    j = _module("jax")
    if j is None:
        pytest.skip("JAX is not installed")
    try:
        if not j.devices("gpu"):
            pytest.skip("JAX has no GPU backend")
    except RuntimeError:
        pytest.skip("JAX has no GPU backend")
    return j
