// The scheduler: one batch of byte ranges of many files (whole files, or slices of many tensors)
// moved to or from memory as one request with one future. Each range is planned and split like
// any request; files opened with the same settings share one engine, so the whole batch runs
// on one worker pool within one staging budget. A checkpoint loader hands it its tensors here.
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

}  // namespace ferry::detail
