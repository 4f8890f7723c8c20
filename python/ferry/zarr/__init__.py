"""ferry.zarr: Zarr v3 arrays read into GPU memory and decoded there.

Two pieces, usable together or apart (zarr-python 3 is needed; ``import ferry`` never imports
it):

- :class:`Store`: a zarr store over a local directory whose reads and writes go through ferry.
  Chunk bytes land in the memory zarr asks for (GPU memory under ``zarr.config.enable_gpu()``),
  byte ranges and suffixes are honoured, and the requests of one read run as one parallel plan.
- :class:`CodecPipeline`: zarr's codec pipeline with every chunk of a read fetched in one plan
  and decoded on the device: ``bytes`` (byte order), ``transpose``, ``crc32c``, ``zstd`` and
  ``gzip`` (nvCOMP, loaded at run time; without it the host decodes, said once and counted),
  and ``sharding_indexed`` (shard indexes in one plan, inner chunks in one more).

>>> import zarr, ferry.zarr                                          # doctest: +SKIP
>>> ferry.zarr.enable()                                              # doctest: +SKIP
>>> with zarr.config.enable_gpu():                                   # doctest: +SKIP
...     z = zarr.open_array(store=ferry.zarr.Store("data.zarr"), mode="r")
...     x = z[:1024]                                                 # a CuPy array

See docs/zarr.md.
"""

from __future__ import annotations

from typing import Any

from zarr.registry import register_pipeline

from ._kernels import nvcomp_unavailable_reason
from ._kernels import reset_stats as _reset_stats
from ._kernels import stats as _stats
from ._pipeline import CodecPipeline
from ._store import Store, guard_gpu_buffers

__all__ = ["CodecPipeline", "Store", "enable", "nvcomp_unavailable_reason", "reset_stats", "stats"]

CodecPipeline.__module__ = __name__
Store.__module__ = __name__
PIPELINE_PATH = "ferry.zarr.CodecPipeline"
register_pipeline(CodecPipeline)
# An array opened outside zarr.config.enable_gpu() and read inside it: without CuPy, zarr's own
# allocation of the result would fail with an AttributeError before ferry hears of the read.
guard_gpu_buffers()


def enable() -> Any:
    """Selects ferry's codec pipeline in zarr's configuration (process-wide). Returns zarr's
    config-set object, so ``with ferry.zarr.enable(): ...`` restores the previous pipeline
    afterwards."""
    import zarr

    return zarr.config.set({"codec_pipeline.path": PIPELINE_PATH})


def stats() -> dict[str, Any]:
    """What ferry's Zarr store and pipeline did in this process: ``plans`` (batched reads),
    ``requests`` and ``bytes_read``, chunks decoded on the GPU (``chunks_gpu``) and on the host
    (``chunks_cpu``), chunks encoded (``encoded_gpu``, ``encoded_cpu``), ``shard_indexes``
    read, and ``cpu_fallbacks``: reason -> chunks read for the GPU but decoded on the host."""
    return _stats()


def reset_stats() -> None:
    """Zeroes the counters of stats()."""
    _reset_stats()
