"""ferry.dcp.HuggingFaceStorageWriter / HuggingFaceStorageReader: torch's Hugging Face flavour of
DCP (sharded safetensors files and ``model.safetensors.index.json``) with ferry moving the bytes.

The writer saves each file with ferry's safetensors writer (straight from GPU or host memory,
atomically: a temporary file synced and renamed), with the metadata torch's writer puts in each
file (each tensor's ``saved_offsets``, the DCP version and format), so torch's reader, ferry's
reader, ``ferry.load_checkpoint``, safetensors and transformers all load the result. The reader
reads each item's bytes straight into its destination (ferry.dcp._reads) and checks them
against the CRC-32C checksums ferry's writer records in each file (docs/integrity.md).
"""

from __future__ import annotations

import json
import os

import torch
from torch.distributed.checkpoint import filesystem as _fs
from torch.distributed.checkpoint import hf_storage as _hf
from torch.distributed.checkpoint._hf_utils import (
    CUSTOM_METADATA_KEY,
    DCP_VERSION_KEY,
    FORMAT_KEY,
    FORMAT_VALUE,
    HF_DCP_VERSION,
    SAVED_OFFSETS_KEY,
    _gen_file_name,
    _metadata_fn,
)
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from .._api import info, save
from ._reads import DEFAULT_MEMORY_BUDGET, Files, ItemReader, Source, check_ranges
from ._checksums import Checker, check_mode, integrity_error, record_of_safetensors
from ._record import checkpoint_error
from ._writer import remove_commit_file


class HuggingFaceStorageWriter(_hf.HuggingFaceStorageWriter):
    """A drop-in for ``torch.distributed.checkpoint.HuggingFaceStorageWriter`` (the same
    arguments). Only tensors can be saved: a non-tensor value is refused, naming it, before
    anything is written (torch's writer puts its pickled bytes in front of the safetensors
    header, which no safetensors reader then opens). The old index is removed before the first
    file is written and the new one written last."""

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        plans = super().prepare_global_plan(plans)
        remove_commit_file(os.fspath(self.path), _metadata_fn, sync=True)
        return plans

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        """torch's files (the same names, the same tensors in each), written by ferry."""
        if not plan.items:
            fut: Future = Future()
            fut.set_result([])
            return fut
        storage = plan.storage_data or {}
        mapping = storage.get("fqn_to_index_mapping")
        buckets = self._split_by_storage_plan(mapping, plan.items)
        highest = max(mapping.values()) if mapping is not None else 1
        jobs = []
        for index, items in buckets.items():
            name = _gen_file_name(index, highest, storage.get("shard_index"))
            jobs.append((self.fs.concat_path(self.path, name), name, items))
        for _, _, items in jobs:
            for item in items:
                if item.type == WriteItemType.BYTE_IO:
                    raise ValueError("HuggingFaceStorageWriter: %r is not a tensor; safetensors "
                                     "files hold tensors only" % item.index.fqn)
        results: list = []
        done: list = []
        try:
            for path, file_name, items in jobs:
                results += self._write_file(planner, os.fspath(path), file_name, items)
                done.append(os.fspath(path))
        except BaseException:  # nothing of a failed save stays behind
            for path in done:
                if os.path.exists(path):
                    os.remove(path)
            raise
        done_fut: Future = Future()
        done_fut.set_result(results)
        return done_fut

    @staticmethod
    def _write_file(planner: SavePlanner, path: str, file_name: str, items: list) -> list:
        tensors, offsets, results = {}, {}, []
        for item in items:
            t = planner.resolve_data(item).detach()
            t = t if t.is_contiguous() else t.contiguous()
            fqn = item.index.fqn
            tensors[fqn] = t
            offsets[fqn] = {SAVED_OFFSETS_KEY: list(item.tensor_data.chunk.offsets)}
            nbytes = t.numel() * t.element_size()
            results.append(WriteResult(index=item.index, size_in_bytes=nbytes,
                                       storage_data=_fs._StorageInfo(file_name, 0, nbytes)))
        if any(t.is_cuda for t in tensors.values()):
            torch.cuda.synchronize()
        save(path, tensors, {CUSTOM_METADATA_KEY: json.dumps(offsets),
                             DCP_VERSION_KEY: str(HF_DCP_VERSION), FORMAT_KEY: FORMAT_VALUE},
             format="safetensors")
        return results


class HuggingFaceStorageReader(_hf.HuggingFaceStorageReader):
    """A drop-in for ``torch.distributed.checkpoint.HuggingFaceStorageReader``: each item's
    bytes are read by ferry straight into its destination, with at most ``memory_budget``
    bytes of staging buffers (see ferry.dcp.FileSystemReader). ``verify`` as for
    ferry.dcp.FileSystemReader, against the checksums each file records."""

    def __init__(self, path: str, thread_count: int = 1, *,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET, verify: str = "auto") -> None:
        super().__init__(path, thread_count=thread_count)
        self.memory_budget = int(memory_budget)
        self.verify = check_mode(verify)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        files = Files()
        begins: dict = {}
        crcs: dict = {}
        reader = ItemReader(planner, files, self.memory_budget,
                            Checker(crcs, files) if self.verify != "never" else None)
        try:
            sources = []
            for req in plan.items:
                sinfo = self.storage_data[req.storage_index]
                path = os.fspath(sinfo.relative_path)
                if path not in begins:
                    described = info(path)
                    begins[path] = {a["name"]: (a["begin"], a["end"]) for a in described["arrays"]}
                    recorded = record_of_safetensors(path, described.get("metadata"), described["arrays"])
                    if recorded is None and self.verify == "always":
                        raise integrity_error(path, "", "verify='always' and no checksums recorded")
                    crcs.update(recorded or {(path, b): None for b, _ in begins[path].values()})
                fqn = req.storage_index.fqn
                if fqn not in begins[path]:
                    raise checkpoint_error(path, fqn, "the file has no such tensor")
                begin, end = begins[path][fqn]
                layout = torch.empty(tuple(sinfo.shape), dtype=sinfo.dtype, device="meta")
                sources.append(Source(path, begin, layout, fqn))
            check_ranges([(s.path, s.base, s.layout.numel() * s.layout.element_size(), s.name)
                          for s in sources])
            for req, src in zip(plan.items, sources):
                reader.add(req, src)
            reader.flush()
        finally:
            reader.close()
            files.close()
        fut: Future = Future()
        fut.set_result(None)
        return fut
