// ferry bench: measure, in one run, the ceilings (parallel pread into host memory, the pinned
// host -> device copy), the naive path (what cupy.fromfile does), and each ferry path over a
// sweep of thread counts and task sizes.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <iostream>
#include <optional>
#include <random>
#include <thread>

#include "bench_baselines.hpp"
#include "bench_scratch_files.hpp"
#include "cli_util.hpp"
#include "commands.hpp"
#include "ferry/array.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/memory.hpp"
#include "ferry/registered_file.hpp"
#include "ferry/version.hpp"

namespace ferry::cli {
namespace {

using clock = std::chrono::steady_clock;
using bench::directory_of;
using bench::evict;
using bench::generate;
using bench::naive;
using bench::raw_parallel_io;
using bench::scratch_files;
using bench::seconds_since;
using bench::warm;

struct bench_args {
    std::string path;
    std::string size = "1G";
    std::string device;
    std::vector<std::size_t> threads;
    std::vector<std::string> task_sizes;
    std::vector<std::string> buffer_sizes;
    std::vector<std::size_t> buffers;
    std::vector<std::size_t> lanes;
    std::vector<std::string> lane_sizes;
    std::vector<std::string> paths;
    int repeat = 3;
    bool cold = false;
    bool write = false;
    bool json = false;
    bool no_naive = false;
};

struct row {
    std::string kind;  // "ceiling", "baseline", "ferry"
    std::string name;
    std::size_t threads = 0;
    std::uint64_t task_size = 0;
    bool is_write = false;
    double gbps = 0;
    double seconds = 0;
    io_stats io;
    std::uint64_t buffer_size = 0;  // staging, for ferry rows
    std::size_t buffers = 0;
    bool lanes = false;             // buffer_size and buffers describe stream lanes
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

struct progress {
    bool on = ::isatty(2);
    int done = 0, total = 0;
    void step(const std::string& what) {
        ++done;
        if (!on) return;
        int width = 30, filled = total ? width * done / total : width;
        std::fprintf(stderr, "\r[%.*s%*s] %d/%d %-48.48s", filled, "##############################", width - filled, "",
                     done, total, what.c_str());
        if (done >= total) std::fprintf(stderr, "\n");
    }
};

struct path_config {
    std::string name;
    gds_mode gds;
    direct_io_mode direct;
    /// The routes a row of this path may count its bytes on (empty: any, for auto). A row whose
    /// bytes went elsewhere measured another route under this name: it is reported unavailable.
    std::vector<io_path> routes;
    bool on_stream = false;  ///< read_async on a CUDA stream (the stream lanes)
    std::size_t lane_threshold = lanes_off;  ///< reads without a stream: from this size through the lanes
    bool registered = false;  ///< the file registered once (ferry::registered_file) for this path's rows
    io_uring_mode io_uring = io_uring_mode::off;  ///< FERRY_IO_URING for this path's reads
    bool lanes() const noexcept { return on_stream || lane_threshold != lanes_off; }

    /// Empty when `io` moved bytes only on this path's routes, else why the row is not this path:
    /// the routes the bytes took and the fallbacks that sent them there.
    std::string took_another_route(const io_stats& io) const {
        if (routes.empty()) return {};
        std::string other;
        for (int i = 0; i < io_path_count; ++i) {
            const auto p = static_cast<io_path>(i);
            if (io.read[i].bytes + io.write[i].bytes == 0 || std::find(routes.begin(), routes.end(), p) != routes.end())
                continue;
            other += (other.empty() ? "" : ", ") + std::string(to_string(p));
        }
        if (other.empty()) return {};
        std::string why = "its bytes went through " + other;
        for (const auto& [reason, n] : io.fallbacks) why += "; " + reason;
        return why;
    }
};

// Refuses before the first byte of a scratch file is written, rather than filling the disk for
// minutes and failing (or leaving the machine without space) near the end.
void require_free_space(const std::string& dir, std::uint64_t need, const std::string& what) {
    struct statvfs v {};
    if (::statvfs(dir.c_str(), &v) != 0) throw system_error(errno, "cannot see the free space of", {dir});
    const std::uint64_t free = static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize;
    if (need > free)
        throw usage_error(what + " " + human_bytes(need) + " in " + dir + ", but " + human_bytes(free) +
                          " is free there (a smaller --size, or a file given to read, needs less)");
}

// What each path sweeps besides threads and tasks: the workers' staging buffers, or for the
// stream lanes their buffer size and count.
struct staging_variant {
    std::uint64_t size;
    std::size_t count;
};

/// The points of the sweep, from the arguments and the settings' defaults around them.
struct sweep {
    std::vector<std::size_t> threads;
    std::vector<std::uint64_t> tasks;
    std::vector<staging_variant> buffer_variants, lane_variants;
    std::size_t max_threads() const { return threads.back(); }
    const std::vector<staging_variant>& variants(const path_config& pc) const {
        return pc.lanes() ? lane_variants : buffer_variants;
    }
};

std::vector<std::uint64_t> parse_sizes(const std::vector<std::string>& texts, const char* option) {
    std::vector<std::uint64_t> out;
    for (const auto& t : texts) out.push_back(parse_bytes(t, option));
    return out;
}

sweep make_sweep(const bench_args& a, const settings& base, bool gpu) {
    sweep w;
    w.threads = a.threads;
    if (w.threads.empty()) w.threads = {std::max<std::size_t>(1, base.threads / 4), base.threads / 2, base.threads};
    std::sort(w.threads.begin(), w.threads.end());
    w.threads.erase(std::unique(w.threads.begin(), w.threads.end()), w.threads.end());
    w.threads.erase(std::remove(w.threads.begin(), w.threads.end(), 0u), w.threads.end());
    w.tasks = parse_sizes(a.task_sizes, "--task-size");
    if (w.tasks.empty()) w.tasks = {base.task_size / 4, base.task_size, base.task_size * 4};
    std::vector<std::uint64_t> buffer_sizes = parse_sizes(a.buffer_sizes, "--buffer-size");
    if (buffer_sizes.empty()) buffer_sizes = {base.staging_buffer_size};
    std::vector<std::size_t> buffers = a.buffers;
    if (buffers.empty()) buffers = {base.staging_buffers};
    std::vector<std::uint64_t> lane_sizes = parse_sizes(a.lane_sizes, "--lane-size");
    if (lane_sizes.empty()) lane_sizes = {base.lane_buffer_size};
    std::vector<std::size_t> lanes = a.lanes;
    if (lanes.empty()) lanes = {base.stream_lanes};
    if (!gpu) {  // reads into host memory use no staging buffers: nothing to sweep
        buffer_sizes.resize(1);
        buffers.resize(1);
    }
    for (std::uint64_t bs : buffer_sizes)
        for (std::size_t nb : buffers) w.buffer_variants.push_back({bs, nb});
    for (std::uint64_t ls : lane_sizes)
        for (std::size_t nl : lanes) w.lane_variants.push_back({ls, nl});
    return w;
}

/// The paths of --paths, each with the settings and routes it stands for; a path that cannot
/// serve the destination is refused here, before anything is written or read.
std::vector<path_config> make_paths(std::vector<std::string> paths, const bench_args& a, const settings& base,
                                    bool gpu) {
    std::vector<path_config> configs;
    if (paths.empty()) paths = gpu ? std::vector<std::string>{"staged", "lanes", "staged+direct", "cufile"}
                                   : std::vector<std::string>{"host", "direct"};
    // The paths into GPU memory are refused into host memory, where their bytes would go through
    // the host route: a row is named by the route its bytes took.
    const std::string no_gpu_memory =
        cuda_device_count() == 0 ? "no GPU: " + cuda_unavailable_reason() : "--device " + a.device;
    auto gpu_only = [&](const std::string& p, const std::string& what) {
        if (!gpu) throw usage_error("--paths " + p + ": " + what + " serves reads into GPU memory only, and here "
                                    "they go into host memory (" + no_gpu_memory + "); --paths host, direct or "
                                    "auto measure host memory");
    };
    const std::vector<io_path> staged_routes{io_path::staged};
    for (const auto& p : paths) {
        if (p == "host") configs.push_back({p, gds_mode::off, direct_io_mode::off, {io_path::host}});
        else if (p == "direct") configs.push_back({p, gds_mode::off, direct_io_mode::on, {io_path::direct}});
        else if (p == "staged") {
            gpu_only(p, "the staged path (pinned staging buffers, copied to the GPU)");
            configs.push_back({p, gds_mode::off, direct_io_mode::off, staged_routes});
        } else if (p == "staged+direct") {
            gpu_only(p, "the staged path (pinned staging buffers, copied to the GPU)");
            configs.push_back({p, gds_mode::off, direct_io_mode::on, {io_path::staged_direct}});
        } else if (p == "cufile" || p == "gds") {
            gpu_only(p, "cuFile");
            configs.push_back({p, gds_mode::on, direct_io_mode::off, {io_path::gds, io_path::cufile_compat}});
        } else if (p == "auto")
            configs.push_back({p, base.gds, base.direct_io, {}, false, base.lane_threshold, false, base.io_uring});
        else if (p == "io_uring")
            // The local file read through io_uring's batched submissions, against `host` (the
            // thread pool's preads) or `staged` into GPU memory.
            configs.push_back({p, gds_mode::off, direct_io_mode::off, {gpu ? io_path::staged : io_path::host}, false,
                               lanes_off, false, io_uring_mode::on});
        else if (p == "registered") {
            if (!gpu) throw usage_error("--paths registered: a registered file serves reads into GPU memory only");
            if (a.cold) throw usage_error("--paths registered: a registered file's pages stay pinned in the page cache, "
                                          "so --cold does not apply");
            configs.push_back({p, gds_mode::off, direct_io_mode::off, staged_routes, false, lanes_off, true});
        }
        else if (p == "stream" || p == "lanes") {
            if (!gpu) throw usage_error("--paths " + p + ": the stream lanes serve GPU memory only");
            if (p == "stream") configs.push_back({p, gds_mode::off, direct_io_mode::off, staged_routes, true});
            else configs.push_back({p, gds_mode::off, direct_io_mode::off, staged_routes, false, 0});
        } else
            throw usage_error("--paths: unknown path " + p +
                              " (staged, lanes, staged+direct, cufile, host, direct, auto, stream, registered, "
                              "io_uring)");
    }
    return configs;
}

/// The file to read, generated (and removed with `scratch`) unless one was given; its size.
std::uint64_t prepare_file(bench_args& a, scratch_files& scratch) {
    std::uint64_t size;
    if (a.path.empty()) {
        size = parse_bytes(a.size, "--size");
        if (size == 0) throw usage_error("--size: nothing to measure in an empty file");
        require_free_space(".", a.write ? 2 * size : size,
                           "--size " + human_bytes(size) + ": the generated file" +
                               (a.write ? " and the write target need" : " needs"));
        a.path = scratch.create(".");
        if (!a.json) std::fprintf(stderr, "writing %s of %s\n", a.path.c_str(), human_bytes(size).c_str());
        generate(a.path, size);
    } else {
        size = ferry::file(a.path).size();
        if (a.write) require_free_space(directory_of(a.path), size, "--write: the write target needs");
    }
    if (size == 0) throw usage_error("nothing to measure: " + a.path + " is empty");
    return size;
}

/// One `ferry bench` run: the memory it reads into, the rows measured so far, the paths found
/// unavailable. Each phase is a member: ceilings, reads, writes, then one of the two reports.
class bench_run {
public:
    bench_run(const bench_args& a, placement where, settings base, std::uint64_t size, sweep w)
        : a_(a), where_(where), gpu_(where.on_gpu()), base_(base), size_(size), sweep_(std::move(w)) {
        if (gpu_) {
            dev_ = device_buffer(size, where.device);
            pinned_ = pinned_buffer(size);
            host_mem_ = static_cast<char*>(pinned_.data());
        } else {
            host_.resize(size);
            host_mem_ = host_.data();
        }
        target_ = gpu_ ? static_cast<char*>(dev_.data()) : host_mem_;
    }

    void count_points(const std::vector<path_config>& configs) {
        int points = 0;
        for (const auto& pc : configs)
            points += static_cast<int>(sweep_.threads.size() * sweep_.tasks.size() * sweep_.variants(pc).size());
        bar_.total = 2 + points + (a_.write ? 4 : 0);
    }

    /// The parallel pread into host memory and, into GPU memory, the pinned copy and the naive path.
    void measure_ceilings() {
        double t_pread = measure([&] { return raw_parallel_io(a_.path, host_mem_, size_, sweep_.max_threads(), false); });
        rows_.push_back({"ceiling", "pread", sweep_.max_threads(), 4 << 20, false, gbps(size_, t_pread), t_pread, {}});
        bar_.step("pread ceiling");
        if (gpu_) {
            copy_memory(target_, host_mem_, size_);  // warm-up
            std::vector<double> times;
            for (int r = 0; r < a_.repeat; ++r) {
                auto t0 = clock::now();
                copy_memory(target_, host_mem_, size_);
                times.push_back(seconds_since(t0));
            }
            double t = median(times);
            pcie_ = gbps(size_, t);
            rows_.push_back({"ceiling", "pinned->device copy", 1, size_, false, pcie_, t, {}});
            if (!a_.no_naive) {
                double tn = measure([&] { return naive(a_.path, target_, size_); });
                rows_.push_back({"baseline", "naive (1 thread, pageable, copy)", 1, size_, false, gbps(size_, tn), tn, {}});
            }
        }
        bar_.step("copy ceiling, naive");
    }

    /// Every path over the sweep. Paths far below the best so far (e.g. O_DIRECT on hot data) are
    /// measured at one point of the sweep only: a full sweep of them would take minutes and teach
    /// nothing.
    void measure_reads(const std::vector<path_config>& configs) {
        double best_so_far = 0;
        for (const auto& pc : configs) {
            bool slow = false;
            // Registered for this path's rows only: while it lives every read of the file into GPU
            // memory takes the registration, whatever the settings.
            std::optional<registered_file> reg;
            if (pc.registered) {
                try {
                    reg.emplace(a_.path);
                    register_seconds_ = reg->seconds();
                } catch (const error& e) {
                    report_unavailable(pc.name, e.what());
                    slow = true;
                }
            }
            for (std::size_t th : sweep_.threads)
                for (std::uint64_t ts : sweep_.tasks)
                    for (const staging_variant& v : sweep_.variants(pc)) {
                        if (slow) {
                            bar_.step(pc.name + " (slow: one point)");
                            continue;
                        }
                        std::optional<row> r = measure_read(pc, th, ts, v);
                        if (!r) {
                            bar_.step(pc.name + " unavailable");
                            slow = true;
                            continue;
                        }
                        rows_.push_back(*r);
                        best_so_far = std::max(best_so_far, r->gbps);
                        slow = r->gbps < best_so_far / 4;
                        bar_.step(pc.name + " " + std::to_string(th) + " threads " + human_bytes(ts));
                    }
        }
    }

    /// The pwrite ceiling, then each path's write of the whole target to a new file.
    void measure_writes(const std::vector<path_config>& configs, scratch_files& scratch) {
        std::string out = scratch.create(directory_of(a_.path));
        auto write_once = [&](const std::function<double()>& once) {
            std::vector<double> times;
            for (int r = 0; r < a_.repeat; ++r) {
                ::unlink(out.c_str());
                times.push_back(once());
                evict(out);  // flush outside the timing so the next write starts clean
            }
            ::unlink(out.c_str());
            return median(times);
        };
        double tw = write_once([&] { return raw_parallel_io(out, host_mem_, size_, sweep_.max_threads(), true); });
        rows_.push_back({"ceiling", "pwrite", sweep_.max_threads(), 4 << 20, true, gbps(size_, tw), tw, {}});
        bar_.step("pwrite ceiling");
        for (const auto& pc : configs) {
            if (pc.direct == direct_io_mode::on) {
                bar_.step("");
                continue;  // writes are never O_DIRECT
            }
            settings s = base_;
            s.threads = sweep_.max_threads();
            s.gds = pc.gds;
            s.gds_threshold = 0;
            io_stats io;
            double t;
            try {
                t = write_once([&] {
                    ferry::file f(out, open_mode::write, s);
                    auto t0 = clock::now();
                    f.write(target_, size_, 0);
                    double d = seconds_since(t0);
                    io = f.stats();
                    return d;
                });
            } catch (const error& e) {
                report_unavailable("write " + pc.name, e.what());
                bar_.step("");
                continue;
            }
            if (std::string why = pc.took_another_route(io); !why.empty()) {
                report_unavailable("write " + pc.name, why);
                bar_.step("");
                continue;
            }
            rows_.push_back({"ferry", pc.name, sweep_.max_threads(), s.task_size, true, gbps(size_, t), t, io,
                             gpu_ ? s.staging_buffer_size : 0, gpu_ ? s.staging_buffers : 0});
            bar_.step("write " + pc.name);
        }
    }

    void finish_progress() {
        bar_.done = bar_.total - 1;
        bar_.step("done");
    }

    void report_json() const {
        const figures f = summary();
        struct utsname u {};
        ::uname(&u);
        nlohmann::json j;
        j["ferry_version"] = ferry::version();
        j["file"] = a_.path;
        j["bytes"] = size_;
        j["device"] = to_string(where_);
        j["cold"] = a_.cold;
        j["repeat"] = a_.repeat;
        j["kernel"] = std::string(u.release);
        j["cpus"] = std::thread::hardware_concurrency();
        j["staging_memory_peak"] = staging_memory_peak();
        j["staging_memory_limit"] = base_.staging_memory_limit;
        if (register_seconds_ >= 0) j["register_seconds"] = register_seconds_;
        nlohmann::json rs = nlohmann::json::array();
        for (const auto& r : rows_) {
            nlohmann::json e{{"kind", r.kind}, {"name", r.name}, {"threads", r.threads}, {"task_size", r.task_size},
                             {"write", r.is_write}, {"gbps", r.gbps}, {"seconds", r.seconds}};
            staging_json(r, e);
            if (r.kind == "ferry") {
                e["io"] = io_json(r.io);
                e["vs_pread"] = f.pread > 0 ? r.gbps / f.pread : 0;
                if (pcie_ > 0) e["vs_pcie"] = r.gbps / pcie_;
                if (f.naive > 0) e["vs_naive"] = r.gbps / f.naive;
                if (r.is_write && f.pwrite > 0) e["vs_pwrite"] = r.gbps / f.pwrite;
            }
            rs.push_back(e);
        }
        j["results"] = rs;
        nlohmann::json un = nlohmann::json::array();
        for (const auto& [name, why] : unavailable_) un.push_back({{"name", name}, {"reason", why}});
        j["unavailable"] = un;
        if (f.best) {
            j["best_read"] = {{"name", f.best->name}, {"threads", f.best->threads},
                              {"task_size", f.best->task_size}, {"gbps", f.best->gbps}};
            staging_json(*f.best, j["best_read"]);
        }
        std::cout << j.dump(2) << "\n";
    }

    void report_text() const {
        const figures f = summary();
        struct utsname u {};
        ::uname(&u);
        std::printf("ferry bench: %s, %s, %s, %s, median of %d, kernel %s, %u CPUs\n", a_.path.c_str(),
                    human_bytes(size_).c_str(), to_string(where_).c_str(),
                    a_.cold ? "cold (evicted before each read)" : "hot (page cache)", a_.repeat, u.release,
                    std::thread::hardware_concurrency());
        std::printf("%-44s %7s %9s %12s %9s %9s %9s  %s\n", "measurement", "threads", "task", "rate", "vs pread",
                    pcie_ > 0 ? "vs PCIe" : "", f.naive > 0 ? "vs naive" : "", "bytes by path");
        for (const auto& r : rows_) {
            std::string name = (r.is_write ? "write " : "") + r.name + (r.kind == "ceiling" ? " (ceiling)" : "");
            if (r.buffers && r.lanes) name += " [" + std::to_string(r.buffers) + " lanes, 2x" + human_bytes(r.buffer_size) + "]";
            else if (r.buffers) name += " [" + std::to_string(r.buffers) + "x" + human_bytes(r.buffer_size) + "]";
            char vs_pread[16] = "", vs_pcie[16] = "", vs_naive[16] = "";
            if (r.kind == "ferry") {
                double base_gbps = r.is_write ? f.pwrite : f.pread;
                if (base_gbps > 0) std::snprintf(vs_pread, sizeof vs_pread, "%.2fx", r.gbps / base_gbps);
                if (pcie_ > 0) std::snprintf(vs_pcie, sizeof vs_pcie, "%.2fx", r.gbps / pcie_);
                if (f.naive > 0 && !r.is_write) std::snprintf(vs_naive, sizeof vs_naive, "%.1fx", r.gbps / f.naive);
            }
            std::printf("%-44s %7zu %9s %12s %9s %9s %9s  %s\n", name.c_str(), r.threads,
                        r.kind == "ferry" || r.kind == "ceiling" ? human_bytes(r.task_size).c_str() : "",
                        rate_text(size_, r.seconds).c_str(), vs_pread,
                        vs_pcie, vs_naive, r.kind == "ferry" ? io_text(r.io).c_str() : "");
        }
        const row* best = f.best;
        if (best && best->buffers && best->lanes)
            std::printf("best read: %s, %zu threads, %zu stream lanes of 2 x %s: %s\n", best->name.c_str(),
                        best->threads, best->buffers, human_bytes(best->buffer_size).c_str(),
                        rate_text(size_, best->seconds).c_str());
        else if (best && best->buffers)
            std::printf("best read: %s, %zu threads, tasks of %s, %zu x %s staging buffers: %s\n",
                        best->name.c_str(), best->threads, human_bytes(best->task_size).c_str(), best->buffers,
                        human_bytes(best->buffer_size).c_str(), rate_text(size_, best->seconds).c_str());
        else if (best)
            std::printf("best read: %s, %zu threads, tasks of %s: %s\n", best->name.c_str(), best->threads,
                        human_bytes(best->task_size).c_str(), rate_text(size_, best->seconds).c_str());
        if (register_seconds_ >= 0)
            std::printf("registering the file (path registered) took %.3f s, outside the rows' timing\n",
                        register_seconds_);
        std::printf("peak pinned staging memory: %s (limit %s per engine)\n", human_bytes(staging_memory_peak()).c_str(),
                    human_bytes(base_.staging_memory_limit).c_str());
    }

private:
    /// The baselines the ratios divide by, and the fastest read.
    struct figures {
        double pread = 0, naive = 0, pwrite = 0;
        const row* best = nullptr;
    };

    figures summary() const {
        figures f;
        f.pread = rows_.front().gbps;
        for (const auto& r : rows_) {
            if (r.kind == "baseline") f.naive = r.gbps;
            if (r.kind == "ceiling" && r.is_write) f.pwrite = r.gbps;
            if (r.kind == "ferry" && !r.is_write && (!f.best || r.gbps > f.best->gbps)) f.best = &r;
        }
        return f;
    }

    static void staging_json(const row& r, nlohmann::json& e) {
        if (r.buffers && r.lanes) {
            e["lane_buffer_size"] = r.buffer_size;
            e["stream_lanes"] = r.buffers;
        } else if (r.buffers) {
            e["staging_buffer_size"] = r.buffer_size;
            e["staging_buffers"] = r.buffers;
        }
    }

    void prepare() const {
        if (a_.cold) evict(a_.path);
        else warm(a_.path, size_, sweep_.max_threads());
    }

    double measure(const std::function<double()>& once) const {
        std::vector<double> times;
        for (int r = 0; r < a_.repeat; ++r) {
            prepare();
            times.push_back(once());
        }
        return median(times);
    }

    /// One point of a path's sweep: a file opened with its settings, a warm-up read, then the
    /// median of the timed reads. Empty (and the path reported unavailable) where the engine
    /// refuses it or its bytes took another route.
    std::optional<row> measure_read(const path_config& pc, std::size_t threads, std::uint64_t task,
                                    const staging_variant& v) {
        settings s = base_;
        s.threads = threads;
        s.task_size = task;
        if (pc.lanes()) {
            s.lane_buffer_size = v.size;
            s.stream_lanes = v.count;
        } else {
            s.staging_buffer_size = v.size;
            s.staging_buffers = v.count;
        }
        s.gds = pc.gds;
        s.direct_io = pc.direct;
        s.io_uring = pc.io_uring;
        s.gds_threshold = 0;
        s.lane_threshold = pc.lane_threshold;
        std::optional<ferry::file> f;
        std::optional<ferry::stream> st;
        auto read_all = [&](std::uint64_t n) {
            if (pc.on_stream) f->read_async(target_, n, 0, st->get()).get();
            else f->read(target_, n, 0);
        };
        try {
            f.emplace(a_.path, open_mode::read, s);
            if (pc.on_stream) st.emplace(where_.on_gpu() ? where_.device : 0);
            read_all(std::min<std::uint64_t>(size_, 256u << 20));  // warm-up
        } catch (const error& e) {
            report_unavailable(pc.name, e.what());
            return std::nullopt;
        }
        io_stats before = f->stats();
        double t = measure([&] {
            auto t0 = clock::now();
            read_all(size_);
            return seconds_since(t0);
        });
        row r{"ferry", pc.name, threads, task, false, gbps(size_, t), t, f->stats() - before};
        if (std::string why = pc.took_another_route(r.io); !why.empty()) {
            report_unavailable(pc.name, why);
            return std::nullopt;
        }
        if (gpu_ && !pc.registered) {  // host reads and registered files use no staging buffers
            r.buffer_size = v.size;
            r.buffers = v.count;
            r.lanes = pc.lanes();
        }
        return r;
    }

    /// A path that measured nothing, with its reason (once per reason): refused by the engine,
    /// or serving its bytes through another route than its own.
    void report_unavailable(const std::string& name, const std::string& why) {
        for (const auto& [n, w] : unavailable_)
            if (n == name && w == why) return;
        unavailable_.emplace_back(name, why);
        if (!a_.json) std::fprintf(stderr, "\n%s: unavailable: %s\n", name.c_str(), why.c_str());
    }

    const bench_args& a_;
    placement where_;
    bool gpu_;
    settings base_;
    std::uint64_t size_;
    sweep sweep_;
    device_buffer dev_;
    pinned_buffer pinned_;
    std::vector<char> host_;
    char* host_mem_ = nullptr;
    char* target_ = nullptr;
    std::vector<row> rows_;
    std::vector<std::pair<std::string, std::string>> unavailable_;
    progress bar_;
    double pcie_ = 0;
    double register_seconds_ = -1;
};

int run_bench(bench_args a) {
    placement where = a.device.empty() ? (cuda_device_count() > 0 ? placement::cuda(0) : placement::host())
                                       : parse_placement(a.device);
    bool gpu = where.on_gpu();
    if (gpu && cuda_device_count() == 0) throw usage_error("--device " + a.device + ": " + cuda_unavailable_reason());
    settings base = settings::global().resolved();
    sweep w = make_sweep(a, base, gpu);
    std::vector<path_config> configs = make_paths(a.paths, a, base, gpu);
    scratch_files scratch;
    std::uint64_t size = prepare_file(a, scratch);

    bench_run run(a, where, base, size, std::move(w));
    run.count_points(configs);
    run.measure_ceilings();
    run.measure_reads(configs);
    if (a.write) run.measure_writes(configs, scratch);
    run.finish_progress();
    if (a.json) run.report_json();
    else run.report_text();
    return exit_ok;
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto a = std::make_shared<bench_args>();
    CLI::App* c = app.add_subcommand("bench", "Measure ferry's paths against the hardware ceilings, in one run");
    c->add_option("file", a->path, "file to read (default: generate ferry-bench-XXXXXX.bin of --size here, removed after)");
    c->add_option("--size", a->size, "size of the generated file (default 1G)");
    c->add_option("--device", a->device, device_help);
    c->add_option("--threads", a->threads, "thread counts to sweep, e.g. 4,8,16")->delimiter(',')->check(non_negative);
    c->add_option("--task-size", a->task_sizes, "task sizes to sweep, e.g. 8M,32M,128M")->delimiter(',');
    c->add_option("--buffer-size", a->buffer_sizes, "staging buffer sizes to sweep, e.g. 1M,4M")->delimiter(',');
    c->add_option("--buffers", a->buffers, "staging buffers per thread to sweep, e.g. 2,4")->delimiter(',')->check(non_negative);
    c->add_option("--lanes", a->lanes, "stream lanes per device to sweep (lanes, stream paths), e.g. 4,8")->delimiter(',')->check(CLI::Range(1, 64));
    c->add_option("--lane-size", a->lane_sizes, "stream lane buffer sizes to sweep (lanes, stream paths), e.g. 8M,16M")->delimiter(',');
    c->add_option("--paths", a->paths, "paths: staged (the workers' own buffers), lanes (the stream lanes), staged+direct, cufile, host, direct, auto (the planner's choice), stream (read_async on a CUDA stream), registered (the file registered once, ferry::registered_file), io_uring (FERRY_IO_URING=on: batched submissions per worker)")->delimiter(',');
    c->add_option("--repeat", a->repeat, "runs per measurement; the median is reported (default 3)")
        ->check(CLI::Range(1, 100));
    c->add_flag("--cold", a->cold, "evict the file from the page cache before each read");
    c->add_flag("--write", a->write, "also measure writes from GPU memory to a file");
    c->add_flag("--json", a->json, "print one JSON object");
    c->add_flag("--no-naive", a->no_naive, "skip the naive baseline (one thread, pageable memory, one copy)");
    c->callback([a] { run_bench(*a); });
}

}  // namespace ferry::cli
