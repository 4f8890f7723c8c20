// The collectives of one group load over NCCL (libnccl loaded at run time by shim/nccl): the
// caller's communicator, the subgroup communicators split from it, one stream they all run on,
// and waiting with a deadline. NCCL calls return at once and their work runs on the stream, so
// a stalled peer shows as a stream that never finishes: wait() polls the stream and
// ncclCommGetAsyncError until the deadline, then aborts every communicator (ncclCommAbort, the
// only way to get a stuck NCCL kernel off the GPU) and throws group_timeout_error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_owners.hpp"
#include "shim/nccl.hpp"

namespace ferry::distributed {

class nccl_group {
public:
    /// Takes the caller's communicator (not owned: it is only aborted on a timeout). Makes
    /// `device` current and creates the stream there. Throws usage_error for a communicator
    /// NCCL does not accept.
    nccl_group(const shim::nccl_library& lib, shim::nccl_comm_t comm, int device, double timeout_seconds);
    /// Aborts the subgroup communicators still open (never throws, never blocks on peers).
    ~nccl_group();
    nccl_group(const nccl_group&) = delete;
    nccl_group& operator=(const nccl_group&) = delete;

    int rank() const noexcept { return rank_; }
    int world() const noexcept { return world_; }
    cudaStream_t stream() const noexcept { return stream_.get(); }
    /// Seconds spent in wait() so far.
    double wait_seconds() const noexcept { return wait_seconds_; }

    /// Splits one communicator per subgroup this rank is in (subgroup 0 is the caller's); a
    /// collective over the caller's communicator: every rank calls it with the same list.
    /// Subgroups that do not overlap share one ncclCommSplit. Throws usage_error when NCCL
    /// has no ncclCommSplit (before 2.18).
    void split(const std::vector<std::vector<int>>& subgroups);
    bool member(std::size_t subgroup) const noexcept { return comms_[subgroup] != nullptr; }

    void group_start(const std::string& step);
    void group_end(const std::string& step);
    /// Broadcasts `bytes` at `buffer` (device memory) from group rank `root` within `subgroup`.
    void broadcast(void* buffer, std::size_t bytes, int root, std::size_t subgroup, const std::string& step);
    /// In-place sum of `count` int64 values over the whole group.
    void all_reduce_sum(std::int64_t* buffer, std::size_t count, const std::string& step);
    /// Blocks until the stream's work is done. Throws group_timeout_error (after aborting
    /// every communicator) when the deadline passes or NCCL reports an asynchronous error,
    /// cuda_error for a CUDA failure.
    void wait(const std::string& step);
    /// Destroys the subgroup communicators (a load that succeeded).
    void close();

private:
    [[noreturn]] void fail(const std::string& step, const std::string& reason, bool timeout);
    void check(int rc, const char* call, const std::string& step);
    void abort_all() noexcept;

    const shim::nccl_library& lib_;
    shim::nccl_comm_t caller_;
    int device_;
    double timeout_;
    int rank_ = 0;
    int world_ = 1;
    std::vector<shim::nccl_comm_t> comms_;   ///< per subgroup: this rank's communicator or null
    std::vector<std::vector<int>> subgroups_;
    std::vector<shim::nccl_comm_t> owned_;   ///< the split ones
    bool aborted_ = false;
    double wait_seconds_ = 0;
    detail::owned_stream stream_;
};

}  // namespace ferry::distributed
