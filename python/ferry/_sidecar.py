"""fromfile checked against a sidecar manifest (``FILE.ferry-checksums.json``, written by
``ferry verify --record``: the CRC-32C of every 64 MiB chunk of the whole file and its size;
docs/integrity.md).

The chunks a read covers are checked where the bytes landed when they are the file's bytes
(the read starts at a chunk boundary and the result keeps the file's byte order: host memory,
or GPU memory of a native dtype), one launch for a GPU result; the chunks a read covers only in
part, and reads that start inside a chunk, are checked by reading those chunks again.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from . import _ferry
from ._errors import IntegrityError, UsageError

SUFFIX = ".ferry-checksums.json"


def _error(path: str, reason: str, begin: int = 0, end: int = 0, expected: str = "",
           actual: str = "") -> IntegrityError:
    text = "%s: %s" % (path, reason)
    if expected:
        text += " (bytes [%d, %d): recorded %s, read %s)" % (begin, end, expected, actual)
    e = IntegrityError(text)
    e.filename, e.tensor, e.reason = path, "", reason
    e.begin, e.end, e.expected, e.actual = begin, end, expected, actual
    return e


def _manifest(path: str, side: str) -> tuple[int, int, list]:
    try:
        with open(side, "rb") as f:
            j = json.loads(f.read())
        ok = (isinstance(j, dict) and j.get("v") == 1 and j.get("alg") == "crc32c"
              and isinstance(j.get("chunk"), int) and j["chunk"] >= 4096
              and isinstance(j.get("size"), int) and isinstance(j.get("crcs"), str))
    except ValueError:
        ok = False
    if not ok:
        raise _error(side, "not a version 1 crc32c sidecar manifest")
    text, chunk, size = j["crcs"], j["chunk"], j["size"]
    if len(text) % 8 or any(c not in "0123456789abcdef" for c in text) or \
            len(text) // 8 != (size + chunk - 1) // chunk:
        raise _error(side, "its crcs are not 8 lowercase hex digits for each chunk of its size")
    return chunk, size, [int(text[i:i + 8], 16) for i in range(0, len(text), 8)]


def check_fromfile(path: str, start: int, nbytes: int, result: Any, same_bytes: bool, verify: str) -> None:
    """Checks bytes [start, start + nbytes) of the local file ``path``, read into ``result``
    (``same_bytes``: its memory holds them as the file does), against its sidecar."""
    if verify not in ("auto", "always", "never"):
        raise UsageError("fromfile: verify=%r: expected 'auto', 'always' or 'never'" % (verify,))
    if verify == "never":
        return
    side = path + SUFFIX
    if not os.path.exists(side):
        if verify == "always":
            raise _error(path, "verify='always' and no checksums recorded (no sidecar %s; "
                         "`ferry verify --record` writes one)" % os.path.basename(side))
        return
    chunk, size, crcs = _manifest(path, side)
    actual_size = os.stat(path).st_size
    if actual_size != size:
        raise _error(path, "the file has %d bytes, its sidecar recorded %d" % (actual_size, size),
                     min(size, actual_size), max(size, actual_size))
    if nbytes <= 0:
        return
    end = start + nbytes
    first, last = start // chunk, (end - 1) // chunk
    got: dict = {}
    if same_bytes and start % chunk == 0:
        try:
            mine = _ferry.crc32c_chunks([result], chunk)[0]
        except (TypeError, ValueError, UsageError):
            mine = []
        for j, c in enumerate(mine):
            k = first + j
            if min((k + 1) * chunk, size) <= end:   # a whole chunk of the file landed
                got[k] = c
    again = [k for k in range(first, last + 1) if k not in got]
    if again:
        bufs = [np.empty(min(chunk, size - k * chunk), np.uint8) for k in again]
        with _ferry.File(path, "r") as f:
            _ferry.read_batch([(f, k * chunk, b) for k, b in zip(again, bufs)]).result()
        for k, c in zip(again, _ferry.crc32c_chunks(bufs, chunk)):
            got[k] = c[0]
    bad = [k for k in range(first, last + 1) if got[k] != crcs[k]]
    if bad:
        k = bad[0]
        more = " (and %d more mismatched chunks)" % (len(bad) - 1) if len(bad) > 1 else ""
        raise _error(path, "checksum mismatch%s" % more, k * chunk, min((k + 1) * chunk, size),
                     "crc32c:%08x" % crcs[k], "crc32c:%08x" % got[k])
