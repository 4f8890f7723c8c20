"""ferry: move arrays between files and GPU memory, fast.

Reads go straight into GPU memory (GPUDirect Storage where it works, else pipelined pinned
staging buffers) and .npy / safetensors files are deserialized on the GPU. Host reads are
parallel preads. numpy is the only dependency: GPU arrays travel through DLPack and the CUDA
array interface, so CuPy, PyTorch and JAX share ferry's memory without a copy.

>>> import ferry
>>> x = ferry.fromfile("data.bin", dtype="float32", device="cuda")        # doctest: +SKIP
>>> w = ferry.load("model.safetensors", device="cuda", like="torch")      # doctest: +SKIP
>>> with ferry.File("out.bin", "w") as f:                                 # doctest: +SKIP
...     f.pwrite(x).result()

Which array type a call returns (see docs/python.md):
host memory -> numpy.ndarray; GPU memory -> like's library when like= is given, else CuPy
when importable, else ferry.Array (DLPack-exportable).
"""

from . import _ferry
from ._checkpoint import (
    CheckpointTensors,
    LoadResult,
    Split,
    checkpoint_memory_budget,
    info_checkpoint,
    save_checkpoint,
    set_checkpoint_memory_budget,
    split,
    tensor_parallel,
)
from ._distributed import GroupLoadError, GroupTimeoutError
from ._group_plan import Layout
from ._api import (doctor, fromfile, info, load, load_checkpoint, reset_stats, save, stats, tofile,
                   verify)
from ._many import LoadFailure, iter_load, load_many
from ._errors import (
    CheckpointError,
    CheckpointIOError,
    CheckpointChangedError,
    ChunkError,
    CudaError,
    RemoteError,
    CuFileError,
    EndOfFileError,
    Error,
    FileError,
    FormatError,
    IntegrityError,
    SettingsError,
    UsageError,
)
from ._settings import Settings, settings

Array = _ferry.Array
File = _ferry.File
Future = _ferry.Future
RegisteredFile = _ferry.RegisteredFile


def register_file(path) -> RegisteredFile:
    """Keeps a local file registered with CUDA, for a file loaded into GPU memory again and
    again (a server switching between models); returns a :class:`RegisteredFile`, a context
    manager.

    The file is mapped read-only and its page-cache pages are pinned once. While the
    registration lives, every read of the file into GPU memory by this process (``fromfile``,
    ``load``, ``load_checkpoint``; ``File.read`` into memory that names no stream) is one DMA
    from those pages, without the staging copy: at the host-to-device copy rate. A read ordered
    on a stream (``File.read`` into an array whose producer names one) still takes the lanes.
    The pages stay locked in memory meanwhile, counted against :func:`registration_limit`
    (half the machine's memory unless :func:`set_registration_limit` says otherwise). A read
    after the file changed (size or modification time) takes its usual route, and
    ``ferry.doctor``/the plan's reasons say so.

    >>> with ferry.register_file("weights.bin"):                        # doctest: +SKIP
    ...     for _ in range(3):
    ...         w = ferry.fromfile("weights.bin", dtype="float32", device="cuda")
    """
    return _ferry.RegisteredFile(path)


def set_registration_limit(nbytes) -> None:
    """Caps the bytes all registrations of the process hold (0: the default, half the
    machine's memory)."""
    _ferry.set_registration_limit(int(nbytes))


def registration_limit() -> int:
    """The cap on registered bytes (see :func:`register_file`)."""
    return _ferry.registration_limit()


def registered_bytes() -> int:
    """The bytes registered now (see :func:`register_file`)."""
    return _ferry.registered_bytes()


def read_batch(pieces) -> Future:
    """Reads many pieces as one batch and returns a :class:`Future` of the bytes read.

    Each piece is ``(file, offset, buffer)``: an open :class:`File`, the file offset, and the
    memory the buffer's size in bytes lands in (numpy, CuPy, PyTorch, JAX or ferry arrays). All
    buffers are host memory, or GPU memory of one device. Into GPU memory the pieces of every
    file share ferry's stream lanes, so a thousand chunks of a few MiB move about as fast as
    one large read; ``ferry.zarr`` reads a zarr array's chunks this way. The files stay open
    until the future is done (closing one waits for it).

    >>> import numpy as np, ferry                                       # doctest: +SKIP
    >>> a, b = np.empty(4096, np.uint8), np.empty(4096, np.uint8)
    >>> with ferry.File("x.bin") as f, ferry.File("y.bin") as g:
    ...     ferry.read_batch([(f, 0, a), (g, 8192, b)]).result()
    8192
    """
    return _ferry.read_batch(list(pieces))


__version__: str = _ferry.version()


def cuda_device_count() -> int:
    """The number of usable CUDA devices (0 without a GPU or driver)."""
    return _ferry.cuda_device_count()


def cuda_unavailable_reason() -> str:
    """Why CUDA is unusable here, or '' when it is usable."""
    return _ferry.cuda_unavailable_reason()


from . import numpy  # noqa: E402  (ferry.numpy: numpy's signatures)

__all__ = [
    "Array",
    "CheckpointError",
    "CheckpointIOError",
    "CheckpointChangedError",
    "CheckpointTensors",
    "ChunkError",
    "GroupLoadError",
    "GroupTimeoutError",
    "Layout",
    "LoadFailure",
    "LoadResult",
    "Split",
    "checkpoint_memory_budget",
    "info_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
    "set_checkpoint_memory_budget",
    "split",
    "tensor_parallel",
    "CudaError",
    "RemoteError",
    "CuFileError",
    "EndOfFileError",
    "Error",
    "File",
    "FileError",
    "FormatError",
    "Future",
    "IntegrityError",
    "Settings",
    "SettingsError",
    "UsageError",
    "cuda_device_count",
    "cuda_unavailable_reason",
    "doctor",
    "fromfile",
    "info",
    "iter_load",
    "load",
    "load_many",
    "read_batch",
    "register_file",
    "RegisteredFile",
    "registered_bytes",
    "registration_limit",
    "set_registration_limit",
    "reset_stats",
    "save",
    "settings",
    "stats",
    "tofile",
    "verify",
]
