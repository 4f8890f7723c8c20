// A gather cut into chunks of the stream lanes' buffer size: what each chunk reads from which
// files into its buffer, and what it copies from the buffer to where in GPU memory. A pure
// function of the gather, so that its layout is tested without a GPU (tests/io/lane_chunks_test.cpp);
// io/stream_ordered.cpp carries the chunks out on the lanes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/file_impl.hpp"

namespace ferry::detail {

/// One read of a gather chunk's file side: `len` bytes at `offset` of `file` to `at` in the
/// chunk's buffer; with `rows` > 1, that many such reads, `pitch` apart in the file and packed
/// in the buffer (the row segments of a slice: one entry per chunk, not one per row, so that
/// cutting a gather of 100,000 rows does not hold back its first copy).
struct lane_read {
    file_impl* file;
    std::uint64_t offset;
    std::size_t len;
    std::size_t at;
    std::size_t rows = 1;
    std::uint64_t pitch = 0;
};

/// One copy out of a gather chunk's buffer: `rows` rows of `width` bytes, `pitch` apart in the
/// buffer, landing packed at `dst` (rows == 1: a plain copy of `width` bytes).
struct lane_copy {
    std::size_t at;
    char* dst;
    std::size_t width, rows, pitch;
};

struct lane_chunk {
    std::size_t pos, len;
    char* buffer;  ///< the lane buffer, or the caller's host memory
    std::vector<lane_read> reads;    ///< reads (gathers): the file side
    std::vector<lane_copy> copies;   ///< reads (gathers): what goes to the GPU
};

/// Cuts a gather into chunks of at most `capacity` bytes of buffer each, laid out one after
/// another (chunk.pos); chunk.buffer is left for the lanes to fill in.
std::vector<lane_chunk> cut_into_chunks(const std::vector<gather>& extents, std::size_t capacity);

}  // namespace ferry::detail
