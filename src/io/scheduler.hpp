// The scheduler: one batch of byte ranges of many files (whole files, or slices of many tensors)
// moved to or from memory as one request with one future. Each range is planned and split like
// any request; files opened with the same settings share one engine, so the whole batch runs
// on one worker pool within one staging budget. A checkpoint loader hands it its tensors here.
//
// Gathers (submit_gathers) are the reads of a whole load in one piece: every tensor, slice and
// row segment of every shard. Into GPU memory they go through the stream lanes as one request
// (io/stream_ordered.cpp): chunks packed from many small pieces, each chunk's reads shared by
// all file workers, one copy per run of adjacent destination bytes. Into host memory each row
// lands in place by its own pread (a span: one pread into a worker's temporary, then copies),
// in groups spread over the workers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "io/file_impl.hpp"

namespace ferry::detail {

/// One range: `length` bytes at `offset` of `file`, to (a read) or from (a write) `memory`.
struct transfer {
    std::shared_ptr<file_impl> file;
    std::uint64_t offset = 0;
    std::size_t length = 0;
    void* memory = nullptr;
};

/// Starts every transfer of `batch` (reads or writes, each exact) and returns at once. The
/// future holds the bytes moved by the whole batch, or the first error once every transfer
/// that started has ended (so no memory of the batch is still in use). Thread safe.
std::future<std::size_t> submit_batch(direction dir, const std::vector<transfer>& batch);

/// Reads every gather of `batch` (the memory of all of them host memory, or all GPU memory of
/// one device) and returns at once; the future holds the bytes landed, or the first error once
/// nothing of the batch runs any more. Rows past the end of their file fail with
/// end_of_file_error. Where the planner sends a large read of a file into GPU memory to cuFile
/// (GPUDirect Storage, or FERRY_GDS=on), that file's rows go there, each its own request.
/// Thread safe.
/// Plain ranges marked own_request are requests of their own, planned like any read; where a
/// start fails, the batch's future holds that error once the rest has ended.
std::future<std::size_t> submit_gathers(const std::vector<gather>& batch);

/// Whether the planner sends a large read of `f` into GPU memory to the workers' own staging
/// (a file mostly out of the page cache, probed now; a remote source) or to the file's
/// registration (ferry::registered_file) rather than the lanes or cuFile: the test for
/// gather::own_request.
bool large_reads_staged(file_impl& f);

}  // namespace ferry::detail
