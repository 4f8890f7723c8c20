// The table of the local file's alternatives. A new one is a folder under backend/ and a line
// here; the planner finds it by its role, the doctor lists it with its probe's verdict.
#include "backend/alternatives.hpp"

#include "backend/cufile/cufile_handle.hpp"
#include "backend/cufile/cufile_source.hpp"
#include "backend/direct/direct_source.hpp"
#include "backend/io_uring/io_uring_source.hpp"
#include "backend/registered/registered_source.hpp"
#include "shim/cufile.hpp"

namespace ferry::detail {
namespace {

bool write_only(open_mode m) { return m == open_mode::write || m == open_mode::append_write; }

std::unique_ptr<source> open_direct(const alternative_base& b, unavailable_reason& why) {
    if (write_only(b.mode)) {
        why = {.text = "opened for writing only", .cause = reason_code::opened_write_only};
        return nullptr;
    }
    return direct_source::open(b.path, why);
}

std::unique_ptr<source> open_cufile(const alternative_base& b, unavailable_reason& why) {
    if (auto no = cufile_probe(b.config)) {
        why = *no;
        return nullptr;
    }
    // Real GDS wants an O_DIRECT descriptor. In compatibility mode cuFile does POSIX I/O on the
    // descriptor it gets, so an O_DIRECT one would bypass the page cache (1.6 against 11 GB/s
    // hot on our measurements): hand it the buffered one unless O_DIRECT was asked for.
    int fd = b.fd;
    if (shim::cufile(b.config.cufile_library).direct_dma() || b.config.direct_io == direct_io_mode::on) {
        unavailable_reason ignored;
        if (auto* d = dynamic_cast<direct_source*>(b.sibling(b.owner, alternative_role::page_cache_bypass, ignored)))
            fd = d->fd();
    }
    return cufile_source::open(b.path, fd, b.mode != open_mode::read, why);
}

std::unique_ptr<source> open_io_uring(const alternative_base& b, unavailable_reason& why) {
    return open_io_uring_source(b.path, b.fd, b.mode, b.config, why);
}

// One line per alternative, in the order they open (cuFile may register the O_DIRECT descriptor,
// so it opens after it and closes before it).
const local_alternative table[] = {
    {"direct", alternative_role::page_cache_bypass,
     {.host_memory = true, .aligned = true}, nullptr, open_direct},
    {"cufile", alternative_role::device_dma,
     {.device_memory = true, .writes = true, .runtime_library = true}, cufile_probe, open_cufile,
     [](int fd) { return cufile_handle(fd).status(); }},
    // Found by the file's registration (backend/registered/), not opened by the posix source.
    {"registered", alternative_role::registered_pages,
     {.device_memory = true, .opened_per_file = false}, nullptr, nullptr, nullptr,
     [](int fd, std::string& changed) -> std::shared_ptr<source> { return find_registration(fd, changed); }},
    {"io_uring", alternative_role::batched_reads, {.host_memory = true}, io_uring_probe, open_io_uring},
};

}  // namespace

std::span<const local_alternative> local_alternatives() { return table; }

const local_alternative* find_alternative(std::string_view kind) {
    for (const auto& a : table)
        if (kind == a.kind) return &a;
    return nullptr;
}

const local_alternative* alternative_for(alternative_role role) {
    for (const auto& a : table)
        if (a.role == role) return &a;
    return nullptr;
}

}  // namespace ferry::detail
