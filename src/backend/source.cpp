// What a source that cannot do something says when asked to.
#include "backend/source.hpp"

#include <algorithm>
#include <memory>

namespace ferry::detail {
namespace {

[[noreturn]] void cannot(const source& s, const char* what) {
    throw usage_error(std::string(s.kind()) + " source cannot " + what + ": " + s.location());
}

}  // namespace

void source::read_stream(std::size_t n, std::uint64_t offset, byte_sink& sink, const io_context& where) {
    // Only sources that cannot stream come here, and nothing calls this on a hot path: a bounded
    // temporary keeps it simple.
    constexpr std::size_t piece = 1 << 20;
    std::unique_ptr<char[]> buf(new char[std::min(n, piece)]);
    for (std::size_t done = 0; done < n;) {
        std::size_t len = std::min(piece, n - done);
        read(buf.get(), len, offset + done, {where.path, offset + done, len});
        sink.consume(buf.get(), len);
        done += len;
    }
}

void source::write(const char*, std::size_t, std::uint64_t, const io_context&) { cannot(*this, "write"); }
void source::read_device(void*, std::size_t, std::size_t, std::uint64_t, const io_context&) {
    cannot(*this, "read into GPU memory directly");
}
void source::write_device(const void*, std::size_t, std::size_t, std::uint64_t, const io_context&) {
    cannot(*this, "write from GPU memory directly");
}
void source::sync() { cannot(*this, "sync"); }
void source::truncate(std::uint64_t) { cannot(*this, "truncate"); }

source* source::alternative(std::string_view kind, unavailable_reason& why) {
    why = {std::string(this->kind()) + " source has no " + std::string(kind) + " alternative", 0};
    return nullptr;
}

}  // namespace ferry::detail
