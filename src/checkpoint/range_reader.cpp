// range_reader on ferry::file (see range_reader.hpp).
#include "checkpoint/range_reader.hpp"

namespace ferry::checkpoints {

range_reader::range_reader(const std::vector<std::string>& paths) {
    files_.reserve(paths.size());
    for (const auto& p : paths) files_.emplace_back(p, open_mode::read);
}

range_batch range_reader::submit(const std::vector<range_request>& requests) {
    range_batch b;
    b.pending_.reserve(requests.size());
    for (const auto& r : requests) {
        try {
            b.pending_.push_back(files_.at(r.file).read_async(r.dst, r.length, r.offset));
        } catch (...) {
            // Keep the batch shape: this request failed to start.
            std::promise<std::size_t> failed;
            failed.set_exception(std::current_exception());
            b.pending_.push_back(failed.get_future());
        }
        bytes_ += r.length;
        ++count_;
    }
    return b;
}

std::vector<std::exception_ptr> range_batch::wait(const std::function<void(std::size_t)>& on_done) {
    std::vector<std::exception_ptr> errors(pending_.size());
    for (std::size_t i = 0; i < pending_.size(); ++i) {
        try {
            pending_[i].get();
            if (on_done) on_done(i);
        } catch (...) {
            errors[i] = std::current_exception();
        }
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
