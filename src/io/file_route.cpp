// Choosing a request's route: the facts about this file, its source and its engine handed to
// the planner (io/planner.cpp), the probes it may ask, and the plan logged once.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "backend/alternatives.hpp"
#include "backend/location.hpp"
#include "backend/registry.hpp"
#include "cuda/cuda_runtime.hpp"
#include "io/file_impl.hpp"
#include "log.hpp"
#include "os/sys.hpp"
#include "shim/cufile.hpp"

namespace ferry::detail {
namespace {

bool nvidia_fs_present() {
    return sys::access("/proc/driver/nvidia-fs/stats", F_OK) == 0 || sys::access("/dev/nvidia-fs0", F_OK) == 0;
}

}  // namespace

std::optional<unavailable_reason> file_impl::alternative_unusable(const local_alternative& a) {
    if (a.traits.aligned && direct_disabled_) {
        std::lock_guard lock(direct_mutex_);
        return unavailable_reason{.text = direct_disabled_why_, .cause = reason_code::direct_io_refused_at_read};
    }
    unavailable_reason why;
    source* d = source_->alternative(a.kind, why);
    if (!d) return why;
    if (!a.traits.aligned) return std::nullopt;
    std::size_t align = d->traits().align;
    if (align > 4096 || 4096 % align != 0 || engine_->staging().buffer_size() < 4 * align)
        return unavailable_reason{.text = "O_DIRECT alignment of " + std::to_string(align) +
                                          " bytes does not fit the staging buffers",
                                  .cause = reason_code::not_aligned};
    return std::nullopt;
}

void file_impl::disable_direct(const std::string& why) {
    {
        std::lock_guard lock(direct_mutex_);
        if (direct_disabled_) return;
        direct_disabled_why_ = why;
        direct_disabled_ = true;
    }
    fallback("O_DIRECT: " + why + "; reading buffered");
}

std::shared_ptr<source> file_impl::registration(std::string& changed) {
    const local_alternative* a = alternative_for(alternative_role::registered_pages);
    const int fd = source_->descriptor();
    if (!a || !a->find_registered || fd < 0) return nullptr;
    std::shared_ptr<source> now = a->find_registered(fd, changed);
    std::lock_guard lock(registered_mutex_);
    if (now) registered_ = now;
    return now;
}

source* file_impl::route_source(const route& r) {
    if (r.source == source_->kind()) return source_.get();
    if (const local_alternative* a = find_alternative(r.source); a && a->role == alternative_role::registered_pages) {
        std::lock_guard lock(registered_mutex_);
        if (registered_) return registered_.get();
    }
    unavailable_reason why;
    source* s = source_->alternative(r.source, why);
    if (!s) throw usage_error("internal: route through " + r.source + " without its source: " + why.text);
    return s;
}

plan_result file_impl::plan(memory_kind kind, std::size_t n, direction dir, lane_use lanes) {
    const bool local = source_->kind() == "posix";
    plan_facts f;
    f.memory = kind;
    f.size = n;
    f.dir = dir;
    f.source_kind = std::string(source_->kind());
    f.remote = source_->traits().remote;
    f.ranged = source_->traits().ranged;
    f.threads = config_.threads;
    f.direct_io = config_.direct_io;
    f.gds = config_.gds;
    f.io_uring = config_.io_uring;
    f.io_uring_queue_depth = config_.io_uring_queue_depth;
    f.gds_threshold = config_.gds_threshold;
    f.staging_buffers = engine_->staging().buffers_per_worker();
    f.staging_buffer_size = engine_->staging().buffer_size();
    f.lanes = lanes == lane_use::allowed ? engine_->lanes().count() : 0;
    f.lane_buffer_size = engine_->lanes().buffer_size();
    f.lane_threshold = config_.lane_threshold;
    f.cached_fraction = [this] { return source_->cached_fraction(); };
    f.nvidia_fs_loaded = [] { return nvidia_fs_present(); };
    f.nvfs_version = [this]() -> std::optional<std::pair<int, int>> {
        const shim::cufile_state& cf = shim::cufile(config_.cufile_library);
        if (!cf.direct_dma()) return std::nullopt;
        return std::pair<int, int>(cf.properties.nvfs.major_version, cf.properties.nvfs.minor_version);
    };
    // A local file offers the alternatives of backend/alternatives.cpp: those it opens itself,
    // and its registration, which is found by its descriptor.
    if (local)
        for (const local_alternative& a : local_alternatives()) {
            if (a.traits.opened_per_file)
                f.alternatives.push_back({&a, [this, &a] { return alternative_unusable(a); }});
            else if (a.role == alternative_role::registered_pages)
                f.alternatives.push_back({&a, [this]() -> std::optional<unavailable_reason> {
                                              std::string changed;
                                              if (registration(changed)) return std::nullopt;
                                              if (changed.empty()) return unavailable_reason{};
                                              return unavailable_reason{
                                                  .text = changed, .cause = reason_code::registration_changed};
                                          }});
        }
    plan_result p = plan_route(f);
    if (p.refusal) {
        bool cufile = std::any_of(p.reasons.begin(), p.reasons.end(),
                                  [](const reason& r) { return r.code == reason_code::cufile_unusable; });
        if (cufile)
            throw cufile_error(p.refusal->code, p.refusal->text, {shown_});
        throw usage_error(p.refusal->text + ": " + shown_);
    }
    for (const auto& r : p.reasons)
        if (r.fallback) fallback(r.text);
    return p;
}

void file_impl::log_plan_once(const plan_result& p, direction dir) {
    if (!log_enabled(log_level::info, config_)) return;
    std::string line = shown_ + ": " + (dir == direction::write ? "writes from " : "reads into ") +
                       "this memory take the " + std::string(to_string(p.chosen.counted_as)) + " path";
    for (const auto& r : p.reasons) line += "; " + r.text;
    {
        std::lock_guard lock(log_mutex_);
        if (!logged_.insert(line).second) return;
    }
    log(log_level::info, config_, line);
}

void file_impl::fallback(const std::string& reason) {
    note_process_fallback(reason);
    if (counters_.add_fallback(reason)) log(log_level::info, config_, shown_ + ": fallback: " + reason);
}

// ---- planning for the doctor ----

plan_result plan_read_route(const std::string& path, const settings& s) {
    struct stat st {};
    std::string target = path;
    std::string probe;
    if (!detail::location(path).is_url() && sys::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        probe = path + "/.ferry-probe-XXXXXX";
        std::vector<char> name(probe.begin(), probe.end());
        name.push_back('\0');
        int fd = sys::mkstemp(name.data());
        if (fd < 0) throw system_error(errno, "cannot create a probe file in", {path});
        // A few blocks, so that O_DIRECT and cuFile registration have data to look at.
        std::vector<char> zeros(1 << 16, 0);
        ssize_t w = sys::write(fd, zeros.data(), zeros.size());
        (void)w;
        sys::close(fd);
        target = probe = name.data();
    }
    plan_result p;
    try {
        auto f = std::make_shared<file_impl>(target, open_mode::read, s);
        // What a read of a large file into device memory would do; for residency, look at the
        // file itself (a fresh probe file is in the page cache).
        p = f->plan(cuda_available() ? memory_kind::device : memory_kind::host, std::size_t(1) << 30, direction::read);
        if (!cuda_available())
            p.reasons.insert(p.reasons.begin(), {reason_code::no_gpu, "no GPU: " + cuda_unavailable_reason(), false});
    } catch (...) {
        if (!probe.empty()) sys::unlink(probe.c_str());
        throw;
    }
    if (!probe.empty()) sys::unlink(probe.c_str());
    return p;
}

}  // namespace ferry::detail
