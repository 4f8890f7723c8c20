"""How ferry talks about dtypes and devices, and which library's array a call returns.

The return rule
---------------
* host memory (``device="cpu"`` or ``"pinned"``): a ``numpy.ndarray`` sharing ferry's memory
  (no copy). bfloat16 and float8 arrays need ``ml_dtypes`` for a numpy dtype; without it they
  come back as a :class:`ferry.Array`.
* GPU memory: an array of ``like``'s library when ``like`` is given (CuPy, PyTorch, JAX, or any
  library with ``from_dlpack``); else a CuPy array when CuPy can be imported (and has the
  dtype); else a :class:`ferry.Array`, which CuPy, PyTorch and JAX accept through DLPack.
All of these share ferry's memory: nothing is copied on the way out.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
import operator
import os
from typing import Any

import numpy as np

from . import _ferry
from ._errors import UsageError

# Types numpy has no built-in dtype for; ml_dtypes (installed with JAX) provides them.
_EXTENDED = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
_FERRY_NAMES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "float8_e4m3fn", "float8_e5m2",
)
_ITEMSIZE = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
_GPU_LIBRARIES = ("cupy",)
_missing = object()
_modules: dict[str, Any] = {}


def optional_module(name: str):
    """The module, or None when it cannot be imported (cached)."""
    mod = _modules.get(name, _missing)
    if mod is _missing:
        try:
            mod = importlib.import_module(name)
        except Exception:  # a broken install (e.g. no CUDA libraries) counts as absent
            mod = None
        _modules[name] = mod
    return mod


def ml_dtypes():
    return optional_module("ml_dtypes")


_NUMPY_DTYPE_TEXT: dict = {}


def dtype_text(dtype: Any) -> tuple[str, int]:
    """What ferry's parser takes for `dtype` ('<f4', '|b1', 'bfloat16'), and the item size.

    Accepts what numpy accepts (np.float32, 'f4', '>i8', float), ferry's names ('bfloat16',
    'float8_e4m3fn'), ml_dtypes types and torch dtypes. A numpy dtype's answer is remembered:
    every array handed to ferry asks it, and working it out took 7.6 us, most of a save of
    100,000 small arrays."""
    if isinstance(dtype, np.dtype):
        hit = _NUMPY_DTYPE_TEXT.get(dtype)
        if hit is None:
            hit = _NUMPY_DTYPE_TEXT[dtype] = _dtype_text(dtype)
        return hit
    return _dtype_text(dtype)


def _dtype_text(dtype: Any) -> tuple[str, int]:
    if dtype is None:
        dtype = float
    if isinstance(dtype, str) and dtype in _EXTENDED:
        return dtype, _ITEMSIZE[dtype]
    text = str(dtype)
    if text.startswith("torch."):
        name = text[len("torch."):]
        name = {"half": "float16", "float": "float32", "double": "float64",
                "bfloat16": "bfloat16"}.get(name, name)
        if name in _FERRY_NAMES:
            return name, _ITEMSIZE.get(name) or np.dtype(name).itemsize
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError("ferry cannot use dtype %r" % (dtype,)) from e
    # ml_dtypes gives float8_e5m2 the kind 'f' (and the type string '<f1', which means
    # nothing to numpy or ferry): its name decides before its kind.
    if dt.name in _EXTENDED:
        return dt.name, dt.itemsize
    if dt.kind in "biufc" and dt.fields is None and dt.subdtype is None:
        return dt.str, dt.itemsize
    raise TypeError("ferry moves numbers and booleans only; dtype %s is not supported" % dt)


def moves_dtype(dtype: Any) -> bool:
    """Whether ferry has an element type for `dtype`. numpy's structured, object, string and
    long double dtypes have none: the drop-ins in ferry.numpy hand those to numpy."""
    try:
        text, _ = dtype_text(dtype)
    except TypeError:
        return False
    if text in _FERRY_NAMES:
        return True
    return np.dtype(text).newbyteorder("=").name in _FERRY_NAMES


def numpy_dtype(name: str, byteorder: str):
    """The numpy dtype of a ferry array's elements, or None when numpy has none here."""
    if name in _EXTENDED:
        ml = ml_dtypes()
        return None if ml is None else np.dtype(getattr(ml, name))
    dt = np.dtype(name)
    if byteorder in "<>" and dt.itemsize > 1:
        dt = dt.newbyteorder(byteorder)
    return dt


def host_to_numpy(a: _ferry.Array):
    """A numpy view of a ferry host array (no copy); the Array itself when numpy has no dtype."""
    dt = numpy_dtype(a.dtype, a.byteorder)
    if dt is None:
        return a
    if a.nbytes == 0:
        return np.empty(a.shape, dtype=dt, order=a.order)
    return a._host_bytes().view(dt).reshape(a.shape, order=a.order)


def numpy_view_dtype(name: str) -> Any:
    """The numpy dtype of fresh tensors of ferry's dtype `name` (little-endian, C order), for
    the numpy views a host checkpoint load makes of its block in one loop in C++ (the `views`
    form of _ferry.load_checkpoint); None when numpy has none here."""
    return numpy_dtype(name, "<")


def library_of(like: Any) -> tuple[str | None, str | None]:
    """(library name, device) that `like` asks for: an array, a module or a library's name."""
    if like is None:
        return None, None
    if isinstance(like, str):
        return like.lower(), None
    if isinstance(like, type(np)):
        return like.__name__.split(".")[0], None
    if isinstance(like, _ferry.Array):
        return "ferry", like.device
    lib = type(like).__module__.split(".")[0]
    if lib == "jaxlib":
        lib = "jax"
    device = None
    if isinstance(like, np.ndarray):
        device = "cpu"
    elif hasattr(like, "__dlpack_device__"):
        try:
            kind, index = like.__dlpack_device__()
            device = {1: "cpu", 3: "pinned", 2: "cuda:%d" % index, 13: "cuda:%d" % index}.get(int(kind))
        except Exception:
            device = None
    return lib, device


def device_text(device: Any) -> str:
    """ferry's device string for what a user may pass: 'cpu', 'cuda', 'cuda:1', 'pinned', an
    int (a GPU), a torch.device or a cupy.cuda.Device."""
    if device is None:
        return "cpu"
    if isinstance(device, str):
        text = device.strip().lower()
        if text in ("cpu", "host"):
            return "cpu"
        if text == "gpu":
            return "cuda"
        return text
    if hasattr(device, "id") and type(device).__module__.startswith("cupy"):
        return "cuda:%d" % device.id
    if type(device).__module__.startswith("torch"):
        if device.type == "cpu":
            return "cpu"
        return "cuda:%d" % (device.index or 0)
    try:
        return "cuda:%d" % operator.index(device)
    except TypeError:
        raise UsageError("device must be 'cpu', 'pinned', 'cuda' or 'cuda:N', got %r" % (device,))


def is_gpu(device: str) -> bool:
    return device.startswith(("cuda", "managed"))


def target(device: Any, like: Any) -> tuple[str, str | None]:
    """The ferry device string and the library for a call's `device` and `like`."""
    lib, like_device = library_of(like)
    dev = device_text(device if device is not None else like_device)
    if lib == "numpy" and is_gpu(dev):
        raise UsageError("numpy arrays live in host memory: use device='cpu', or like= a GPU "
                         "library's array (CuPy, PyTorch, JAX)")
    if lib in _GPU_LIBRARIES and not is_gpu(dev):
        raise UsageError("%s arrays live in GPU memory: use device='cuda' or 'cuda:N'" % lib)
    return dev, lib


def keeps_byte_order(device: str, lib: str | None) -> bool:
    """numpy keeps a file's byte order (dtype '>f4'); DLPack cannot describe it, so arrays for
    the GPU or for other libraries are made native."""
    return not is_gpu(device) and lib in (None, "numpy")


def to_library(a: _ferry.Array, lib: str | None):
    """Applies the return rule (see the module's documentation) to one ferry array."""
    on_gpu = is_gpu(a.device)
    if lib == "ferry":
        return a
    if lib is None or lib == "numpy":
        if not on_gpu:
            return host_to_numpy(a)
        cupy = optional_module("cupy")
        if cupy is not None and a.dtype not in _EXTENDED:
            return cupy.from_dlpack(a)
        return a
    source: Any = a
    if not on_gpu:
        # numpy's DLPack export knows no bfloat16 or float8: ferry's own export does.
        source = a.to_native()
        if a.dtype not in _EXTENDED:
            source = host_to_numpy(source)
    mod = optional_module(lib)
    if mod is None:
        raise UsageError("like= asks for %s, which cannot be imported" % lib)
    if lib == "jax":
        import jax.dlpack

        try:
            return jax.dlpack.from_dlpack(source)
        except TypeError:  # older JAX takes only a capsule
            return jax.dlpack.from_dlpack(source.__dlpack__())
    if hasattr(mod, "from_dlpack"):
        return mod.from_dlpack(source)
    raise UsageError("like=: %s has no from_dlpack" % lib)


def library_converter(lib: str | None, device: str) -> Callable[[_ferry.Array], Any]:
    """to_library for many arrays of one call (a checkpoint's tensors): the library looked up
    once. PyTorch on the GPU gets each array's DLPack capsule, not the array: handed an object,
    torch.from_dlpack makes a stream object per tensor to pass to ``__dlpack__``, which costs
    more than the import itself and which ferry's arrays, complete when they reach Python,
    ignore."""
    if lib == "torch" and is_gpu(device):
        if optional_module("torch") is None:
            raise UsageError("like= asks for torch, which cannot be imported")
        from torch.utils.dlpack import from_dlpack

        return lambda a: from_dlpack(a.__dlpack__())
    return lambda a: to_library(a, lib)


def import_ahead(lib: str | None, device: str) -> Callable[[Sequence[str]], None]:
    """A function dtype names -> None that imports the modules to_library will import for
    arrays of those dtypes on `device` (ml_dtypes for bfloat16 and float8 in numpy, CuPy for
    GPU arrays, `like`'s library), called by a load once it knows the dtypes and before it
    times itself: the first load in a process would otherwise count a one-time import (1.2 s
    for ml_dtypes on the CPU machine) as its own time."""
    def run(names: Sequence[str]) -> None:
        on_gpu = is_gpu(device)
        if lib in (None, "numpy") and not on_gpu:
            if any(n in _EXTENDED for n in names):
                ml_dtypes()
        elif lib is None:
            optional_module("cupy")
        elif lib != "ferry":
            optional_module(lib)

    return run


def wraps_without_reading(lib: str | None) -> bool:
    """Whether to_library's result for `lib` is a view made without reading the array's bytes
    (NumPy, CuPy and PyTorch import through the buffer protocol or DLPack), so it may be made
    while the bytes still arrive. JAX may copy on import, and unknown libraries may too."""
    return lib in (None, "numpy", "ferry", "cupy", "torch")


_TORCH_NAMES = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
                "float16": "float16", "bfloat16": "bfloat16", "float32": "float32",
                "float64": "float64", "complex64": "complex64", "complex128": "complex128",
                "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}


def torch_view_dtype(name: str) -> Any:
    """The torch dtype of ferry's dtype `name`, or None where this torch has none."""
    torch = optional_module("torch")
    t = _TORCH_NAMES.get(name)
    return None if torch is None or t is None else getattr(torch, t, None)


def torch_bulk(device: str) -> Callable[[Any, Sequence], list]:
    """The `bulk` form of _ferry.load_checkpoint for PyTorch: a function (block, entries) ->
    [tensor or run of tensors, one per entry] that makes the tensors as views of one torch tensor
    over the block. Each entry (dtype, shape, offset, nbytes, count) is a run of `count` tensors
    of one dtype and shape that follow one another in the block (an MoE model's scales, the
    experts' matrices), made by one narrow, view and unbind: torch makes the run's views in one
    call, where a DLPack import per tensor cost several microseconds each; the library puts
    them in the result by name. A tensor given as (Array,) (a dtype torch lacks, a place not
    aligned to its items) is imported alone."""
    import torch
    from torch.utils.dlpack import from_dlpack

    convert = library_converter("torch", device)
    on_gpu = is_gpu(device)
    where = device if on_gpu else "cpu"

    def run(block: Any, entries: Sequence) -> list:
        base = None
        if block is not None:
            base = from_dlpack(block.__dlpack__()) if on_gpu else torch.from_numpy(block._host_bytes())
        out: list = []
        for e in entries:
            if len(e) == 1:
                out.append(convert(e[0]))
                continue
            dname, shape, off, nb, k = e
            dt = torch_view_dtype(dname)
            if off < 0:
                out.append(torch.empty(shape, dtype=dt, device=where))
            elif k == 1:
                out.append(base.narrow(0, off, nb).view(dt).view(shape))
            else:
                out.append(base.narrow(0, off, k * nb).view(dt).view((k,) + tuple(shape)).unbind(0))
        return out

    return run


def empty_in_library(lib: str | None, device: str, shape: Sequence[int], dtype_name: str) -> Any:
    """An uninitialized GPU array of the library a result goes to (CuPy by default, PyTorch),
    from that library's own memory pool, or None where it cannot hold the dtype. Reads land in
    it directly: memory the pool already mapped takes copies at the full PCIe rate, while a
    fresh cudaMalloc slows the first copy into it by about a tenth (H200 machine); and the
    library accounts for the memory it hands out. Work the library still has queued on its
    stream is waited for first, since the pool may reuse memory that work still reads."""
    if not is_gpu(device) or device.startswith("managed"):
        return None
    index = int(device.partition(":")[2] or 0)
    if lib in (None, "cupy"):
        cupy = optional_module("cupy")
        if cupy is None or dtype_name in _EXTENDED:
            return None
        with cupy.cuda.Device(index):
            out = cupy.empty(tuple(shape), dtype=np.dtype(dtype_name))
            cupy.cuda.get_current_stream().synchronize()
        return out
    if lib == "torch":
        torch = optional_module("torch")
        name = _TORCH_NAMES.get(dtype_name)
        dt = getattr(torch, name, None) if torch is not None and name else None
        if dt is None:
            return None
        dev = torch.device("cuda", index)
        out = torch.empty(tuple(shape), dtype=dt, device=dev)
        torch.cuda.current_stream(dev).synchronize()
        return out
    return None


def block_allocator(lib: str | None, device: str) -> Any:
    """A function n -> an uninitialized uint8 GPU array of n bytes from the pool of the library
    a result goes to (see empty_in_library), for loads whose arrays share one block; None where
    ferry allocates instead (host memory, managed memory, a library that is not importable)."""
    if not is_gpu(device) or device.startswith("managed"):
        return None
    if lib not in (None, "cupy", "torch") or optional_module(lib or "cupy") is None:
        return None
    return lambda n: empty_in_library(lib, device, [max(int(n), 1)], "uint8")


def as_ferry(obj: Any) -> _ferry.Array:
    """A ferry.Array viewing `obj`'s memory (no copy where it is contiguous)."""
    if isinstance(obj, _ferry.Array):
        return obj
    if isinstance(obj, np.ndarray) or not (
        hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")
    ):
        arr = np.asarray(obj)
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            arr = np.ascontiguousarray(arr)
        text, _ = dtype_text(arr.dtype)
        return _ferry.as_array(arr, text)
    return _ferry.as_array(obj)


def as_destination(obj: Any, what: str) -> _ferry.Array:
    """A ferry.Array viewing `obj`'s memory, which a read will write: read-only memory, memory
    that is not C-contiguous and objects without memory of their own (a list would be copied,
    and the copy written) are refused, naming `what` ("fromfile: out=", "into['w']"), before
    any byte moves. A read-only ferry.Array (a view of memory lent read-only) is refused too."""
    if isinstance(obj, _ferry.Array):
        if obj.readonly:
            raise UsageError("%s: the destination is read-only (a ferry.Array of memory lent read-only)" % what)
        return obj
    if isinstance(obj, np.ndarray) or not (
        hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")
    ):
        if isinstance(obj, np.ndarray):
            arr = obj
        else:
            try:
                arr = np.asarray(memoryview(obj))
            except TypeError:
                raise UsageError("%s: a %s has no memory to read into; pass an array (numpy, CuPy, "
                                 "PyTorch, JAX or ferry)" % (what, type(obj).__name__)) from None
        if not arr.flags.writeable:
            raise UsageError("%s: the destination is read-only" % what)
        if not arr.flags.c_contiguous:
            raise UsageError("%s: the destination must be C-contiguous" % what)
        return _ferry.as_array(arr, dtype_text(arr.dtype)[0], True)
    try:
        return _ferry.as_array(obj, None, True)
    except UsageError as e:  # read-only (DLPack flag, CUDA array interface) or strided memory
        raise UsageError("%s: %s" % (what, e)) from None


def text_key(path: str, what: str, key: Any) -> str:
    """`key` as a name in a file's header (a safetensors tensor name or metadata entry), which
    is UTF-8 JSON text: anything but a str is refused (``None`` would be saved as "None"), and
    so is a str holding bytes that are not UTF-8 (os.fsdecode's surrogates)."""
    if not isinstance(key, str):
        raise UsageError("%s: a %s must be a str, not %s (%r)" % (path, what, type(key).__name__, key))
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("%s: the %s %r is not UTF-8 text (safetensors headers are UTF-8 JSON)"
                         % (path, what, key)) from None
    return key


def fspath(file: Any) -> str | None:
    if isinstance(file, (str, bytes, os.PathLike)):
        return os.fsdecode(file)
    return None
