"""Checksums of DCP checkpoints: the CRC-32C of every 64 MiB chunk of every tensor's bytes,
recorded when ferry's writers save and checked by ferry's readers where the bytes land.

- ``FileSystemWriter`` computes them while its writes run (on the GPU for GPU tensors, on the
  host's cores otherwise) and records them in a manifest beside ``.metadata``,
  ``.ferry-checksums.json``, written after it. The manifest names the CRC-32C of the
  ``.metadata`` it describes, so a later save by another writer (torch's, which leaves the
  manifest behind) makes it stale instead of wrong: a stale manifest is not used.
- ``HuggingFaceStorageWriter`` saves with ferry's safetensors writer, which records them in
  each file's metadata (docs/integrity.md).
- The readers check each tensor whose bytes they read whole on the bytes where they landed
  (one launch per device for GPU destinations), and a part of a tensor (a reshard) by reading
  the chunks it covers again. A mismatch raises ``ferry.IntegrityError`` before the items of
  the failed round are committed.

Manifest: ``{"v": 1, "alg": "crc32c", "chunk": 67108864, "metadata": "8 hex digits",
"files": {"__0_0.distcp": [[begin, length, "tensor", "8 hex digits per chunk"], ...]}}``, each
entry the absolute byte range of one tensor's storage in its file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint import filesystem as _fs

from .. import _ferry
from .._errors import IntegrityError, UsageError

CHUNK = 64 << 20
_METADATA = ".metadata"
_SUFFIX = ".ferry-checksums.json"
VERIFY_MODES = ("auto", "always", "never")


def manifest_name(metadata_name: str) -> str:
    """``.metadata`` -> ``.ferry-checksums.json``; ``__3.metadata`` -> ``__3.ferry-checksums.json``."""
    return metadata_name[:-len(_METADATA)] + _SUFFIX if metadata_name.endswith(_METADATA) else metadata_name + _SUFFIX


def check_mode(verify: str) -> str:
    if verify not in VERIFY_MODES:
        raise UsageError("verify=%r: expected 'auto', 'always' or 'never'" % (verify,))
    return verify


def hex_of(crcs: list) -> str:
    return "".join("%08x" % c for c in crcs)


def crcs_of(text: str, where: str) -> list:
    if len(text) % 8 or any(c not in "0123456789abcdef" for c in text):
        raise integrity_error(where, "", "the checksum manifest does not parse (%r is not 8 lowercase "
                              "hex digits per chunk)" % text[:24])
    return [int(text[i:i + 8], 16) for i in range(0, len(text), 8)]


def crc_of_bytes(data: bytes) -> int:
    got = _ferry.crc32c_chunks([np.frombuffer(data, dtype=np.uint8)], max(1, len(data)))[0]
    return got[0] if got else 0


def integrity_error(filename: str, tensor: str, reason: str, begin: int = 0, end: int = 0,
                    expected: str = "", actual: str = "") -> IntegrityError:
    detail = "%s%s" % (("tensor %r: " % tensor) if tensor else "", reason)
    if expected:
        detail += " (bytes [%d, %d): recorded %s, read %s)" % (begin, end, expected, actual)
    e = IntegrityError("%s: %s" % (filename, detail))
    e.filename, e.tensor, e.reason = filename, tensor, reason
    e.begin, e.end, e.expected, e.actual = begin, end, expected, actual
    return e


@dataclass
class CheckedStorageInfo(_fs._StorageInfo):
    """A write result's storage info with the CRC-32C of each chunk of the tensor's storage
    (``storage``: its absolute begin in the file, its length, the name and the hex digits).
    Only ranks and the coordinator see it: ``.metadata`` gets the plain ``_StorageInfo``."""

    storage: tuple | None = None

    def plain(self) -> _fs._StorageInfo:
        return _fs._StorageInfo(self.relative_path, self.offset, self.length, self.transform_descriptors)


def strip_and_collect(results: list) -> tuple[list, dict]:
    """The write results with plain storage infos, and the manifest's ``files``."""
    files: dict = {}
    plain = []
    for wr_list in results:
        out = []
        for wr in wr_list:
            sd = wr.storage_data
            if isinstance(sd, CheckedStorageInfo):
                if sd.storage is not None:
                    files.setdefault(sd.relative_path, []).append(list(sd.storage))
                wr = type(wr)(index=wr.index, size_in_bytes=wr.size_in_bytes, storage_data=sd.plain())
            out.append(wr)
        plain.append(out)
    for entries in files.values():
        entries.sort()
    return plain, files


def write_manifest(folder: str, metadata_name: str, files: dict, sync: bool) -> None:
    """The manifest of the ``.metadata`` just written, written atomically after it."""
    with open(os.path.join(folder, metadata_name), "rb") as f:
        meta_crc = crc_of_bytes(f.read())
    text = json.dumps({"v": 1, "alg": "crc32c", "chunk": CHUNK, "metadata": "%08x" % meta_crc,
                       "files": files}, separators=(",", ":"))
    path = os.path.join(folder, manifest_name(metadata_name))
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read_manifest(folder: str, metadata_name: str) -> tuple[dict | None, str]:
    """The checksums the manifest of ``metadata_name`` records, by (absolute path, begin):
    (length, tensor, [crc per chunk]); or None and why there are none."""
    path = os.path.join(folder, manifest_name(metadata_name))
    if not os.path.exists(path):
        return None, "no checksum manifest (%s)" % os.path.basename(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        j = json.loads(raw)
        ok = (isinstance(j, dict) and j.get("v") == 1 and j.get("alg") == "crc32c"
              and j.get("chunk") == CHUNK and isinstance(j.get("files"), dict)
              and isinstance(j.get("metadata"), str))
    except ValueError:
        ok = False
    if not ok:
        raise integrity_error(path, "", "not a version 1 crc32c manifest of 64 MiB chunks")
    with open(os.path.join(folder, metadata_name), "rb") as f:
        if "%08x" % crc_of_bytes(f.read()) != j["metadata"]:
            return None, ("the checksum manifest %s describes another save (%s changed after it "
                          "was written)" % (os.path.basename(path), metadata_name))
    out: dict = {}
    for rel, entries in j["files"].items():
        for e in entries:
            if not (isinstance(e, list) and len(e) == 4 and isinstance(e[0], int) and isinstance(e[1], int)
                    and isinstance(e[2], str) and isinstance(e[3], str)):
                raise integrity_error(path, "", "an entry of %r is not [begin, length, tensor, crcs]" % rel)
            crcs = crcs_of(e[3], path)
            if len(crcs) != (e[1] + CHUNK - 1) // CHUNK:
                raise integrity_error(path, e[2], "%d checksums for %d bytes" % (len(crcs), e[1]))
            out[(os.path.join(folder, rel), e[0])] = (e[1], e[2], crcs)
    return out, ""


def record_of_safetensors(path: str, metadata: dict, arrays: list) -> dict | None:
    """The checksums a ferry-written safetensors file records, by (path, begin), or None."""
    text = (metadata or {}).get("ferry.checksums")
    if not text:
        return None
    try:
        rec = json.loads(text)
        ok = rec.get("v") == 1 and rec.get("alg") == "crc32c" and isinstance(rec.get("tensors"), dict)
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise integrity_error(path, "", "its checksum record does not parse")
    chunk = int(rec.get("chunk", CHUNK))
    out = {}
    for a in arrays:
        hexes = rec["tensors"].get(a["name"])
        if hexes is not None:
            out[(path, a["begin"])] = (a["end"] - a["begin"], a["name"], crcs_of(hexes, path), chunk)
    return out


class Checker:
    """Checks the bytes of a load against recorded checksums (``crcs``: (path, begin) ->
    (length, tensor, [crc per chunk]) or with a fourth element, the chunk size; None for a
    tensor of a file that records none).

    ``whole`` queues a buffer holding a tensor's whole storage; ``part`` a byte range of it,
    whose covered chunks ``run`` reads again. ``run`` hashes what was queued (host buffers on
    the host's cores, GPU buffers in one launch per device) and raises IntegrityError for the
    first mismatch, counting the others."""

    def __init__(self, crcs: dict, files: Any) -> None:
        self.crcs, self.files = crcs, files
        self.whole_q: list = []   # (key, buffer)
        self.part_q: dict = {}    # (key, chunk index) -> None
        self.checked: set = set()  # (key, chunk index) already checked in this load
        self.bytes = 0

    def _entry(self, path: str, begin: int, length: int, name: str) -> tuple | None:
        if (path, begin) in self.crcs and self.crcs[(path, begin)] is None:
            return None  # a file that records no checksums, read under verify="auto"
        e = self.crcs.get((path, begin))
        if e is None:
            if length:
                raise integrity_error(path, name, "no checksum recorded for this tensor (bytes [%d, %d))"
                                      % (begin, begin + length), begin, begin + length)
            return None
        if e[0] != length:
            raise integrity_error(path, name, "the checksum record covers %d bytes where the "
                                  "checkpoint holds %d" % (e[0], length), begin, begin + length)
        return e

    def whole(self, path: str, begin: int, length: int, name: str, buf: torch.Tensor) -> None:
        if self._entry(path, begin, length, name) is not None and length:
            self.whole_q.append(((path, begin), buf))

    def part(self, path: str, begin: int, length: int, name: str, first: int, end: int) -> None:
        """Bytes [first, end) of the storage (relative to its begin) were read."""
        e = self._entry(path, begin, length, name)
        if e is None or end <= first:
            return
        chunk = e[3] if len(e) > 3 else CHUNK
        for k in range(first // chunk, (end - 1) // chunk + 1):
            if ((path, begin), k) not in self.checked:
                self.part_q[((path, begin), k)] = None

    def run(self) -> None:
        from ._reads import exported, read_pieces

        bufs, jobs = [], []
        for key, buf in self.whole_q:
            bufs.append(buf)
            jobs.append((key, None))
        reread = []
        for key, k in self.part_q:
            chunk, length = self._chunk_of(key), self.crcs[key][0]
            n = min(chunk, length - k * chunk)
            host = np.empty(n, dtype=np.uint8)
            reread.append((key[0], key[1] + k * chunk, torch.from_numpy(host)))
            bufs.append(host)
            jobs.append((key, k))
        if reread:
            read_pieces(self.files, reread)
        self.whole_q, self.part_q = [], {}
        if not bufs:
            return
        bad = []
        for chunk in {self._chunk_of(key) for key, _ in jobs}:
            idx = [i for i, (key, _) in enumerate(jobs) if self._chunk_of(key) == chunk]
            got = _ferry.crc32c_chunks(exported([bufs[i] for i in idx]), chunk)
            for i, g in zip(idx, got):
                key, k = jobs[i]
                length, name, want = self.crcs[key][:3]
                if k is None:
                    self.bytes += length
                    pairs = list(enumerate(zip(want, g)))
                else:
                    self.bytes += min(chunk, length - k * chunk)
                    self.checked.add((key, k))
                    pairs = [(k, (want[k], g[0]))]
                for j, (w, a) in pairs:
                    if w != a:
                        b0 = key[1] + j * chunk
                        bad.append((key[0], name, b0, b0 + min(chunk, length - j * chunk), w, a))
        if bad:
            path, name, b0, b1, w, a = bad[0]
            more = " (and %d more mismatched chunks)" % (len(bad) - 1) if len(bad) > 1 else ""
            raise integrity_error(path, name, "checksum mismatch%s" % more, b0, b1,
                                  "crc32c:%08x" % w, "crc32c:%08x" % a)

    def _chunk_of(self, key: tuple) -> int:
        e = self.crcs[key]
        return e[3] if len(e) > 3 else CHUNK
