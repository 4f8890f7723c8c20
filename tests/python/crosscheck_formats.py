#!/usr/bin/env python3
"""Loads files ferry wrote with numpy.load and the reference safetensors library and checks
each array's checksum against the one ferry computed.

Usage: crosscheck_formats.py LIST.json, where LIST.json is [{"file", "format", "checksums":
{name: checksum}}]. Exit status 0: all match; 1: a mismatch or a load failure; 77: numpy is not
installed (the caller skips). safetensors files are skipped when the library is missing.
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))


def main():
    try:
        import numpy as np
    except ImportError:
        print("numpy is not installed")
        return 77
    from make_vectors import checksum
    try:
        from safetensors.numpy import load_file
    except ImportError:
        load_file = None

    def le_bytes(a):
        return a.astype(a.dtype.newbyteorder("<")).tobytes(order="C")

    with open(sys.argv[1]) as f:
        entries = json.load(f)
    failures = 0
    checked = 0
    for e in entries:
        try:
            if e["format"] == "npy":
                got = {"": checksum(le_bytes(np.load(e["file"], allow_pickle=False)))}
            elif load_file is not None:
                got = {k: checksum(le_bytes(v)) for k, v in load_file(e["file"]).items()}
            else:
                continue
        except Exception as ex:  # report every failure, not only the first
            print("%s: failed to load: %s" % (e["file"], ex))
            failures += 1
            continue
        if got != e["checksums"]:
            print("%s: checksums differ:\n  ferry  %s\n  python %s" % (e["file"], e["checksums"], got))
            failures += 1
        checked += 1
    print("checked %d files, %d failures" % (checked, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
