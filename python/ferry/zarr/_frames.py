"""The framing check that every compressed chunk passes before nvCOMP sees it.

nvCOMP's batched decoders assume well-formed input: a truncated or corrupt chunk can make them
read or write out of bounds, an illegal-address fault that ends the process's CUDA context. So
each chunk's frame is walked first, and a chunk that fails is decoded on the host instead (which
raises a ChunkError naming it, or decodes it and counts a fallback):

- zstd (RFC 8878): one frame, magic 0xFD2FB528, a frame header without a dictionary and with a
  Frame_Content_Size (where present) equal to the decoded chunk size, then block headers
  walked to the last block (reserved block type or Block_Size over 128 KiB: refused), then the
  content checksum where flagged; the frame must end exactly at the chunk's end (skippable
  frames, concatenated frames and trailing bytes are refused), and the bytes the blocks can
  regenerate must cover the decoded size and no more.
- gzip (RFC 1952): magic 1f 8b, CM 8, no reserved flag bits, the optional header fields
  skipped within bounds, room for a deflate stream and the 8-byte trailer, and ISIZE (the last
  4 bytes) equal to the decoded size mod 2**32.

This checks the framing, not the entropy-coded payload inside it.

The walk exists twice, with one structure and one set of status codes: `check` below (Python,
for chunks in host memory and as the reference the tests hold the kernel to) and `SOURCE`
(CUDA C, compiled by CuPy: one thread per chunk, reading the chunk where it lies on the
device). A change to one is a change to both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ZSTD, GZIP = 0, 1
CODECS = {"zstd": ZSTD, "gzip": GZIP}

OK, SHORT, MAGIC, HEADER, BLOCK, TRUNCATED, TRAILING, SIZE = range(8)
REASONS = {
    SHORT: "shorter than its frame header",
    MAGIC: "no frame magic at its start",
    HEADER: "a frame header the GPU decoder is not given",
    BLOCK: "a reserved block type or an oversized block",
    TRUNCATED: "the frame runs past the chunk's end",
    TRAILING: "bytes after the frame",
    SIZE: "a stored size other than the chunk's decoded size",
}

ZSTD_MAGIC = 0xFD2FB528
BLOCK_MAX = 128 * 1024


def _le(p: Any, i: int, k: int) -> int:
    """The little-endian unsigned integer of the k bytes at p[i]."""
    v = 0
    for j in range(k):
        v |= p[i + j] << (8 * j)
    return v


def _check_zstd(p: Any, n: int, expected: int) -> int:
    if n < 5:
        return SHORT
    if _le(p, 0, 4) != ZSTD_MAGIC:
        return MAGIC
    fhd = p[4]
    fcs_flag = fhd >> 6
    single = (fhd >> 5) & 1
    checksum = (fhd >> 2) & 1
    if fhd & 0x08 or fhd & 0x03:  # the reserved bit; a dictionary ID
        return HEADER
    i = 5 if single else 6  # the window descriptor, absent in a single segment
    fcs_len = (single, 2, 4, 8)[fcs_flag]
    if i + fcs_len > n:
        return SHORT
    if fcs_len:
        fcs = _le(p, i, fcs_len) + (256 if fcs_len == 2 else 0)
        if fcs != expected:
            return SIZE
    i += fcs_len
    lo = 0  # the fewest and the most bytes the blocks regenerate
    hi = 0
    while True:
        if i + 3 > n:
            return TRUNCATED
        h = _le(p, i, 3)
        i += 3
        last = h & 1
        btype = (h >> 1) & 3
        bsize = h >> 3
        if btype == 3 or bsize > BLOCK_MAX:
            return BLOCK
        if btype == 0:  # raw: bsize bytes, regenerated as they are
            i += bsize
            lo += bsize
            hi += bsize
        elif btype == 1:  # RLE: one byte, regenerated bsize times
            i += 1
            lo += bsize
            hi += bsize
        else:  # compressed: bsize bytes, regenerating at most BLOCK_MAX
            i += bsize
            hi += BLOCK_MAX
        if i > n:
            return TRUNCATED
        if last:
            break
    if checksum:
        i += 4
    if i > n:
        return TRUNCATED
    if i != n:
        return TRAILING
    if lo > expected or hi < expected:
        return SIZE
    return OK


def _check_gzip(p: Any, n: int, expected: int) -> int:
    if n < 10:
        return SHORT
    if p[0] != 0x1F or p[1] != 0x8B:
        return MAGIC
    flg = p[3]
    if p[2] != 8 or flg & 0xE0:  # CM deflate; the reserved flags
        return HEADER
    i = 10
    if flg & 0x04:  # FEXTRA: XLEN, then XLEN bytes
        if i + 2 > n:
            return SHORT
        i += 2 + _le(p, i, 2)
    if flg & 0x08:  # FNAME, zero-terminated
        while i < n and p[i] != 0:
            i += 1
        i += 1
    if flg & 0x10:  # FCOMMENT, zero-terminated
        while i < n and p[i] != 0:
            i += 1
        i += 1
    if flg & 0x02:  # FHCRC
        i += 2
    if i + 2 + 8 > n:  # the shortest deflate stream, CRC32, ISIZE
        return SHORT
    if _le(p, n - 4, 4) != expected % (1 << 32):
        return SIZE
    return OK


def check(name: str, data: Any, expected: int) -> int:
    """The status (OK, or a key of REASONS) of one chunk in host memory (bytes or a 1-D uint8
    array) compressed by `name`, decoding to `expected` bytes."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        a = np.frombuffer(data, dtype=np.uint8)
    else:
        a = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    p = a.data  # indexing yields ints
    if CODECS[name] == ZSTD:
        return _check_zstd(p, len(p), expected)
    return _check_gzip(p, len(p), expected)


# The same walk in CUDA C: ferry_frame_check runs one thread per chunk, chunk c being
# block[where[c] : where[c] + where[n + c]], and writes its status to status[c].
SOURCE = r"""
#define FERRY_OK 0
#define FERRY_SHORT 1
#define FERRY_MAGIC 2
#define FERRY_HEADER 3
#define FERRY_BLOCK 4
#define FERRY_TRUNCATED 5
#define FERRY_TRAILING 6
#define FERRY_SIZE 7
#define FERRY_ZSTD_MAGIC 0xFD2FB528ull
#define FERRY_BLOCK_MAX (128ll * 1024)

__device__ unsigned long long ferry_le(const unsigned char* p, long long i, int k) {
  unsigned long long v = 0;
  for (int j = 0; j < k; ++j) v |= (unsigned long long)p[i + j] << (8 * j);
  return v;
}

__device__ int ferry_check_zstd(const unsigned char* p, long long n, long long expected) {
  if (n < 5) return FERRY_SHORT;
  if (ferry_le(p, 0, 4) != FERRY_ZSTD_MAGIC) return FERRY_MAGIC;
  int fhd = p[4];
  int fcs_flag = fhd >> 6;
  int single = (fhd >> 5) & 1;
  int checksum = (fhd >> 2) & 1;
  if ((fhd & 0x08) || (fhd & 0x03)) return FERRY_HEADER;  /* the reserved bit; a dictionary ID */
  long long i = single ? 5 : 6;  /* the window descriptor, absent in a single segment */
  int fcs_len = fcs_flag == 0 ? single : fcs_flag == 1 ? 2 : fcs_flag == 2 ? 4 : 8;
  if (i + fcs_len > n) return FERRY_SHORT;
  if (fcs_len) {
    unsigned long long fcs = ferry_le(p, i, fcs_len) + (fcs_len == 2 ? 256 : 0);
    if (fcs != (unsigned long long)expected) return FERRY_SIZE;
  }
  i += fcs_len;
  long long lo = 0;  /* the fewest and the most bytes the blocks regenerate */
  long long hi = 0;
  while (1) {
    if (i + 3 > n) return FERRY_TRUNCATED;
    long long h = (long long)ferry_le(p, i, 3);
    i += 3;
    int last = (int)(h & 1);
    int btype = (int)((h >> 1) & 3);
    long long bsize = h >> 3;
    if (btype == 3 || bsize > FERRY_BLOCK_MAX) return FERRY_BLOCK;
    if (btype == 0) {  /* raw: bsize bytes, regenerated as they are */
      i += bsize;
      lo += bsize;
      hi += bsize;
    } else if (btype == 1) {  /* RLE: one byte, regenerated bsize times */
      i += 1;
      lo += bsize;
      hi += bsize;
    } else {  /* compressed: bsize bytes, regenerating at most FERRY_BLOCK_MAX */
      i += bsize;
      hi += FERRY_BLOCK_MAX;
    }
    if (i > n) return FERRY_TRUNCATED;
    if (last) break;
  }
  if (checksum) i += 4;
  if (i > n) return FERRY_TRUNCATED;
  if (i != n) return FERRY_TRAILING;
  if (lo > expected || hi < expected) return FERRY_SIZE;
  return FERRY_OK;
}

__device__ int ferry_check_gzip(const unsigned char* p, long long n, long long expected) {
  if (n < 10) return FERRY_SHORT;
  if (p[0] != 0x1F || p[1] != 0x8B) return FERRY_MAGIC;
  int flg = p[3];
  if (p[2] != 8 || (flg & 0xE0)) return FERRY_HEADER;  /* CM deflate; the reserved flags */
  long long i = 10;
  if (flg & 0x04) {  /* FEXTRA: XLEN, then XLEN bytes */
    if (i + 2 > n) return FERRY_SHORT;
    i += 2 + (long long)ferry_le(p, i, 2);
  }
  if (flg & 0x08) {  /* FNAME, zero-terminated */
    while (i < n && p[i] != 0) ++i;
    ++i;
  }
  if (flg & 0x10) {  /* FCOMMENT, zero-terminated */
    while (i < n && p[i] != 0) ++i;
    ++i;
  }
  if (flg & 0x02) i += 2;  /* FHCRC */
  if (i + 2 + 8 > n) return FERRY_SHORT;  /* the shortest deflate stream, CRC32, ISIZE */
  if (ferry_le(p, n - 4, 4) != ((unsigned long long)expected & 0xFFFFFFFFull)) return FERRY_SIZE;
  return FERRY_OK;
}

extern "C" __global__ void ferry_frame_check(
    const unsigned char* block, const long long* where, long long n, long long expected,
    int codec, int* status) {
  long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  const unsigned char* p = block + where[c];
  long long len = where[n + c];
  status[c] = codec == 0 ? ferry_check_zstd(p, len, expected) : ferry_check_gzip(p, len, expected);
}
"""
