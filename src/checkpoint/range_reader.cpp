// range_reader on ferry::file (see range_reader.hpp).
#include "checkpoint/range_reader.hpp"

#include "backend/location.hpp"
#include "checkpoint/side_by_side.hpp"

#include <algorithm>
#include <cerrno>
#include <future>
#include <memory>

#include "io/file_impl.hpp"
#include "io/scheduler.hpp"

namespace ferry::checkpoints {
namespace {

// Remote shards opened at once (as open_checkpoint reads headers).
constexpr std::size_t max_parallel_opens = 16;

}  // namespace

range_reader::range_reader(const std::vector<checkpoint_shard>& shards, placement where)
    : to_gpu_(where.on_gpu()), staged_(shards.size()) {
    files_.resize(shards.size());
    auto open_one = [&](std::size_t i) {
        const checkpoint_shard& sh = shards[i];
        std::shared_ptr<detail::file_impl> f;
        try {
            f = std::make_shared<detail::file_impl>(sh.path, open_mode::read, settings::global());
        } catch (const system_error& e) {
            // A newer save removes the shards its index no longer names once that index is out.
            if (e.code() == ENOENT) throw checkpoint_changed_error(sh.path, "the shard was removed since its header was read");
            throw;
        } catch (const remote_error& e) {
            if (e.status() == 404) throw checkpoint_changed_error(sh.path, "the shard was removed since its header was read");
            throw;
        }
        // The plan was made from the headers open_checkpoint read: bytes of another object
        // under the same name would land as if they were the tensors it described. A remote
        // shard is a new request for an object that may have been replaced; a local one a new
        // open of a name that a save may have given to a newer file.
        if (f->size() != sh.file_size)
            throw checkpoint_changed_error(sh.path, "size " + std::to_string(sh.file_size) + " became " +
                                                        std::to_string(f->size()) + " since its header was read");
        if (std::string v = f->version(); !sh.version.empty() && v != sh.version)
            throw checkpoint_changed_error(sh.path, sh.version + " became " + (v.empty() ? "none" : v) +
                                                        " since its header was read");
        files_[i] = std::move(f);
    };
    // Opening a local file costs microseconds; a remote one is a round trip (a HEAD): those go
    // side by side.
    bool remote = std::any_of(shards.begin(), shards.end(),
                              [](const checkpoint_shard& sh) { return detail::location(sh.path).is_url(); });
    if (remote) {
        side_by_side(shards.size(), max_parallel_opens, open_one);
        return;
    }
    for (std::size_t i = 0; i < shards.size(); ++i) open_one(i);
}

range_reader::~range_reader() {
    for (const auto& f : files_) {
        try {
            if (f) f->close();
        } catch (...) {  // a destructor never throws; the loads already reported their errors
        }
    }
}

void range_reader::check_unchanged(const std::vector<checkpoint_shard>& shards) const {
    for (std::size_t i = 0; i < shards.size() && i < files_.size(); ++i) {
        const checkpoint_shard& sh = shards[i];
        if (!files_[i] || sh.version.empty()) continue;
        if (std::string v = files_[i]->version(); v != sh.version)
            throw checkpoint_changed_error(sh.path, sh.version + " became " + (v.empty() ? "none" : v) +
                                                        " while its bytes were read");
    }
}

void range_reader::throw_if_removed(std::exception_ptr read_error, const std::vector<checkpoint_shard>& shards) {
    try {
        std::rethrow_exception(read_error);
    } catch (const remote_error& e) {
        // Opened a moment before with its header's size and ETag: it existed, and is gone
        // (404), or its GET's If-Match no longer holds (412).
        if (e.status() != 404 && e.status() != 412) return;
        for (const auto& sh : shards)
            if (redact_location(sh.path) == e.url() || sh.path == e.url())
                throw checkpoint_changed_error(sh.path, e.status() == 404 ? "the shard was removed while its bytes were read"
                                                                          : "the shard was replaced while its bytes were read");
    } catch (...) {
    }
}

bool range_reader::own_requests(std::size_t i) {
    if (!to_gpu_) return false;
    std::optional<bool>& staged = staged_.at(i);
    if (!staged) staged = detail::large_reads_staged(*files_.at(i));
    return *staged;
}

void range_reader::start(range_batch& b, const std::vector<gather_request>& gathers) {
    try {
        std::vector<detail::gather> g;
        g.reserve(gathers.size());
        for (const auto& r : gathers) {
            g.push_back({files_.at(r.file), r.offset, r.rows, r.pitch, r.width, r.dst, r.span,
                         r.rows == 1 && own_requests(r.file)});
            bytes_ += r.bytes_read();
            count_ += r.span ? 1 : r.rows;
        }
        b.pending_.push_back(detail::submit_gathers(g));
    } catch (...) {
        // Keep the batch shape: this request failed to start.
        std::promise<std::size_t> failed;
        failed.set_exception(std::current_exception());
        b.pending_.push_back(failed.get_future());
    }
}

range_batch range_reader::submit(const std::vector<gather_request>& gathers) {
    range_batch b;
    start(b, gathers);
    return b;
}

range_batch range_reader::submit_each(const std::vector<gather_request>& requests) {
    range_batch b;
    b.pending_.reserve(requests.size());
    for (const auto& r : requests) start(b, {r});
    return b;
}

std::vector<std::exception_ptr> range_batch::wait(const std::function<void(std::size_t)>& on_done) {
    std::vector<std::exception_ptr> errors(pending_.size());
    for (std::size_t i = 0; i < pending_.size(); ++i) {
        try {
            pending_[i].get();
        } catch (...) {
            errors[i] = std::current_exception();
        }
        if (!errors[i] && on_done) on_done(i);
    }
    pending_.clear();
    return errors;
}

range_batch::~range_batch() {
    // The destinations must outlive the reads: never leave one running.
    for (auto& p : pending_)
        if (p.valid()) p.wait();
}

}  // namespace ferry::checkpoints
