#include "io/planner.hpp"

#include <optional>

namespace ferry::detail {

std::string bytes_text(std::uint64_t n) {
    if (n >= (1ull << 30) && n % (1ull << 30) == 0) return std::to_string(n >> 30) + " GiB";
    if (n >= (1ull << 20) && n % (1ull << 20) == 0) return std::to_string(n >> 20) + " MiB";
    if (n >= (1ull << 10) && n % (1ull << 10) == 0) return std::to_string(n >> 10) + " KiB";
    return std::to_string(n) + " bytes";
}

std::vector<std::string> plan_result::texts() const {
    std::vector<std::string> v;
    v.reserve(reasons.size());
    for (const auto& r : reasons) v.push_back(r.text);
    return v;
}

std::vector<plan_reason> plan_result::codes() const {
    std::vector<plan_reason> v;
    v.reserve(reasons.size());
    for (const auto& r : reasons) v.push_back({r.code, r.cause});
    return v;
}

const plan_facts::offer* plan_facts::offered(alternative_role role) const {
    for (const auto& o : alternatives)
        if (o.entry && o.entry->role == role) return &o;
    return nullptr;
}

namespace {

// One call of plan_route, in its steps: the reader of the file (buffered, O_DIRECT or io_uring),
// then the mover by the destination (host memory, a registered file, staged, cuFile). Each step
// adds its reasons to the plan; the page-cache residency is probed at most once.
class route_planning {
public:
    explicit route_planning(const plan_facts& f) : f(f), is_write(f.dir == direction::write) {}

    plan_result run() {
        if (!f.ranged)
            say(reason_code::no_ranges,
                "the server does not serve byte ranges (no Range support): each read is one plain GET of the "
                "object, streamed from its first byte, not parallel ranged GETs",
                true);
        choose_direct();
        choose_batched();
        reader = want_direct    ? bypass->entry->kind
                 : want_batched ? batched->entry->kind
                                : f.source_kind;
        plan_result out = f.memory == memory_kind::host || f.memory == memory_kind::pinned ? host()
                          : registered()                                                   ? p
                                                                                           : device();
        if (batched_not_faster) out.reasons.push_back(*batched_not_faster);
        return out;
    }

private:
    void say(reason_code c, std::string text, bool fallback = false, reason_code cause = reason_code::none) {
        p.reasons.push_back({c, std::move(text), fallback});
        p.reasons.back().cause = cause;
    }

    double resident() {
        if (!resident_seen) resident_seen = f.cached_fraction ? f.cached_fraction() : -1;
        return *resident_seen;
    }

    // Reads: buffered or O_DIRECT.
    void choose_direct() {
        bypass = f.offered(alternative_role::page_cache_bypass);
        if (is_write || !bypass) return;
        if (f.direct_io == direct_io_mode::on) {
            want_direct = true;
            say(reason_code::direct_io_on, "FERRY_DIRECT_IO=on");
        } else if (f.direct_io == direct_io_mode::auto_) {
            double r = resident();
            want_direct = r >= 0 && r < 0.5;
            if (r < 0) say(reason_code::residency_unknown, "page-cache residency unknown: buffered reads");
            else
                say(reason_code::residency, std::to_string(static_cast<int>(r * 100)) +
                                                "% of the file is in the page cache: " +
                                                (want_direct ? "O_DIRECT reads" : "buffered reads"));
        }
        if (want_direct) {
            std::optional<unavailable_reason> no = bypass->usable ? bypass->usable() : std::nullopt;
            if (no) {
                want_direct = false;
                say(reason_code::direct_unusable, "O_DIRECT unusable: " + no->text, false, no->cause);
            }
        }
    }

    // Reads through batched submissions (io_uring): only when FERRY_IO_URING=on. `auto` does not
    // take them: where measured (docs/benchmarks.md), io_uring read hot files no faster than the
    // thread pool's preads (a memory copy either way, and the pool keeps a read in flight per
    // worker), and many small cold files slower. Where it could serve, the plan says so last, so
    // that a reader of the plan knows why it is not taken.
    void choose_batched() {
        batched = f.offered(alternative_role::batched_reads);
        if (is_write || want_direct || !batched) return;
        if (f.io_uring == io_uring_mode::auto_) {
            if (batched->usable && !batched->usable())
                batched_not_faster = reason{reason_code::io_uring_not_faster,
                                            "io_uring could serve, but " + std::string(io_uring_not_faster_text)};
            return;
        }
        if (f.io_uring != io_uring_mode::on) return;
        std::optional<unavailable_reason> no = batched->usable ? batched->usable() : std::nullopt;
        if (no) {
            p.refusal = unavailable_reason{"FERRY_IO_URING=on but io_uring cannot be used: " + no->text, 0};
            say(reason_code::io_uring_on, "FERRY_IO_URING=on but io_uring cannot be used: " + no->text, false,
                no->cause);
        } else {
            want_batched = true;
            say(reason_code::io_uring_on, "FERRY_IO_URING=on: reads through io_uring, " +
                                              std::to_string(f.io_uring_queue_depth) + " in flight per thread");
        }
    }

    plan_result host() {
        p.chosen = {reader, mover::host, want_direct ? io_path::direct : io_path::host};
        p.reasons.insert(p.reasons.begin(),
                         {reason_code::host_memory,
                          std::string(to_string(f.memory)) + " memory: parallel " + (is_write ? "pwrite" : "pread") +
                              " on " + std::to_string(f.threads) + " threads",
                          false});
        return p;
    }

    // A registered file (ferry::registered_file): its pinned page-cache pages go to the GPU by
    // DMA, with no staging copy. Not where the settings ask for cuFile only or for O_DIRECT.
    bool registered() {
        const plan_facts::offer* pages = f.offered(alternative_role::registered_pages);
        if (is_write || f.memory != memory_kind::device || !pages || !pages->usable || f.gds == gds_mode::on ||
            want_direct)
            return false;
        std::optional<unavailable_reason> no = pages->usable();
        if (!no) {
            p.chosen = {pages->entry->kind, mover::device_dma, io_path::staged};
            say(reason_code::registered, "the file is registered (ferry::registered_file): one DMA per piece "
                                         "from its pinned page-cache pages, no staging copy");
            return true;
        }
        if (no->cause != reason_code::none)
            say(reason_code::registered,
                "the file is registered, but " + no->text + ": not read through the registration", false, no->cause);
        return false;
    }

    plan_result& use_staged(reason_code c, std::string why, bool fallback) {
        p.chosen = {reader, mover::staged, want_direct ? io_path::staged_direct : io_path::staged};
        say(c, std::move(why), fallback);
        std::string staging = std::to_string(f.threads) + " threads, " + std::to_string(f.staging_buffers) +
                              " x " + bytes_text(f.staging_buffer_size) + " pinned buffers each";
        say(reason_code::staging, "staged: " + staging);
        p.reasons.back().detail = std::move(staging);
        // A large read into device memory: the lanes' few large copies beat many small ones
        // from the workers' own buffers (docs/benchmarks.md). Their file side reads buffered.
        // Not for a remote source: the lanes keep about one read per lane ahead, where a
        // source of round trips wants its full concurrency of ranged GETs in flight, which the
        // workers' own buffers give it.
        // Nor for a file mostly out of the page cache: there the disk sets the pace, and each
        // worker's own buffered stream (with its readahead) kept it busier than the lanes' reads
        // (cold 8 GiB on the H200 machine: 1.17x against 0.97x a parallel pread).
        const bool large = !is_write && !want_direct && !want_batched && f.memory == memory_kind::device &&
                           f.gds != gds_mode::on &&
                           f.lanes > 0 && f.lane_threshold != lanes_off && f.size >= f.lane_threshold;
        if (!large) return p;
        if (f.remote) {
            say(reason_code::staging, "remote source: each thread keeps its own ranged GET in flight "
                                      "(the stream lanes would keep about one per lane)");
            return p;
        }
        if (const double r = resident(); r >= 0 && r < 0.5) {
            say(reason_code::residency, std::to_string(static_cast<int>(r * 100)) +
                                            "% of the file is in the page cache: each thread reads its own "
                                            "stream from the disk (the stream lanes are for cached files)");
            return p;
        }
        p.chosen.how = mover::lanes;
        say(reason_code::stream_lanes,
            "a read of " + bytes_text(f.size) + " (at least FERRY_LANE_THRESHOLD, " + bytes_text(f.lane_threshold) +
                ") goes through " + std::to_string(f.lanes) + " stream lanes of 2 x " +
                bytes_text(f.lane_buffer_size) + " pinned buffers, filled by all " + std::to_string(f.threads) +
                " threads: fewer, larger copies to the GPU");
        return p;
    }

    // Into device or managed memory: staged through pinned buffers, or cuFile.
    plan_result device() {
        if (f.memory == memory_kind::managed)
            return use_staged(reason_code::managed_memory, "managed memory: cuFile reads only into device memory",
                              false);
        if (f.gds == gds_mode::off) return use_staged(reason_code::gds_off, "FERRY_GDS=off", false);
        if (f.size < f.gds_threshold)
            return use_staged(reason_code::below_gds_threshold,
                              "request of " + bytes_text(f.size) + " is below FERRY_GDS_THRESHOLD (" +
                                  bytes_text(f.gds_threshold) + ")",
                              false);
        const plan_facts::offer* dma = f.offered(alternative_role::device_dma);
        if (!dma) {
            std::string why = f.source_kind + " source cannot move bytes to the GPU itself";
            if (f.gds == gds_mode::on) p.refusal = unavailable_reason{"FERRY_GDS=on but " + why, 0};
            return use_staged(reason_code::no_device_dma, why, false);
        }
        if (f.gds == gds_mode::auto_ && !(f.nvidia_fs_loaded && f.nvidia_fs_loaded()))
            return use_staged(reason_code::no_nvidia_fs,
                              "GPUDirect Storage: nvidia-fs is not loaded (no /proc/driver/nvidia-fs), so cuFile "
                              "could only run in compatibility mode, slower than the staged path",
                              true);
        std::optional<unavailable_reason> no = dma->usable ? dma->usable() : unavailable_reason{"cuFile not probed", 0};
        if (no) {
            if (f.gds == gds_mode::on)
                p.refusal = unavailable_reason{"FERRY_GDS=on but cuFile cannot be used: " + no->text, no->code};
            plan_result& r = use_staged(reason_code::cufile_unusable, "GPUDirect Storage unusable: " + no->text, true);
            reason& said = r.reasons[r.reasons.size() - 2];
            said.status = no->code;
            said.udev_missing = no->udev_missing;
            said.cause = no->cause;
            return r;
        }
        if (auto v = f.nvfs_version ? f.nvfs_version() : std::nullopt) {
            p.chosen = {dma->entry->kind, mover::device_dma, io_path::gds};
            say(reason_code::gds_direct_dma, "GPUDirect Storage: cuFile with nvidia-fs " + std::to_string(v->first) +
                                                 "." + std::to_string(v->second));
            return p;
        }
        if (f.gds == gds_mode::on) {
            p.chosen = {dma->entry->kind, mover::device_dma, io_path::cufile_compat};
            say(reason_code::cufile_compat_forced,
                "FERRY_GDS=on: cuFile in compatibility mode (nvidia-fs not loaded: POSIX I/O "
                "and copies inside cuFile, not GPUDirect Storage)");
            return p;
        }
        return use_staged(reason_code::cufile_compat_slower,
                          "GPUDirect Storage: cuFile would run in compatibility mode (nvidia-fs 0.0)", true);
    }

    const plan_facts& f;
    const bool is_write;
    plan_result p;
    std::optional<double> resident_seen;
    const plan_facts::offer* bypass = nullptr;
    const plan_facts::offer* batched = nullptr;
    bool want_direct = false;
    bool want_batched = false;
    std::optional<reason> batched_not_faster;  ///< said last: io_uring could serve, auto keeps the pool
    std::string reader;
};

}  // namespace

plan_result plan_route(const plan_facts& f) { return route_planning(f).run(); }

}  // namespace ferry::detail
