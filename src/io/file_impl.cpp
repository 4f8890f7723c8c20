// Opening and closing a file, and the operations its source serves itself (size, sync, truncate).
#include "io/file_impl.hpp"

#include <unistd.h>

#include "backend/registry.hpp"

namespace ferry::detail {

file_impl::file_impl(const std::string& location, open_mode mode, const settings& s)
    : location_(location), mode_(mode), config_(s.resolved()), pid_(::getpid()) {
    const detail::location where(location);
    shown_ = where.shown();
    source_ = open_source(where, mode, config_);
    host_route_ = route_slot(source_->kind(), to_string(mover::host));
    engine_ = engine::shared(config_);
}

file_impl::~file_impl() = default;  // reached only when no request holds the file any more

void file_impl::check_open() const {
    if (closed_) throw usage_error("file is closed: " + shown_);
    // In a forked child the parent's requests on this file never finish and its engine has no
    // workers: refuse rather than hang.
    if (pid_ != ::getpid())
        throw usage_error("file was opened in process " + std::to_string(pid_) +
                          " before fork(); open it again in this process: " + shown_);
}

std::uint64_t file_impl::size() const {
    check_open();
    return source_->size();
}

std::string file_impl::version() const {
    check_open();
    return source_->version();
}

void file_impl::sync() const {
    check_open();
    source_->sync();
}

void file_impl::truncate(std::uint64_t size) const {
    check_open();
    source_->truncate(size);
}

void file_impl::close() {
    if (closed_.exchange(true)) return;
    if (pid_ == ::getpid()) {  // a forked child cannot wait for the parent's requests
        std::unique_lock lock(inflight_mutex_);
        inflight_cv_.wait(lock, [&] { return inflight_ == 0; });
    }
    {
        std::lock_guard lock(registered_mutex_);
        registered_.reset();  // the registration's pages stay pinned no longer for this file
    }
    source_->close();
}

}  // namespace ferry::detail
