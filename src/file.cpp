// ferry::file: the public face of io/file_impl.
#include "ferry/file.hpp"

#include <string>

#include "backend/location.hpp"
#include "ferry/memory.hpp"
#include "io/file_impl.hpp"
#include "io/scheduler.hpp"

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
    return detail::location(location).shown();
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
    return f.start(f.prepare(direction::read, dst, n, offset, detail::exactness::exact)).get();
}

std::size_t file::read_some(void* dst, std::size_t n, std::uint64_t offset) const {
    auto& f = must(impl_);
    return f.start(f.prepare(direction::read, dst, n, offset, detail::exactness::up_to_end)).get();
}

std::size_t file::write(const void* src, std::size_t n, std::uint64_t offset) const {
    auto& f = must(impl_);
    return f.start(f.prepare(direction::write, src, n, offset, detail::exactness::exact)).get();
}

std::future<std::size_t> file::read_async(void* dst, std::size_t n, std::uint64_t offset) const {
    try {
        auto& f = must(impl_);
        return f.start(f.prepare(direction::read, dst, n, offset, detail::exactness::exact));
    } catch (...) {
        return failed<std::size_t>(std::current_exception());
    }
}

std::future<std::size_t> file::write_async(const void* src, std::size_t n, std::uint64_t offset) const {
    try {
        auto& f = must(impl_);
        return f.start(f.prepare(direction::write, src, n, offset, detail::exactness::exact));
    } catch (...) {
        return failed<std::size_t>(std::current_exception());
    }
}

std::future<std::size_t> file::read_async(void* dst, std::size_t n, std::uint64_t offset, stream_t s) const {
    auto& f = must(impl_);
    return f.start_on_stream(f.prepare(direction::read, dst, n, offset, detail::exactness::exact), s);
}

std::future<std::size_t> file::write_async(const void* src, std::size_t n, std::uint64_t offset, stream_t s) const {
    auto& f = must(impl_);
    return f.start_on_stream(f.prepare(direction::write, src, n, offset, detail::exactness::exact), s);
}

void file::sync() const { must(impl_).sync(); }
void file::truncate(std::uint64_t size) const { must(impl_).truncate(size); }

path_plan file::plan() const {
    auto& f = must(impl_);
    detail::plan_result p =
        f.plan(cuda_device_count() > 0 ? memory_kind::device : memory_kind::host, std::size_t(1) << 30,
               direction::read);
    return {p.chosen.counted_as, p.texts(), p.codes()};
}

io_stats file::stats() const { return must(impl_).stats(); }

std::future<std::size_t> read_batch(const std::vector<read_piece>& pieces) {
    std::vector<detail::gather> batch;
    batch.reserve(pieces.size());
    bool on_gpu = false;
    int device = -1;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        const read_piece& p = pieces[i];
        if (!p.source) throw usage_error("read_batch: piece " + std::to_string(i) + " has no file");
        if (p.length == 0) continue;
        if (!p.memory) throw usage_error("read_batch: piece " + std::to_string(i) + " has no memory");
        // One kind of memory for the whole batch: host memory, or GPU memory of one device.
        memory_kind k = memory_kind_of(p.memory);
        bool gpu = k == memory_kind::device || k == memory_kind::managed;
        int d = gpu ? device_of(p.memory) : -1;
        if (batch.empty()) {
            on_gpu = gpu;
            device = d;
        } else if (gpu != on_gpu || d != device) {
            throw usage_error("read_batch: piece " + std::to_string(i) + " goes to " + to_string(k) +
                              " memory" + (gpu ? " of device " + std::to_string(d) : std::string()) +
                              ", the batch's first to " +
                              (on_gpu ? "GPU memory of device " + std::to_string(device) : std::string("host memory")) +
                              ": one batch reads into one kind of memory");
        }
        detail::gather g;
        g.file = p.source->impl_;
        if (!g.file) throw usage_error("read_batch: piece " + std::to_string(i) + " reads a closed ferry::file");
        g.offset = p.offset;
        g.width = p.length;
        g.memory = p.memory;
        batch.push_back(std::move(g));
    }
    return detail::submit_gathers(batch);
}

void file::close() {
    if (!impl_) return;
    auto p = std::move(impl_);
    p->close();
}

}  // namespace ferry
