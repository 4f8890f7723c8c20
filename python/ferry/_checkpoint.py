"""Checkpoints: many safetensors shards (the Hugging Face layout) loaded in one plan, only the
slices a rank needs, straight into existing tensors, under a process-wide memory budget; and
saved in the same layout. See docs/checkpoints.md.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import _ferry
from ._convert import (
    as_destination,
    as_ferry,
    block_allocator,
    dtype_text,
    fspath,
    import_ahead,
    is_gpu,
    library_converter,
    host_to_numpy,
    numpy_view_dtype,
    optional_module,
    torch_bulk,
    torch_view_dtype,
    target,
    text_key,
    wraps_without_reading,
)
from ._errors import UsageError

_GLOB_CHARS = re.compile(r"[*?\[]")
Sequence.register(_ferry.CheckpointPlan)  # stats["plan"]: a sequence of dicts, made when read


class Split(NamedTuple):
    """The rule "split dimension ``dim`` into ``parts`` equal parts, take part ``part``"
    (part k holds rows [k*n//parts, (k+1)*n//parts))."""

    dim: int
    parts: int
    part: int


def split(dim: int, parts: int, part: int) -> Split:
    """The slice rule "split dimension ``dim`` into ``parts`` parts, take part ``part``", for
    ``slices=`` of :func:`load_checkpoint`. Part ``k`` of ``n`` rows holds rows
    ``[k*n//parts, (k+1)*n//parts)``: when ``parts`` does not divide ``n`` the larger parts come
    last (100 rows in 3 parts: 33, 33, 34), where ``torch.tensor_split`` puts them first (34,
    33, 33). ``dim`` may be negative (-1: the last dimension)."""
    return Split(dim, parts, part)


def tensor_parallel(rank: int, world: int, *, column: Sequence[str] = (),
                    row: Sequence[str] = ()) -> dict:
    """Slices for one tensor-parallel rank, Megatron style: tensors matching a ``column`` glob
    (q/k/v, gate/up projections, embeddings; weights stored (out, in)) are split along dim 0,
    those matching a ``row`` glob (o/down projections) along dim 1. Pass the result as
    ``slices=``; unmatched tensors (norms, biases of row layers) load whole."""
    if not 0 <= rank < world:
        raise UsageError("tensor_parallel: rank %d outside 0..%d" % (rank, world - 1))
    rules: dict = {}
    for pattern in column:
        rules[pattern] = Split(0, world, rank)
    for pattern in row:
        rules[pattern] = Split(-1, world, rank)
    return rules


class LoadResult(NamedTuple):
    """What a load into existing tensors did (like torch's load_state_dict result)."""

    missing_keys: list
    unexpected_keys: list
    stats: dict


class CheckpointTensors(dict):
    """name -> array, sorted by name; ``stats`` says what the load read and how."""

    stats: dict


def _sources(src: Any) -> list:
    p = fspath(src)
    if p is not None:
        return [p]
    if isinstance(src, Sequence) and not isinstance(src, (str, bytes)):
        out = [fspath(s) for s in src]
        if out and all(s is not None for s in out):
            return out
    raise UsageError("a checkpoint is a folder, an index file, a glob, a file, or a list of files")


def info_checkpoint(src: Any) -> dict:
    """Shards, tensors and metadata of a checkpoint, from its headers alone."""
    d = _ferry.checkpoint_info(_sources(src))
    d["tensors"] = [
        {"name": n, "dtype": t, "shape": s, "shard": k, "offset": o, "bytes": b}
        for n, t, s, k, o, b in d["tensors"]
    ]
    return d


def _selection(src: list, tensors: Any) -> tuple[str, list]:
    if tensors is None:
        return "all", []
    if isinstance(tensors, re.Pattern):
        return "regex", [tensors.pattern]
    if callable(tensors):
        names = [t[0] for t in _ferry.checkpoint_info(src)["tensors"]]
        return "names", [n for n in names if tensors(n)]
    if isinstance(tensors, str):
        return ("glob" if _GLOB_CHARS.search(tensors) else "names"), [tensors]
    items = list(tensors)
    if any(isinstance(t, re.Pattern) for t in items):
        return "regex", [t.pattern if isinstance(t, re.Pattern) else re.escape(t) for t in items]
    if any(_GLOB_CHARS.search(t) for t in items):
        return "glob", items
    return "names", items


def _slices(slices: Any) -> list:
    if not slices:
        return []
    if not isinstance(slices, Mapping):
        raise UsageError("slices= takes {name or glob: (dim, start, stop) or ferry.split(...)}")
    out = []
    for key, s in slices.items():
        if isinstance(s, Split):
            out.append((str(key), int(s.dim), 0, 0, int(s.parts), int(s.part)))
        elif isinstance(s, slice):
            raise UsageError("slices[%r]: give (dim, start, stop), not a slice object" % key)
        else:
            dim, start, stop = s
            out.append((str(key), int(dim), int(start), int(stop), 0, 0))
    return out


def _is_module(obj: Any) -> bool:
    return not isinstance(obj, Mapping) and callable(getattr(obj, "state_dict", None))


def _targets(into: Any) -> dict:
    """The destinations of ``into=``: a dict's items, or a module's ``state_dict`` names and
    tensors."""
    if not _is_module(into):
        return dict(into)
    found = _plain_state(into)
    return dict(into.state_dict()) if found is None else found


def _plain_state(module: Any) -> dict | None:
    """What ``state_dict()`` gives a ``torch.nn.Module`` none of whose modules changes it
    (no override of ``state_dict``, ``_save_to_state_dict`` or ``get_extra_state``, no
    state-dict hooks), in its order, without its Python work per module (3-5 ms for a model of
    800 parameters on the CPU machine); ``None`` for any other module. The tensors are not
    detached: they are only written into, as ``load_state_dict`` does under ``no_grad``."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(module, torch.nn.Module):
        return None
    base = torch.nn.Module
    plain: dict = {}
    out: dict = {}

    def walk(m: Any, prefix: str) -> bool:
        cls = type(m)
        ok = plain.get(cls)
        if ok is None:
            ok = plain[cls] = (cls.state_dict is base.state_dict
                               and cls._save_to_state_dict is base._save_to_state_dict
                               and cls.get_extra_state is base.get_extra_state)
        if not ok or m._state_dict_hooks or m._state_dict_pre_hooks:
            return False
        for name, p in m._parameters.items():
            if p is not None:
                out[prefix + name] = p
        skip = m._non_persistent_buffers_set
        for name, b in m._buffers.items():
            if b is not None and name not in skip:
                out[prefix + name] = b
        for name, child in m._modules.items():
            if child is not None and not walk(child, prefix + name + "."):
                return False
        return True

    return out if walk(module, "") else None


def _check_destination(name: str, value: Any) -> None:
    is_contiguous = getattr(value, "is_contiguous", None)
    if callable(is_contiguous) and not is_contiguous():
        raise UsageError("into[%r]: the destination must be contiguous" % name)


def _destination(name: str, value: Any) -> Any:
    _check_destination(name, value)
    return as_destination(value, "into[%r]" % name)


def _destinations(targets: Mapping[str, Any], grad_ok: bool = False) -> list:
    """_destination for every value, arrays of other libraries imported in one call: each
    import alone would wait for its producer's stream (a synchronous round trip to the GPU,
    hundreds of them for a model), where one wait covers them all. ``grad_ok``: tensors that
    require grad are taken (a module's parameters, written as ``load_state_dict`` does)."""
    torch = sys.modules.get("torch")
    plain = (torch.Tensor, torch.nn.Parameter) if torch is not None else ()
    out: list = []
    foreign: list[int] = []
    all_torch_gpu = True
    nd = np.ndarray
    plain_numpy: dict = {}  # dtype -> whether the binding reads it from the buffer as itself
    for name, value in targets.items():
        if type(value) is nd:
            # numpy's own arrays that as_destination would take as they are: imported with
            # the others in one call (as_destination cost 4 us each, most of a load of
            # 100,000 small tensors into existing arrays on the CPU machine).
            dt = value.dtype
            ok = plain_numpy.get(dt)
            if ok is None:
                ok = plain_numpy[dt] = _plain_dtype(dt)
            flags = value.flags
            if ok and flags.c_contiguous and flags.writeable:
                all_torch_gpu = False
                foreign.append(len(out))
                out.append(value)
                continue
        if type(value) in plain:
            # PyTorch's own tensors, checked with its C methods only (a model has hundreds).
            if not value.is_contiguous():
                raise UsageError("into[%r]: the destination must be contiguous" % name)
            all_torch_gpu = all_torch_gpu and value.is_cuda
            foreign.append(len(out))
            out.append(value)
            continue
        _check_destination(name, value)
        if isinstance(value, (_ferry.Array, np.ndarray)) or not (
            hasattr(value, "__dlpack__") or hasattr(value, "__cuda_array_interface__")
        ):
            out.append(as_destination(value, "into[%r]" % name))
        else:
            all_torch_gpu = all_torch_gpu and _is_torch_gpu(value)
            foreign.append(len(out))
            out.append(value)
    objs = [out[i] for i in foreign]
    # PyTorch GPU tensors: one wait for each device's work, then exports that ask for no
    # stream work; torch's __dlpack__ otherwise builds stream objects for every tensor, which
    # cost a model of hundreds of parameters tens of milliseconds.
    synced = bool(objs) and all_torch_gpu
    if synced:
        for d in sorted({v.get_device() for v in objs}):
            torch.cuda.synchronize(d)
    # PyTorch tensors with nothing to wait for (the GPU synchronized above, or host memory) go
    # as DLPack capsules from torch's C exporter: through its Python __dlpack__ and
    # __dlpack_device__ ferry's import of 819 host tensors took 4.5 ms on the CPU machine,
    # against 0.4 ms (bench/probes/into_import_probe.py). Tensors that need grad (unless grad_ok), or
    # carry conjugate or negative bits, keep __dlpack__, which refuses them with torch's own
    # words.
    if torch is not None and objs:
        from torch.utils.dlpack import to_dlpack

        tensor = torch.Tensor
        objs = [to_dlpack(v) if isinstance(v, tensor) and not ((v.requires_grad and not grad_ok) or v.is_conj()
                                                             or v.is_neg())
                and (synced or not v.is_cuda) else v for v in objs]
    for i, a in zip(foreign, _ferry.as_arrays(objs, True, synced)):
        out[i] = a
    return out


def _is_torch_gpu(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and getattr(value, "is_cuda", False) is True


class _Bar:
    """A one-line progress bar on a terminal's stderr."""

    def __init__(self) -> None:
        self.last = -1

    def __call__(self, done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if pct == self.last:
            return
        self.last = pct
        width = 30
        fill = width * pct // 100
        sys.stderr.write("\rferry: loading [%s%s] %3d%% of %.2f GB" %
                         ("#" * fill, "." * (width - fill), pct, total / 1e9))
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _progress(progress: Any, total_hint: int) -> Any:
    if progress is None:
        return _Bar() if sys.stderr.isatty() and total_hint >= (1 << 30) else None
    if progress is True:
        return _Bar()
    if progress is False:
        return None
    if callable(progress):
        return progress
    raise UsageError("progress= is True, False, None (a bar on long loads in a terminal) or a callable")


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cycle collector held off while a load makes its result: 100,000 tensors are as many
    new tracked objects, and the collector's young generations ran over them again and again
    (0.4 of a 1.5 s load on the CPU machine). Nothing a load makes holds a cycle."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_checkpoint(src: Any, *, device: Any = None, like: Any = None, tensors: Any = None,
                    slices: Any = None, into: Any = None, strict: bool = True, dtype: Any = None,
                    progress: Any = None, route: str = "auto", verify: str = "auto"):
    """A checkpoint loaded by this process alone: ferry.load_checkpoint without a group (see its
    docstring in ferry._api)."""
    srcs = _sources(src)
    kind, patterns = _selection(srcs, tensors)
    sl = _slices(slices)
    as_type = None if dtype is None else dtype_text(dtype)[0]
    if into is None:
        dev, lib = target(device, like)
        total = _ferry.checkpoint_info(srcs)["bytes"] if progress is None and sys.stderr.isatty() else 0
        cb = _progress(progress, total)
        # The tensors' shared block comes from the library's own pool, as ferry.fromfile's
        # arrays do: memory it mapped before takes the copies at the full rate.
        # Wrapping the tensors for the library only needs their places, so it runs while the
        # reads do (where the library's import never reads the bytes).
        convert = library_converter(lib, dev)
        early = wraps_without_reading(lib)
        # Into host memory for numpy, the tensors come back as numpy views of their block,
        # made in C++ in one loop, without an Array object each.
        views = numpy_view_dtype if lib in (None, "numpy") and not is_gpu(dev) else None
        # For PyTorch, as views of one tensor over the block, runs of one shape made at once.
        bulk = None
        if lib == "torch" and not dev.startswith("managed") and optional_module("torch") is not None:
            views, bulk = torch_view_dtype, torch_bulk(dev)
        with _collector_paused():
            arrays, stats = _ferry.load_checkpoint(srcs, dev, kind, patterns, sl, as_type, [], False,
                                                   False, route, cb, block_allocator(lib, dev),
                                                   host_to_numpy if views is not None and bulk is None else
                                                   convert if early and views is None else None,
                                                   import_ahead(lib, dev), views, bulk, verify=verify,
                                                   result=CheckpointTensors)
            if views is not None:
                out = arrays  # made by the library as CheckpointTensors, by name
            else:
                out = CheckpointTensors(arrays if early else ((name, convert(a)) for name, a in arrays))
        out.stats = stats
        return out

    targets = _targets(into)
    pairs = list(zip(map(str, targets), _destinations(targets, grad_ok=_is_module(into))))
    dev = device
    if dev is None:
        dev = pairs[0][1].device if pairs else "cpu"
    dev, _lib = target(dev, None)
    total = _ferry.checkpoint_info(srcs)["bytes"] if progress is None and sys.stderr.isatty() else 0
    cb = _progress(progress, total)
    # The names are matched in C++ (missing and unexpected keys, strict checked before any
    # byte moves), so the checkpoint's headers are read once.
    _arrays, stats = _ferry.load_checkpoint(srcs, dev, kind, patterns, sl, as_type, pairs, True,
                                            bool(strict), route, cb, verify=verify)
    missing = sorted(stats["missing_keys"])
    unexpected = sorted(stats["unexpected_keys"])
    return LoadResult(missing, unexpected, stats)


def _parse_size(size: Any) -> int:
    if isinstance(size, int):
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*", str(size), re.IGNORECASE)
    if not m:
        raise UsageError("max_shard_size: %r is not a size like 5GB, 500MiB or 1000000" % (size,))
    base = 1024 if m.group(3) else 1000
    power = " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * base ** power)


def save_checkpoint(folder: Any, tensors: Any, max_shard_size: Any = "5GB",
                    metadata: Mapping[str, str] | None = None, *, checksums: bool = True) -> list:
    """Writes ``tensors`` (a dict name -> array/tensor, or a module's state_dict) as a Hugging
    Face checkpoint in ``folder`` (or under an ``s3://bucket/prefix/``): model.safetensors, or
    shards of at most ``max_shard_size`` (an int or "5GB", "500MiB") plus
    model.safetensors.index.json. Every file is atomic (an S3 object is one multipart upload,
    whole or not at all). One save is one generation: its id (``ferry.generation``) goes into
    every shard's metadata and the index's, new shards are written beside the old ones (under
    other names where a name is taken), the index is replaced last by a rename, and only then
    are the old shards removed; a save that fails removes what it wrote and leaves the previous
    generation loadable. Every shard records CRC-32C checksums of its tensors unless
    ``checksums=False`` (see :func:`ferry.save`). Returns the paths written."""
    p = fspath(folder)
    if p is None:
        raise UsageError("save_checkpoint takes a folder path")
    if _is_module(tensors):
        tensors = tensors.state_dict()
    if not isinstance(tensors, Mapping):
        raise UsageError("save_checkpoint takes a dict name -> array (or a module)")
    items = _plain_items(tensors)
    if items is None:
        items = ([text_key(p, "tensor name", k) for k in tensors], [as_ferry(v) for v in tensors.values()])
    return _ferry.save_checkpoint(os.fspath(p), *items, _parse_size(max_shard_size),
                                  {str(k): str(v) for k, v in (metadata or {}).items()}, bool(checksums))


# numpy element kinds whose buffer format ferry reads as the same dtype (bool, integers, floats).
_PLAIN_KINDS = frozenset("biuf")


def _plain_dtype(dt: np.dtype) -> bool:
    """Whether the binding imports a numpy array of `dt` through the buffer protocol as the same
    dtype (native or little-endian bool, integers, float16/32/64; no structure), as as_ferry
    and as_destination would name it."""
    return (dt.kind in _PLAIN_KINDS and dt.byteorder != ">" and dt.itemsize <= 8 and dt.fields is None
            and dt.subdtype is None)


def _plain_items(tensors: Mapping) -> tuple | None:
    """(names, arrays) when all names are str of UTF-8 text and all values C-contiguous numpy
    arrays of plain dtypes: the binding imports those itself, without as_ferry's Python work
    per array (most of the save of 100,000 small tensors on the CPU machine). None otherwise:
    the caller then goes item by item (as_ferry copies a strided array, names a bad key)."""
    names = list(tensors)
    values = list(tensors.values())
    nd = np.ndarray
    if not all(type(k) is str for k in names) or not all(type(v) is nd and v.flags.c_contiguous for v in values):
        return None
    try:
        "".join(names).encode("utf-8")
    except UnicodeEncodeError:
        return None
    if not all(_plain_dtype(d) for d in {v.dtype for v in values}):
        return None
    return names, values


def set_checkpoint_memory_budget(nbytes: Any) -> None:
    """Sets the process-wide cap on temporary memory of checkpoint loads (default 1 GiB)."""
    _ferry.set_checkpoint_memory_budget(_parse_size(nbytes))


def checkpoint_memory_budget() -> int:
    return _ferry.checkpoint_memory_budget()


__all__ = ["CheckpointTensors", "LoadResult", "Split", "checkpoint_memory_budget", "info_checkpoint",
           "load_checkpoint", "save_checkpoint", "set_checkpoint_memory_budget", "split",
           "tensor_parallel"]
