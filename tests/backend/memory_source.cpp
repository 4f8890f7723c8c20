#include "backend/memory_source.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <shared_mutex>
#include <vector>

#include "backend/posix/posix_source.hpp"
#include "backend/registry.hpp"
#include "backend/source.hpp"

namespace ferry::test {
namespace {

using detail::source;

class memory_source final : public source {
public:
    memory_source(const detail::location& where, open_mode mode)
        : location_(where.text()), file_(where.rest()), mode_(mode) {
        if (mode_ == open_mode::write) return;
        std::ifstream in(file_, std::ios::binary);
        if (!in) {
            if (mode_ == open_mode::read) throw system_error(ENOENT, "cannot open", {location_});
            return;
        }
        bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }

    std::string_view kind() const noexcept override { return "memory"; }
    const std::string& location() const noexcept override { return location_; }
    detail::source_traits traits() const noexcept override {
        detail::source_traits t;
        t.writable = mode_ != open_mode::read;
        return t;
    }
    std::uint64_t size() override {
        std::shared_lock lock(mutex_);
        return bytes_.size();
    }
    void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) override {
        std::shared_lock lock(mutex_);
        if (offset > bytes_.size() || n > bytes_.size() - offset) throw end_of_file_error(where, bytes_.size());
        std::memcpy(dst, bytes_.data() + offset, n);
    }
    void write(const char* src, std::size_t n, std::uint64_t offset, const io_context&) override {
        std::unique_lock lock(mutex_);
        if (bytes_.size() < offset + n) bytes_.resize(offset + n);
        std::memcpy(bytes_.data() + offset, src, n);
    }
    void sync() override { save(); }
    void truncate(std::uint64_t size) override {
        std::unique_lock lock(mutex_);
        bytes_.resize(size);
    }
    void close() override {
        if (closed_) return;
        closed_ = true;
        if (mode_ != open_mode::read) save();
    }

private:
    void save() {
        std::shared_lock lock(mutex_);
        std::ofstream out(file_, std::ios::binary | std::ios::trunc);
        out.write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
        if (!out) throw system_error(EIO, "cannot write back", {location_});
    }

    std::string location_, file_;
    open_mode mode_;
    std::shared_mutex mutex_;
    std::vector<char> bytes_;
    bool closed_ = false;
};

std::unique_ptr<source> open_memory_source(const detail::location& where, open_mode mode, const settings&) {
    return std::make_unique<memory_source>(where, mode);
}

}  // namespace

void register_memory_source(const std::string& scheme) {
    detail::register_scheme({scheme, "memory", open_memory_source, {}});
}

void restore_local_files() { detail::register_scheme({"file", "posix", detail::open_local_file, {}}); }

}  // namespace ferry::test
