"""ferry.dcp: torch.distributed.checkpoint storage writers and readers whose bytes move through
ferry, drop-ins for torch's (docs/dcp.md).

>>> import torch.distributed.checkpoint as dcp, ferry.dcp              # doctest: +SKIP
>>> dcp.save(state_dict, storage_writer=ferry.dcp.FileSystemWriter("ckpt/step-100"))
>>> dcp.load(state_dict, storage_reader=ferry.dcp.FileSystemReader("ckpt/step-100"))

The files are DCP's own: what ferry writes loads with torch's readers and the other way round.
Importing this module imports torch (which ferry itself never requires).
"""

from ._hf import HuggingFaceStorageReader, HuggingFaceStorageWriter
from ._reader import FileSystemReader
from ._reads import DEFAULT_MEMORY_BUDGET
from ._writer import FileSystemWriter

__all__ = ["DEFAULT_MEMORY_BUDGET", "FileSystemReader", "FileSystemWriter",
           "HuggingFaceStorageReader", "HuggingFaceStorageWriter"]
