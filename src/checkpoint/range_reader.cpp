// range_reader on ferry::file (see range_reader.hpp).
#include "checkpoint/range_reader.hpp"

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "io/file_impl.hpp"
#include "io/scheduler.hpp"
#include "io/thread_pool.hpp"

namespace ferry::checkpoints {
namespace {

// Segment readers: small reads run inline on the thread that asks (file_impl's inline limit),
// so these threads are where segment preads happen, side by side.
constexpr std::size_t max_segment_threads = 16;
// A group of segments is at least this much: less and the hand-off costs more than the reads.
constexpr std::uint64_t min_group_bytes = 1 << 20;
// Remote shards opened at once (as open_checkpoint reads headers).
constexpr std::size_t max_parallel_opens = 16;

}  // namespace

range_reader::range_reader(const std::vector<checkpoint_shard>& shards) {
    std::vector<std::optional<file>> opened(shards.size());
    auto open_one = [&](std::size_t i) {
        const checkpoint_shard& sh = shards[i];
        file f(sh.path, open_mode::read);
        // The plan was made from the headers open_checkpoint read: bytes of another object
        // under the same name would land as if they were the tensors it described. A remote
        // shard is a new request for an object that may have been replaced; a local file that
        // shrank shows as an I/O error of the reads it cuts short (checkpoint_io_error).
        if (sh.path.find("://") == std::string::npos) {
            opened[i].emplace(std::move(f));
            return;
        }
        if (f.size() != sh.file_size)
            throw checkpoint_error(sh.path, "", "changed since the checkpoint was opened (size " +
                                                    std::to_string(sh.file_size) + " became " +
                                                    std::to_string(f.size()) + ")");
        if (std::string v = f.version(); !sh.version.empty() && v != sh.version)
            throw checkpoint_error(sh.path, "", "changed since the checkpoint was opened (" + sh.version +
                                                    " became " + (v.empty() ? "none" : v) + ")");
        opened[i].emplace(std::move(f));
    };
    // Opening a local file costs microseconds; a remote one is a round trip (a HEAD): those go
    // side by side, in batches.
    for (std::size_t first = 0; first < shards.size(); first += max_parallel_opens) {
        std::size_t last = std::min(shards.size(), first + max_parallel_opens);
        bool remote = false;
        for (std::size_t i = first; i < last; ++i) remote = remote || shards[i].path.find("://") != std::string::npos;
        if (!remote || last - first == 1) {
            for (std::size_t i = first; i < last; ++i) open_one(i);
            continue;
        }
        std::vector<std::future<void>> pending;
        for (std::size_t i = first; i < last; ++i) pending.push_back(std::async(std::launch::async, open_one, i));
        std::exception_ptr err;
        for (auto& p : pending) {
            try {
                p.get();
            } catch (...) {
                if (!err) err = std::current_exception();
            }
        }
        if (err) std::rethrow_exception(err);
    }
    files_.reserve(shards.size());
    for (auto& f : opened) files_.push_back(std::move(*f));
}

range_batch range_reader::submit(const std::vector<gather_request>& gathers) {
    range_batch b;
    b.requests_ = 1;
    std::vector<detail::gather> g;
    g.reserve(gathers.size());
    try {
        if (impls_.empty())
            for (const auto& f : files_) impls_.push_back(std::make_shared<detail::file_impl>(f.path(), open_mode::read, f.config()));
        for (const auto& r : gathers) {
            g.push_back({impls_.at(r.file), r.offset, r.rows, r.pitch, r.width, r.dst, r.span});
            bytes_ += r.bytes_read();
            count_ += r.span ? 1 : r.rows;
        }
        b.pending_.push_back(detail::submit_gathers(g));
    } catch (...) {
        std::promise<std::size_t> failed;
        failed.set_exception(std::current_exception());
        b.pending_.push_back(failed.get_future());
    }
    b.owner_.push_back(0);
    return b;
}

range_reader::~range_reader() = default;

// Made per reader, on first use, and joined with it: a process-wide pool would not survive a
// fork (a data loader's workers), and starting 16 threads costs well under a millisecond.
detail::thread_pool& range_reader::segment_pool() {
    if (!segment_pool_)
        segment_pool_ = std::make_unique<detail::thread_pool>(
            std::clamp<std::size_t>(std::thread::hardware_concurrency(), 2, max_segment_threads));
    return *segment_pool_;
}

range_batch range_reader::submit(const std::vector<range_request>& requests,
                                 const std::vector<strided_request>& strided) {
    range_batch b;
    b.requests_ = requests.size() + strided.size();
    b.pending_.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const auto& r = requests[i];
        try {
            b.pending_.push_back(files_.at(r.file).read_async(r.dst, r.length, r.offset));
        } catch (...) {
            // Keep the batch shape: this request failed to start.
            std::promise<std::size_t> failed;
            failed.set_exception(std::current_exception());
            b.pending_.push_back(failed.get_future());
        }
        b.owner_.push_back(i);
        bytes_ += r.length;
        ++count_;
    }
    detail::thread_pool& pool = segment_pool();
    for (std::size_t i = 0; i < strided.size(); ++i) {
        const strided_request s = strided[i];
        const file* f = &files_.at(s.file);
        std::uint64_t total = s.length * s.count;
        std::uint64_t groups = std::clamp<std::uint64_t>(total / min_group_bytes, 1, pool.size());
        groups = std::min<std::uint64_t>(groups, std::max<std::uint64_t>(1, s.count));
        std::uint64_t per = (s.count + groups - 1) / groups;
        for (std::uint64_t r0 = 0; r0 < s.count; r0 += per) {
            std::uint64_t r1 = std::min(s.count, r0 + per);
            auto done = std::make_shared<std::promise<std::size_t>>();
            b.pending_.push_back(done->get_future());
            b.owner_.push_back(requests.size() + i);
            pool.submit([f, s, r0, r1, done] {
                try {
                    auto* dst = static_cast<unsigned char*>(s.dst);
                    for (std::uint64_t r = r0; r < r1; ++r) f->read(dst + r * s.length, s.length, s.offset + r * s.pitch);
                    done->set_value((r1 - r0) * s.length);
                } catch (...) {
                    done->set_exception(std::current_exception());
                }
            });
        }
        bytes_ += total;
        count_ += s.count;
    }
    return b;
}

std::vector<std::exception_ptr> range_batch::wait(const std::function<void(std::size_t)>& on_done) {
    std::vector<std::exception_ptr> errors(requests_);
    std::vector<std::size_t> parts_left(requests_, 0);
    for (std::size_t o : owner_) ++parts_left[o];
    for (std::size_t i = 0; i < pending_.size(); ++i) {
        std::size_t o = owner_[i];
        try {
            pending_[i].get();
        } catch (...) {
            if (!errors[o]) errors[o] = std::current_exception();
        }
        if (--parts_left[o] == 0 && !errors[o] && on_done) on_done(o);
    }
    pending_.clear();
    owner_.clear();
    return errors;
}

range_batch::~range_batch() {
    // The destinations must outlive the reads: never leave one running.
    for (auto& p : pending_)
        if (p.valid()) p.wait();
}

}  // namespace ferry::checkpoints
