// ferry::file: the public face of io/file_impl.
#include "ferry/file.hpp"

#include "backend/http/url.hpp"
#include "io/file_impl.hpp"

namespace ferry {

namespace {
detail::file_impl& must(const std::shared_ptr<detail::file_impl>& p) {
    if (!p) throw usage_error("use of a moved-from ferry::file");
    return *p;
}

template <class T>
std::future<T> failed(std::exception_ptr e) {
    std::promise<T> p;
    p.set_exception(e);
    return p.get_future();
}
}  // namespace

std::string redact_location(const std::string& location) {
    return detail::url_scheme(location).empty() ? location : detail::redact_url(location);
}

file::file(const std::string& path, open_mode mode, const settings& s)
    : impl_(std::make_shared<detail::file_impl>(path, mode, s)) {}
file::file(file&&) noexcept = default;
file& file::operator=(file&&) noexcept = default;
file::~file() {
    if (!impl_) return;
    try {
        impl_->close();
    } catch (...) {
        // Destructors never throw; close() reports errors to those who ask.
    }
}

const std::string& file::path() const noexcept {
    static const std::string none;
    return impl_ ? impl_->path() : none;
}
std::uint64_t file::size() const { return must(impl_).size(); }
std::string file::version() const { return must(impl_).version(); }
const settings& file::config() const noexcept { return impl_->config(); }

std::size_t file::read(void* dst, std::size_t n, std::uint64_t offset) const {
    auto& f = must(impl_);
    return f.start(f.prepare(detail::direction::read, dst, n, offset, detail::exactness::exact)).get();
}

std::size_t file::read_some(void* dst, std::size_t n, std::uint64_t offset) const {
    auto& f = must(impl_);
    return f.start(f.prepare(detail::direction::read, dst, n, offset, detail::exactness::up_to_end)).get();
}

std::size_t file::write(const void* src, std::size_t n, std::uint64_t offset) const {
    auto& f = must(impl_);
    return f.start(f.prepare(detail::direction::write, src, n, offset, detail::exactness::exact)).get();
}

std::future<std::size_t> file::read_async(void* dst, std::size_t n, std::uint64_t offset) const {
    try {
        auto& f = must(impl_);
        return f.start(f.prepare(detail::direction::read, dst, n, offset, detail::exactness::exact));
    } catch (...) {
        return failed<std::size_t>(std::current_exception());
    }
}

std::future<std::size_t> file::write_async(const void* src, std::size_t n, std::uint64_t offset) const {
    try {
        auto& f = must(impl_);
        return f.start(f.prepare(detail::direction::write, src, n, offset, detail::exactness::exact));
    } catch (...) {
        return failed<std::size_t>(std::current_exception());
    }
}

std::future<std::size_t> file::read_async(void* dst, std::size_t n, std::uint64_t offset, stream_t s) const {
    auto& f = must(impl_);
    return f.start_on_stream(f.prepare(detail::direction::read, dst, n, offset, detail::exactness::exact), s);
}

std::future<std::size_t> file::write_async(const void* src, std::size_t n, std::uint64_t offset, stream_t s) const {
    auto& f = must(impl_);
    return f.start_on_stream(f.prepare(detail::direction::write, src, n, offset, detail::exactness::exact), s);
}

void file::sync() const { must(impl_).sync(); }
void file::truncate(std::uint64_t size) const { must(impl_).truncate(size); }

path_plan file::plan() const {
    auto& f = must(impl_);
    detail::plan_result p =
        f.plan(cuda_device_count() > 0 ? memory_kind::device : memory_kind::host, std::size_t(1) << 30,
               detail::direction::read);
    return {p.chosen.counted_as, p.texts()};
}

io_stats file::stats() const { return must(impl_).stats(); }

void file::close() {
    if (!impl_) return;
    auto p = std::move(impl_);
    p->close();
}

}  // namespace ferry
