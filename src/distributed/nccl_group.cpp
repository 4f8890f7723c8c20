// The collectives of one group load over NCCL (see nccl_group.hpp).
#include "distributed/nccl_group.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cuda/cuda_runtime.hpp"
#include "ferry/distributed.hpp"
#include "ferry/error.hpp"

namespace ferry::distributed {
namespace {

using clock = std::chrono::steady_clock;

// ncclSplitNoColor: a rank that joins none of a split's communicators.
constexpr int split_no_color = -1;

}  // namespace

nccl_group::nccl_group(const shim::nccl_library& lib, shim::nccl_comm_t comm, int device, double timeout_seconds)
    : lib_(lib), caller_(comm), device_(device), timeout_(timeout_seconds) {
    const auto& api = lib_.api;
    int n = 0, r = 0;
    if (int rc = api.comm_count(comm, &n); rc != shim::nccl_success)
        throw usage_error(std::string("load_checkpoint_group: ncclCommCount refused the communicator: ") +
                          api.get_error_string(rc));
    if (int rc = api.comm_user_rank(comm, &r); rc != shim::nccl_success)
        throw usage_error(std::string("load_checkpoint_group: ncclCommUserRank refused the communicator: ") +
                          api.get_error_string(rc));
    world_ = n;
    rank_ = r;
    comms_.push_back(comm);
    subgroups_.push_back({});
    for (int i = 0; i < n; ++i) subgroups_[0].push_back(i);
    detail::set_device(device_);
    stream_ = detail::owned_stream::create("cudaStreamCreateWithFlags (group load collectives)");
}

nccl_group::~nccl_group() {
    // A load that did not close: peers may be stuck, so destroy (which waits for them) could
    // hang; abort never does.
    for (shim::nccl_comm_t c : owned_)
        if (c && !aborted_) lib_.api.comm_abort(c);
}

void nccl_group::abort_all() noexcept {
    if (aborted_) return;
    aborted_ = true;
    for (shim::nccl_comm_t c : owned_)
        if (c) lib_.api.comm_abort(c);
    lib_.api.comm_abort(caller_);
}

void nccl_group::fail(const std::string& step, const std::string& reason, bool timeout) {
    abort_all();
    std::string what = "distributed load: " + step + " " + reason + " on rank " + std::to_string(rank_) +
                       "; the NCCL communicator was aborted (make a new one)";
    if (timeout) throw group_timeout_error(what, -1, "", step, reason, {});
    throw group_load_error(what, rank_, "", step, reason, {rank_});
}

void nccl_group::check(int rc, const char* call, const std::string& step) {
    if (rc == shim::nccl_success || rc == shim::nccl_in_progress) return;
    fail(step, std::string("failed: ") + call + ": " + lib_.api.get_error_string(rc), false);
}

void nccl_group::split(const std::vector<std::vector<int>>& subgroups) {
    const auto& api = lib_.api;
    comms_.assign(subgroups.size(), nullptr);
    comms_[0] = caller_;
    subgroups_ = subgroups;
    if (subgroups.size() <= 1) return;
    if (!api.comm_split)
        throw usage_error("load_checkpoint_group: per-node subgroups need ncclCommSplit (NCCL 2.18 or later); " +
                          lib_.state.library_path + " is version " + std::to_string(lib_.state.version));
    // Families of subgroups that do not overlap (the nodes; the rails): one split each, the
    // color being the subgroup's place in its family. Ranks are keyed by their group rank, so
    // a subgroup's ranks keep their order (the plan lists them sorted).
    std::vector<bool> done(subgroups.size(), false);
    for (std::size_t first = 1; first < subgroups.size(); ++first) {
        if (done[first]) continue;
        std::vector<std::size_t> family;
        std::vector<bool> used(static_cast<std::size_t>(world_), false);
        for (std::size_t s = first; s < subgroups.size(); ++s) {
            if (done[s]) continue;
            bool free = std::none_of(subgroups[s].begin(), subgroups[s].end(), [&](int r) { return used[r]; });
            if (!free) continue;
            for (int r : subgroups[s]) used[r] = true;
            family.push_back(s);
            done[s] = true;
        }
        int color = split_no_color;
        std::size_t mine = 0;
        for (std::size_t k = 0; k < family.size(); ++k) {
            const auto& ranks = subgroups[family[k]];
            if (std::find(ranks.begin(), ranks.end(), rank_) != ranks.end()) {
                color = static_cast<int>(k);
                mine = family[k];
            }
        }
        shim::nccl_comm_t out = nullptr;
        check(api.comm_split(caller_, color, rank_, &out, nullptr), "ncclCommSplit", "subgroups");
        if (color != split_no_color) {
            owned_.push_back(out);
            comms_[mine] = out;
        }
    }
}

void nccl_group::group_start(const std::string& step) { check(lib_.api.group_start(), "ncclGroupStart", step); }
void nccl_group::group_end(const std::string& step) { check(lib_.api.group_end(), "ncclGroupEnd", step); }

void nccl_group::broadcast(void* buffer, std::size_t bytes, int root, std::size_t subgroup, const std::string& step) {
    const auto& ranks = subgroups_[subgroup];
    auto it = std::find(ranks.begin(), ranks.end(), root);
    int sub_root = static_cast<int>(it - ranks.begin());
    check(lib_.api.broadcast(buffer, buffer, bytes, shim::nccl_uint8, sub_root, comms_[subgroup], stream_.get()),
          "ncclBroadcast", step);
}

void nccl_group::all_reduce_sum(std::int64_t* buffer, std::size_t count, const std::string& step) {
    check(lib_.api.all_reduce(buffer, buffer, count, shim::nccl_int64, shim::nccl_sum, caller_, stream_.get()),
          "ncclAllReduce", step);
}

void nccl_group::wait(const std::string& step) {
    auto t0 = clock::now();
    auto deadline = t0 + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_));
    auto pause = std::chrono::microseconds(5);
    for (;;) {
        cudaError_t e = cudaStreamQuery(stream_.get());
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) {
            abort_all();
            detail::cuda_check(e, ("group load: " + step).c_str());
        }
        for (shim::nccl_comm_t c : comms_) {
            if (!c) continue;
            int async = shim::nccl_success;
            int rc = lib_.api.comm_get_async_error(c, &async);
            if (rc == shim::nccl_success && async != shim::nccl_success && async != shim::nccl_in_progress)
                fail(step, std::string("did not complete: NCCL reported ") + lib_.api.get_error_string(async) +
                               " (a rank failed or died)",
                     true);
        }
        if (clock::now() > deadline) {
            char what[160];
            std::snprintf(what, sizeof what, "did not complete within %.1f s (a rank stalled or died)", timeout_);
            wait_seconds_ += std::chrono::duration<double>(clock::now() - t0).count();
            fail(step, what, true);
        }
        // Collectives of a chunk take from microseconds to a second: poll fast first, then back
        // off to 1 ms so a long wait does not burn a core.
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    wait_seconds_ += std::chrono::duration<double>(clock::now() - t0).count();
}

void nccl_group::close() {
    for (shim::nccl_comm_t& c : owned_) {
        if (c) lib_.api.comm_destroy(c);
        c = nullptr;
    }
    owned_.clear();
}

}  // namespace ferry::distributed
