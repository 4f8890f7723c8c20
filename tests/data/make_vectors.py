#!/usr/bin/env python3
"""Writes the .npy and safetensors conformance vectors under tests/data/ and their manifests.

Valid vectors carry the dtype, byte order, layout, shape and checksum the loader must report;
invalid ones the field and a fragment of the reason of the format error it must raise. Valid
.npy files are written by numpy itself when it is installed (the cross-check that matters);
without numpy the script stops, so committed files are always numpy's. safetensors files are
written here from the format's specification.

Usage: python3 tests/data/make_vectors.py   (rewrites tests/data/npy and tests/data/safetensors)
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NPY_DIR = os.path.join(HERE, "npy")
ST_DIR = os.path.join(HERE, "safetensors")

# ---- XXH64 (seed 0), from the xxHash specification, to state the checksums independently ----
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
M64 = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    acc = (acc + lane * P2) & M64
    return (_rotl(acc, 31) * P1) & M64


def _merge(acc, val):
    acc ^= _round(0, val)
    return (acc * P1 + P4) & M64


def xxh64(data, seed=0):
    n = len(data)
    i = 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0])
            i += 32
        acc = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for k in range(4):
            acc = _merge(acc, v[k])
    else:
        acc = (seed + P5) & M64
    acc = (acc + n) & M64
    while i + 8 <= n:
        acc ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        acc = (_rotl(acc, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        acc ^= (struct.unpack_from("<I", data, i)[0] * P1) & M64
        acc = (_rotl(acc, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        acc ^= (data[i] * P5) & M64
        acc = (_rotl(acc, 11) * P1) & M64
        i += 1
    acc ^= acc >> 33
    acc = (acc * P2) & M64
    acc ^= acc >> 29
    acc = (acc * P3) & M64
    acc ^= acc >> 32
    return acc


def checksum(le_c_bytes):
    return "xxh64:%016x" % xxh64(le_c_bytes)


# ---- .npy ---------------------------------------------------------------------------------

def npy_preamble(header, major=1):
    fmt = "<H" if major == 1 else "<I"
    return b"\x93NUMPY" + bytes([major, 0]) + struct.pack(fmt, len(header)) + header


def npy_header_text(descr, fortran, shape_text, pad_to=64, major=1):
    """A hand-made header in numpy's style (for invalid vectors)."""
    d = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
    pre = 10 if major == 1 else 12
    total = pre + len(d) + 1
    pad = (-total) % pad_to
    return (d + " " * pad + "\n").encode("latin-1")


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def valid_npy(np, manifest):
    rng = np.random.default_rng(20261129)
    dtypes = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"]
    all_shapes = [((), "C"), ((0,), "C"), ((7,), "C"), ((3, 5), "C"), ((3, 5), "F"),
                  ((2, 3, 4), "C"), ((2, 3, 4), "F"), ((1, 0, 3), "F")]
    few_shapes = [((7,), "C"), ((2, 3, 4), "F")]
    for name in dtypes:
        for order_char, order_name in (("<", "little"), (">", "big")):
            dt = np.dtype(name)
            if dt.itemsize > 1:
                dt = dt.newbyteorder(order_char)
            elif order_char == ">":
                continue
            for shape, layout in (all_shapes if name in ("float32", "complex128", "bool") else few_shapes):
                if True:
                    if name == "bool":
                        a = rng.integers(0, 2, size=shape).astype(bool)
                    elif dt.kind in "iu":
                        info = np.iinfo(dt)
                        a = rng.integers(info.min, info.max, size=shape, dtype=dt.newbyteorder("="), endpoint=True)
                    elif dt.kind == "c":
                        a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
                    else:
                        a = rng.standard_normal(shape) * 100
                    a = np.asarray(a).astype(dt)
                    a = a.copy(order=layout)
                    tag = "x".join(str(s) for s in shape) or "scalar"
                    fname = "ok_%s_%s_%s_%s.npy" % (name, order_name, layout, tag)
                    np.save(os.path.join(NPY_DIR, fname), a)
                    le = a.astype(a.dtype.newbyteorder("<")).tobytes(order="C")
                    stored_order = order_name if dt.itemsize > 1 else "little"
                    manifest.append({
                        "file": fname, "dtype": name, "byte_order": stored_order,
                        "order": "F" if (layout == "F" and a.ndim >= 2 and not a.flags.c_contiguous) else "C",
                        "shape": list(shape), "checksum": checksum(le), "version": "1.0",
                    })
    # Versions 2.0 and 3.0, written by numpy's own writer.
    from numpy.lib import format as npformat
    for version in ((2, 0), (3, 0)):
        a = np.arange(12, dtype=">i4").reshape(3, 4)
        fname = "ok_version_%d_%d.npy" % version
        with open(os.path.join(NPY_DIR, fname), "wb") as f:
            npformat.write_array(f, a, version=version)
        manifest.append({"file": fname, "dtype": "int32", "byte_order": "big", "order": "C",
                         "shape": [3, 4], "version": "%d.%d" % version,
                         "checksum": checksum(a.astype("<i4").tobytes())})
    # An odd size whose data is not a multiple of 16 bytes: exercises vector heads and tails.
    a = (np.arange(1001) / 7).astype(">f8")
    np.save(os.path.join(NPY_DIR, "ok_odd_1001_big.npy"), a)
    manifest.append({"file": "ok_odd_1001_big.npy", "dtype": "float64", "byte_order": "big",
                     "order": "C", "shape": [1001], "version": "1.0",
                     "checksum": checksum(a.astype("<f8").tobytes())})


def invalid_npy(manifest):
    good = npy_header_text("'<f4'", "False", "(2,)")
    data = b"\x00" * 8

    def bad(fname, content, field, reason):
        write(os.path.join(NPY_DIR, fname), content)
        manifest.append({"file": fname, "error": {"field": field, "reason": reason}})

    bad("bad_magic.npy", b"\x93NUMPX\x01\x00" + struct.pack("<H", len(good)) + good + data,
        "magic", "not a .npy file")
    bad("bad_empty.npy", b"", "magic", "not a .npy file")
    bad("bad_version_4_0.npy", b"\x93NUMPY\x04\x00" + struct.pack("<H", len(good)) + good + data,
        "version", "unknown version 4.0")
    bad("bad_version_1_1.npy", b"\x93NUMPY\x01\x01" + struct.pack("<H", len(good)) + good + data,
        "version", "unknown version 1.1")
    bad("bad_short_preamble.npy", b"\x93NUMPY\x01\x00\x10", "header_length", "ends inside the preamble")
    bad("bad_header_past_end.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", 500) + good[:50],
        "header", "ends inside the header")
    big = b"{" + b" " * 10030 + b"}\n"
    bad("bad_header_cap.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", len(big)) + big,
        "header_length", "exceeds the cap")

    def hdr(fname, text, field, reason, payload=data, major=1):
        raw = text.encode("utf-8") if isinstance(text, str) else text
        bad(fname, npy_preamble(raw, major) + payload, field, reason)

    hdr("bad_not_dict.npy", "['<f4', False, (2,)]" + " " * 43 + "\n", "header", "expected '{'")
    hdr("bad_missing_shape.npy", "{'descr': '<f4', 'fortran_order': False}" + " " * 13 + "\n",
        "shape", "missing key")
    hdr("bad_missing_descr.npy", "{'fortran_order': False, 'shape': (2,)}" + " " * 14 + "\n",
        "descr", "missing key")
    hdr("bad_extra_key.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n",
        "header", "unexpected key 'x'")
    hdr("bad_duplicate_key.npy",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}" + " " * 44 + "\n",
        "descr", "duplicate key")
    hdr("bad_shape_not_tuple.npy", npy_header_text("'<f4'", "False", "(2)").decode(), "shape", "not a tuple")
    hdr("bad_shape_list.npy", npy_header_text("'<f4'", "False", "[2]").decode(), "shape", "not a tuple")
    hdr("bad_shape_negative.npy", npy_header_text("'<f4'", "False", "(-2,)").decode(), "shape",
        "negative dimension")
    hdr("bad_shape_float.npy", npy_header_text("'<f4'", "False", "(2.0,)").decode(), "shape",
        "not a plain integer")
    hdr("bad_shape_overflow.npy",
        npy_header_text("'<f4'", "False", "(9223372036854775807, 9223372036854775807)").decode(),
        "shape", "overflows")
    hdr("bad_shape_too_large.npy", npy_header_text("'<f4'", "False", "(99999999999999999999,)").decode(),
        "shape", "too large")
    hdr("bad_shape_65_dims.npy", npy_header_text("'<f4'", "False", "(" + "1, " * 65 + ")").decode(),
        "shape", "more than 64")
    hdr("bad_fortran_not_bool.npy", npy_header_text("'<f4'", "0", "(2,)").decode(), "fortran_order",
        "not True or False")
    hdr("bad_descr_object.npy", npy_header_text("'|O'", "False", "(2,)").decode(), "descr",
        "object dtype")
    hdr("bad_descr_structured.npy", npy_header_text("[('a', '<f4')]", "False", "(2,)").decode(),
        "descr", "structured")
    hdr("bad_descr_void.npy", npy_header_text("'<V2'", "False", "(2,)").decode(), "descr",
        "unsupported dtype")
    hdr("bad_descr_unicode.npy", npy_header_text("'<U4'", "False", "(2,)").decode(), "descr",
        "unsupported dtype")
    hdr("bad_descr_not_string.npy", npy_header_text("4", "False", "(2,)").decode(), "descr",
        "not a string")
    hdr("bad_unterminated_string.npy", "{'descr': '<f4" + " " * 50 + "\n", "descr", "unterminated string")
    hdr("bad_trailing_text.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x" + " " * 8 + "\n",
        "header", "unexpected text after the dict")
    hdr("bad_non_ascii_v1.npy", ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}" + " " * 9 + "\n")
        .encode("latin-1").replace(b"} ", b"}\xe9", 1), "header", "non-ASCII")
    hdr("bad_truncated_data.npy", good.decode(), "data", "file is truncated", payload=b"\x00" * 7)
    hdr("bad_truncated_empty_payload.npy", npy_header_text("'<f8'", "False", "(3, 4)").decode(), "data",
        "file is truncated", payload=b"")


# ---- safetensors --------------------------------------------------------------------------

ST_DTYPES = {  # name -> (safetensors name, item size, struct code or None)
    "bool": ("BOOL", 1), "uint8": ("U8", 1), "int8": ("I8", 1), "float8_e5m2": ("F8_E5M2", 1),
    "float8_e4m3fn": ("F8_E4M3", 1), "int16": ("I16", 2), "uint16": ("U16", 2),
    "float16": ("F16", 2), "bfloat16": ("BF16", 2), "int32": ("I32", 4), "uint32": ("U32", 4),
    "float32": ("F32", 4), "float64": ("F64", 8), "int64": ("I64", 8), "uint64": ("U64", 8),
    "complex64": ("C64", 8),
}


def st_file(entries, metadata=None, pad=True, header_override=None, trailing=b""):
    """entries: list of (name, st_dtype, shape, data bytes); data laid out in list order."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    blob = b""
    for name, st, shape, data in entries:
        header[name] = {"dtype": st, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blob += data
    text = header_override if header_override is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((-len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + blob + trailing


def pattern(n, seed):
    x = seed * 2654435761 % (1 << 32)
    out = bytearray()
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append((x >> 16) & 0xFF)
    return bytes(out)


def st_element_bytes(name, n, seed):
    data = bytearray(pattern(n * ST_DTYPES[name][1], seed))
    if name == "bool":
        data = bytearray(b & 1 for b in data)
    return bytes(data)


def valid_safetensors(manifest):
    # Every dtype, odd sizes, a 0-d and an empty tensor, ordered largest item size first.
    entries = []
    expect = []
    shapes = [(3,), (2, 3), (5, 1, 3)]
    order = sorted(ST_DTYPES, key=lambda k: (-ST_DTYPES[k][1], k))
    for i, name in enumerate(order):
        shape = shapes[i % len(shapes)]
        n = 1
        for s in shape:
            n *= s
        data = st_element_bytes(name, n, i + 1)
        entries.append(("t_" + name, ST_DTYPES[name][0], shape, data))
        expect.append({"name": "t_" + name, "dtype": name, "shape": list(shape), "checksum": checksum(data)})
    entries.append(("scalar", "F32", (), struct.pack("<f", 1.5)))
    expect.append({"name": "scalar", "dtype": "float32", "shape": [], "checksum": checksum(struct.pack("<f", 1.5))})
    entries.append(("empty", "F32", (0, 4), b""))
    expect.append({"name": "empty", "dtype": "float32", "shape": [0, 4], "checksum": checksum(b"")})
    fname = "ok_all_dtypes.safetensors"
    write(os.path.join(ST_DIR, fname), st_file(entries, metadata={"format": "pt", "note": "vectors"}))
    manifest.append({"file": fname, "tensors": sorted(expect, key=lambda e: e["name"]),
                     "metadata": {"format": "pt", "note": "vectors"}})
    # No tensors at all.
    write(os.path.join(ST_DIR, "ok_empty.safetensors"), st_file([]))
    manifest.append({"file": "ok_empty.safetensors", "tensors": [], "metadata": {}})
    # Tensors listed out of offset order in the JSON, and an unpadded header.
    a = pattern(24, 7)
    b = pattern(8, 8)
    hdr = json.dumps({"b": {"dtype": "U8", "shape": [8], "data_offsets": [24, 32]},
                      "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}).encode()
    write(os.path.join(ST_DIR, "ok_unsorted_unpadded.safetensors"),
          struct.pack("<Q", len(hdr)) + hdr + a + b)
    # Tensors at offsets that are not multiples of their item size (legal; other writers do it).
    u = pattern(3, 9)
    h = struct.pack("<5e", 1.0, -2.5, 65504.0, 0.0, 3.140625)
    f = struct.pack("<3f", 0.5, -1.0, 2.0)
    write(os.path.join(ST_DIR, "ok_misaligned.safetensors"),
          st_file([("a", "U8", (3,), u), ("b", "F16", (5,), h), ("c", "F32", (3,), f)]))
    manifest.append({"file": "ok_misaligned.safetensors", "metadata": {}, "tensors": [
        {"name": "a", "dtype": "uint8", "shape": [3], "checksum": checksum(u)},
        {"name": "b", "dtype": "float16", "shape": [5], "checksum": checksum(h)},
        {"name": "c", "dtype": "float32", "shape": [3], "checksum": checksum(f)}]})
    manifest.append({"file": "ok_unsorted_unpadded.safetensors", "metadata": {}, "tensors": [
        {"name": "a", "dtype": "float32", "shape": [2, 3], "checksum": checksum(a)},
        {"name": "b", "dtype": "uint8", "shape": [8], "checksum": checksum(b)}]})


def invalid_safetensors(manifest):
    f32 = struct.pack("<4f", 1, 2, 3, 4)

    def bad(fname, content, field, reason):
        write(os.path.join(ST_DIR, fname), content)
        manifest.append({"file": fname, "error": {"field": field, "reason": reason}})

    def hjson(obj):
        return json.dumps(obj, separators=(",", ":")).encode()

    def raw(header_bytes, data=b""):
        return struct.pack("<Q", len(header_bytes)) + header_bytes + data

    bad("bad_short.safetensors", b"\x05\x00\x00", "header_length", "shorter than 8 bytes")
    bad("bad_header_cap.safetensors", struct.pack("<Q", 100_000_001) + b"{}", "header_length",
        "exceeds the cap")
    bad("bad_header_past_end.safetensors", struct.pack("<Q", 64) + b"{}", "header_length",
        "runs past the end")
    bad("bad_not_json.safetensors", raw(b"{nope}  "), "header", "invalid JSON")
    bad("bad_not_object.safetensors", raw(b"{}[]    "), "header", "invalid JSON")
    bad("bad_no_brace.safetensors", raw(b"[1,2,3] "), "header", "does not start with '{'")
    bad("bad_unknown_dtype.safetensors",
        raw(hjson({"x": {"dtype": "F8_E8M0", "shape": [4], "data_offsets": [0, 4]}}), b"\0" * 4),
        "tensor 'x' dtype", "unknown dtype 'F8_E8M0'")
    bad("bad_dtype_not_string.safetensors",
        raw(hjson({"x": {"dtype": 4, "shape": [4], "data_offsets": [0, 4]}}), b"\0" * 4),
        "tensor 'x' dtype", "not a string")
    bad("bad_shape_negative.safetensors",
        raw(hjson({"x": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}), f32),
        "tensor 'x' shape", "non-negative integer")
    bad("bad_shape_float.safetensors",
        raw(hjson({"x": {"dtype": "F32", "shape": [4.0], "data_offsets": [0, 16]}}), f32),
        "tensor 'x' shape", "non-negative integer")
    bad("bad_shape_not_array.safetensors",
        raw(hjson({"x": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}}), f32),
        "tensor 'x' shape", "not an array")
    bad("bad_shape_overflow.safetensors",
        raw(hjson({"x": {"dtype": "F32", "shape": [2**62, 2**62], "data_offsets": [0, 16]}}), f32),
        "tensor 'x' shape", "overflows")
    bad("bad_offsets_count.safetensors",
        raw(hjson({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8, 16]}}), f32),
        "tensor 'x' data_offsets", "pair")
    bad("bad_offsets_reversed.safetensors",
        raw(hjson({"x": {"dtype": "U8", "shape": [0], "data_offsets": [16, 0]}}), f32),
        "tensor 'x' data_offsets", "end before begin")
    bad("bad_size_mismatch.safetensors",
        raw(hjson({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}), f32),
        "tensor 'x' data_offsets", "does not match")
    bad("bad_missing_offsets.safetensors",
        raw(hjson({"x": {"dtype": "F32", "shape": [4]}}), f32),
        "tensor 'x'", "needs dtype, shape and data_offsets")
    bad("bad_entry_not_object.safetensors", raw(hjson({"x": [1, 2]}), f32), "tensor 'x'",
        "not an object")
    bad("bad_gap.safetensors",
        raw(hjson({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}), f32),
        "tensor 'b' data_offsets", "leaves a gap")
    bad("bad_overlap.safetensors",
        raw(hjson({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}), f32),
        "tensor 'b' data_offsets", "overlaps")
    bad("bad_not_from_zero.safetensors",
        raw(hjson({"a": {"dtype": "F32", "shape": [3], "data_offsets": [4, 16]}}), f32),
        "tensor 'a' data_offsets", "leaves a gap")
    bad("bad_trailing_bytes.safetensors",
        raw(hjson({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}), f32),
        "data", "trailing bytes")
    bad("bad_truncated.safetensors",
        raw(hjson({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}}), f32),
        "data", "file is truncated")
    bad("bad_duplicate_name.safetensors",
        raw(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
            b'"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}', f32),
        "tensor 'a'", "duplicate key")
    bad("bad_metadata_value.safetensors",
        raw(hjson({"__metadata__": {"k": 1}, "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}), f32),
        "__metadata__", "is not a string")
    bad("bad_metadata_not_object.safetensors",
        raw(hjson({"__metadata__": "x", "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}), f32),
        "__metadata__", "not an object")
    bad("bad_nested_deep.safetensors",
        raw(b'{"__metadata__":{"k":{"a":{"b":{"c":1}}}}}', f32), "header", "nested too deeply")
    bad("bad_huge_array.safetensors",
        raw(hjson({"x": {"dtype": "U8", "shape": [1] * 2000, "data_offsets": [0, 1]}}), b"\0"),
        "header", "array of more than 1024 items")
    bad("bad_invalid_utf8.safetensors",
        raw(b'{"\xff":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', f32), "header", "invalid JSON")


def main():
    try:
        import numpy as np
    except ImportError:
        sys.exit("make_vectors.py needs numpy to write the valid .npy vectors")
    os.makedirs(NPY_DIR, exist_ok=True)
    os.makedirs(ST_DIR, exist_ok=True)
    for d in (NPY_DIR, ST_DIR):
        for f in os.listdir(d):
            if f.endswith((".npy", ".safetensors")):
                os.remove(os.path.join(d, f))
    npy_manifest, st_manifest = [], []
    valid_npy(np, npy_manifest)
    invalid_npy(npy_manifest)
    valid_safetensors(st_manifest)
    invalid_safetensors(st_manifest)
    with open(os.path.join(NPY_DIR, "manifest.json"), "w") as f:
        json.dump({"vectors": npy_manifest}, f, indent=1)
        f.write("\n")
    with open(os.path.join(ST_DIR, "manifest.json"), "w") as f:
        json.dump({"vectors": st_manifest}, f, indent=1)
        f.write("\n")
    print("%d .npy and %d safetensors vectors" % (len(npy_manifest), len(st_manifest)))


if __name__ == "__main__":
    main()
