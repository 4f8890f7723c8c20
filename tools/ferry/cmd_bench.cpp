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

int run_bench(bench_args a) {
    placement where = a.device.empty() ? (cuda_device_count() > 0 ? placement::cuda(0) : placement::host())
                                       : parse_placement(a.device);
    bool gpu = where.on_gpu();
    if (gpu && cuda_device_count() == 0) throw usage_error("--device " + a.device + ": " + cuda_unavailable_reason());
    settings base = settings::global().resolved();
    if (a.threads.empty()) a.threads = {std::max<std::size_t>(1, base.threads / 4), base.threads / 2, base.threads};
    std::sort(a.threads.begin(), a.threads.end());
    a.threads.erase(std::unique(a.threads.begin(), a.threads.end()), a.threads.end());
    a.threads.erase(std::remove(a.threads.begin(), a.threads.end(), 0u), a.threads.end());
    std::vector<std::uint64_t> tasks;
    for (const auto& t : a.task_sizes) tasks.push_back(parse_bytes(t, "--task-size"));
    if (tasks.empty()) tasks = {base.task_size / 4, base.task_size, base.task_size * 4};
    std::vector<std::uint64_t> buffer_sizes;
    for (const auto& t : a.buffer_sizes) buffer_sizes.push_back(parse_bytes(t, "--buffer-size"));
    if (buffer_sizes.empty()) buffer_sizes = {base.staging_buffer_size};
    if (a.buffers.empty()) a.buffers = {base.staging_buffers};
    std::vector<std::uint64_t> lane_sizes;
    for (const auto& t : a.lane_sizes) lane_sizes.push_back(parse_bytes(t, "--lane-size"));
    if (lane_sizes.empty()) lane_sizes = {base.lane_buffer_size};
    if (a.lanes.empty()) a.lanes = {base.stream_lanes};
    if (!gpu) {  // reads into host memory use no staging buffers: nothing to sweep
        buffer_sizes.resize(1);
        a.buffers.resize(1);
    }
    // What each path sweeps besides threads and tasks: the workers' staging buffers, or for the
    // stream lanes their buffer size and count.
    struct staging_variant {
        std::uint64_t size;
        std::size_t count;
    };
    std::vector<staging_variant> buffer_variants, lane_variants;
    for (std::uint64_t bs : buffer_sizes)
        for (std::size_t nb : a.buffers) buffer_variants.push_back({bs, nb});
    for (std::uint64_t ls : lane_sizes)
        for (std::size_t nl : a.lanes) lane_variants.push_back({ls, nl});
    std::size_t max_threads = a.threads.back();

    std::vector<path_config> configs;
    if (a.paths.empty()) a.paths = gpu ? std::vector<std::string>{"staged", "lanes", "staged+direct", "cufile"}
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
    for (const auto& p : a.paths) {
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
        } else if (p == "auto") configs.push_back({p, base.gds, base.direct_io, {}, false, base.lane_threshold});
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
                              " (staged, lanes, staged+direct, cufile, host, direct, auto, stream, registered)");
    }

    scratch_files scratch;
    bool generated = a.path.empty();
    std::uint64_t size;
    if (generated) {
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

    device_buffer dev;
    pinned_buffer pinned;
    std::vector<char> host;
    char* host_mem = nullptr;
    if (gpu) {
        dev = device_buffer(size, where.device);
        pinned = pinned_buffer(size);
        host_mem = static_cast<char*>(pinned.data());
    } else {
        host.resize(size);
        host_mem = host.data();
    }
    char* target = gpu ? static_cast<char*>(dev.data()) : host_mem;

    std::vector<row> rows;
    // Paths that measured nothing, each with its reason: refused by the engine, or serving its
    // bytes through another route than its own.
    std::vector<std::pair<std::string, std::string>> unavailable;
    auto report_unavailable = [&](const std::string& name, const std::string& why) {
        for (const auto& [n, w] : unavailable)
            if (n == name && w == why) return;
        unavailable.emplace_back(name, why);
        if (!a.json) std::fprintf(stderr, "\n%s: unavailable: %s\n", name.c_str(), why.c_str());
    };
    progress bar;
    int points = 0;
    for (const auto& pc : configs)
        points += static_cast<int>(a.threads.size() * tasks.size() *
                                   (pc.lanes() ? lane_variants.size() : buffer_variants.size()));
    bar.total = 2 + points + (a.write ? 4 : 0);
    auto prepare = [&] {
        if (a.cold) evict(a.path);
        else warm(a.path, size, max_threads);
    };
    auto measure = [&](const std::function<double()>& once) {
        std::vector<double> times;
        for (int r = 0; r < a.repeat; ++r) {
            prepare();
            times.push_back(once());
        }
        return median(times);
    };

    double t_pread = measure([&] { return raw_parallel_io(a.path, host_mem, size, max_threads, false); });
    rows.push_back({"ceiling", "pread", max_threads, 4 << 20, false, gbps(size, t_pread), t_pread, {}});
    bar.step("pread ceiling");
    double pcie = 0;
    if (gpu) {
        copy_memory(target, host_mem, size);  // warm-up
        std::vector<double> times;
        for (int r = 0; r < a.repeat; ++r) {
            auto t0 = clock::now();
            copy_memory(target, host_mem, size);
            times.push_back(seconds_since(t0));
        }
        double t = median(times);
        pcie = gbps(size, t);
        rows.push_back({"ceiling", "pinned->device copy", 1, size, false, pcie, t, {}});
        if (!a.no_naive) {
            double tn = measure([&] { return naive(a.path, target, size); });
            rows.push_back({"baseline", "naive (1 thread, pageable, copy)", 1, size, false, gbps(size, tn), tn, {}});
        }
    }
    bar.step("copy ceiling, naive");

    // Paths far below the best so far (e.g. O_DIRECT on hot data) are measured at one point of
    // the sweep only: a full sweep of them would take minutes and teach nothing.
    double best_so_far = 0;
    double register_seconds = -1;
    for (const auto& pc : configs) {
        bool slow = false;
        // Registered for this path's rows only: while it lives every read of the file into GPU
        // memory takes the registration, whatever the settings.
        std::optional<registered_file> reg;
        if (pc.registered) {
            try {
                reg.emplace(a.path);
                register_seconds = reg->seconds();
            } catch (const error& e) {
                report_unavailable(pc.name, e.what());
                slow = true;
            }
        }
        for (std::size_t th : a.threads)
            for (std::uint64_t ts : tasks)
                for (const staging_variant& v : pc.lanes() ? lane_variants : buffer_variants) {
                        if (slow) {
                            bar.step(pc.name + " (slow: one point)");
                            continue;
                        }
                        settings s = base;
                        s.threads = th;
                        s.task_size = ts;
                        if (pc.lanes()) {
                            s.lane_buffer_size = v.size;
                            s.stream_lanes = v.count;
                        } else {
                            s.staging_buffer_size = v.size;
                            s.staging_buffers = v.count;
                        }
                        s.gds = pc.gds;
                        s.direct_io = pc.direct;
                        s.gds_threshold = 0;
                        s.lane_threshold = pc.lane_threshold;
                        std::optional<ferry::file> f;
                        std::optional<ferry::stream> st;
                        auto read_all = [&](std::uint64_t n) {
                            if (pc.on_stream) f->read_async(target, n, 0, st->get()).get();
                            else f->read(target, n, 0);
                        };
                        try {
                            f.emplace(a.path, open_mode::read, s);
                            if (pc.on_stream) st.emplace(where.on_gpu() ? where.device : 0);
                            read_all(std::min<std::uint64_t>(size, 256u << 20));  // warm-up
                        } catch (const error& e) {
                            report_unavailable(pc.name, e.what());
                            bar.step(pc.name + " unavailable");
                            slow = true;
                            continue;
                        }
                        io_stats before = f->stats();
                        double t = measure([&] {
                            auto t0 = clock::now();
                            read_all(size);
                            return seconds_since(t0);
                        });
                        row r{"ferry", pc.name, th, ts, false, gbps(size, t), t, f->stats() - before};
                        if (std::string why = pc.took_another_route(r.io); !why.empty()) {
                            report_unavailable(pc.name, why);
                            bar.step(pc.name + " unavailable");
                            slow = true;
                            continue;
                        }
                        if (gpu && !pc.registered) {  // host reads and registered files use no staging buffers
                            r.buffer_size = v.size;
                            r.buffers = v.count;
                            r.lanes = pc.lanes();
                        }
                        rows.push_back(r);
                        best_so_far = std::max(best_so_far, r.gbps);
                        slow = r.gbps < best_so_far / 4;
                        bar.step(pc.name + " " + std::to_string(th) + " threads " + human_bytes(ts));
                    }
    }

    if (a.write) {
        std::string out = scratch.create(directory_of(a.path));
        auto write_once = [&](const std::function<double()>& once) {
            std::vector<double> times;
            for (int r = 0; r < a.repeat; ++r) {
                ::unlink(out.c_str());
                times.push_back(once());
                evict(out);  // flush outside the timing so the next write starts clean
            }
            ::unlink(out.c_str());
            return median(times);
        };
        double tw = write_once([&] { return raw_parallel_io(out, host_mem, size, max_threads, true); });
        rows.push_back({"ceiling", "pwrite", max_threads, 4 << 20, true, gbps(size, tw), tw, {}});
        bar.step("pwrite ceiling");
        for (const auto& pc : configs) {
            if (pc.direct == direct_io_mode::on) {
                bar.step("");
                continue;  // writes are never O_DIRECT
            }
            settings s = base;
            s.threads = max_threads;
            s.gds = pc.gds;
            s.gds_threshold = 0;
            io_stats io;
            double t;
            try {
                t = write_once([&] {
                    ferry::file f(out, open_mode::write, s);
                    auto t0 = clock::now();
                    f.write(target, size, 0);
                    double d = seconds_since(t0);
                    io = f.stats();
                    return d;
                });
            } catch (const error& e) {
                report_unavailable("write " + pc.name, e.what());
                bar.step("");
                continue;
            }
            if (std::string why = pc.took_another_route(io); !why.empty()) {
                report_unavailable("write " + pc.name, why);
                bar.step("");
                continue;
            }
            rows.push_back({"ferry", pc.name, max_threads, s.task_size, true, gbps(size, t), t, io,
                            gpu ? s.staging_buffer_size : 0, gpu ? s.staging_buffers : 0});
            bar.step("write " + pc.name);
        }
    }
    bar.done = bar.total - 1;
    bar.step("done");

    double pread_gbps = rows.front().gbps;
    double naive_gbps = 0, pwrite_gbps = 0;
    for (const auto& r : rows) {
        if (r.kind == "baseline") naive_gbps = r.gbps;
        if (r.kind == "ceiling" && r.is_write) pwrite_gbps = r.gbps;
    }
    const row* best = nullptr;
    for (const auto& r : rows)
        if (r.kind == "ferry" && !r.is_write && (!best || r.gbps > best->gbps)) best = &r;

    struct utsname u {};
    ::uname(&u);
    if (a.json) {
        nlohmann::json j;
        j["ferry_version"] = ferry::version();
        j["file"] = a.path;
        j["bytes"] = size;
        j["device"] = to_string(where);
        j["cold"] = a.cold;
        j["repeat"] = a.repeat;
        j["kernel"] = std::string(u.release);
        j["cpus"] = std::thread::hardware_concurrency();
        j["staging_memory_peak"] = staging_memory_peak();
        j["staging_memory_limit"] = base.staging_memory_limit;
        if (register_seconds >= 0) j["register_seconds"] = register_seconds;
        nlohmann::json rs = nlohmann::json::array();
        for (const auto& r : rows) {
            nlohmann::json e{{"kind", r.kind}, {"name", r.name}, {"threads", r.threads}, {"task_size", r.task_size},
                             {"write", r.is_write}, {"gbps", r.gbps}, {"seconds", r.seconds}};
            if (r.buffers && r.lanes) {
                e["lane_buffer_size"] = r.buffer_size;
                e["stream_lanes"] = r.buffers;
            } else if (r.buffers) {
                e["staging_buffer_size"] = r.buffer_size;
                e["staging_buffers"] = r.buffers;
            }
            if (r.kind == "ferry") {
                e["io"] = io_json(r.io);
                e["vs_pread"] = pread_gbps > 0 ? r.gbps / pread_gbps : 0;
                if (pcie > 0) e["vs_pcie"] = r.gbps / pcie;
                if (naive_gbps > 0) e["vs_naive"] = r.gbps / naive_gbps;
                if (r.is_write && pwrite_gbps > 0) e["vs_pwrite"] = r.gbps / pwrite_gbps;
            }
            rs.push_back(e);
        }
        j["results"] = rs;
        nlohmann::json un = nlohmann::json::array();
        for (const auto& [name, why] : unavailable) un.push_back({{"name", name}, {"reason", why}});
        j["unavailable"] = un;
        if (best) {
            j["best_read"] = {{"name", best->name}, {"threads", best->threads}, {"task_size", best->task_size},
                              {"gbps", best->gbps}};
            if (best->buffers && best->lanes) {
                j["best_read"]["lane_buffer_size"] = best->buffer_size;
                j["best_read"]["stream_lanes"] = best->buffers;
            } else if (best->buffers) {
                j["best_read"]["staging_buffer_size"] = best->buffer_size;
                j["best_read"]["staging_buffers"] = best->buffers;
            }
        }
        std::cout << j.dump(2) << "\n";
        return exit_ok;
    }
    std::printf("ferry bench: %s, %s, %s, %s, median of %d, kernel %s, %u CPUs\n", a.path.c_str(),
                human_bytes(size).c_str(), to_string(where).c_str(), a.cold ? "cold (evicted before each read)" : "hot (page cache)",
                a.repeat, u.release, std::thread::hardware_concurrency());
    std::printf("%-44s %7s %9s %12s %9s %9s %9s  %s\n", "measurement", "threads", "task", "rate", "vs pread",
                pcie > 0 ? "vs PCIe" : "", naive_gbps > 0 ? "vs naive" : "", "bytes by path");
    for (const auto& r : rows) {
        std::string name = (r.is_write ? "write " : "") + r.name + (r.kind == "ceiling" ? " (ceiling)" : "");
        if (r.buffers && r.lanes) name += " [" + std::to_string(r.buffers) + " lanes, 2x" + human_bytes(r.buffer_size) + "]";
        else if (r.buffers) name += " [" + std::to_string(r.buffers) + "x" + human_bytes(r.buffer_size) + "]";
        char vs_pread[16] = "", vs_pcie[16] = "", vs_naive[16] = "";
        if (r.kind == "ferry") {
            double base_gbps = r.is_write ? pwrite_gbps : pread_gbps;
            if (base_gbps > 0) std::snprintf(vs_pread, sizeof vs_pread, "%.2fx", r.gbps / base_gbps);
            if (pcie > 0) std::snprintf(vs_pcie, sizeof vs_pcie, "%.2fx", r.gbps / pcie);
            if (naive_gbps > 0 && !r.is_write) std::snprintf(vs_naive, sizeof vs_naive, "%.1fx", r.gbps / naive_gbps);
        }
        std::printf("%-44s %7zu %9s %12s %9s %9s %9s  %s\n", name.c_str(), r.threads,
                    r.kind == "ferry" || r.kind == "ceiling" ? human_bytes(r.task_size).c_str() : "",
                    rate_text(size, r.seconds).c_str(), vs_pread,
                    vs_pcie, vs_naive, r.kind == "ferry" ? io_text(r.io).c_str() : "");
    }
    if (best && best->buffers && best->lanes)
        std::printf("best read: %s, %zu threads, %zu stream lanes of 2 x %s: %s\n", best->name.c_str(),
                    best->threads, best->buffers, human_bytes(best->buffer_size).c_str(),
                    rate_text(size, best->seconds).c_str());
    else if (best && best->buffers)
        std::printf("best read: %s, %zu threads, tasks of %s, %zu x %s staging buffers: %s\n",
                    best->name.c_str(), best->threads, human_bytes(best->task_size).c_str(), best->buffers,
                    human_bytes(best->buffer_size).c_str(), rate_text(size, best->seconds).c_str());
    else if (best)
        std::printf("best read: %s, %zu threads, tasks of %s: %s\n", best->name.c_str(), best->threads,
                    human_bytes(best->task_size).c_str(), rate_text(size, best->seconds).c_str());
    if (register_seconds >= 0)
        std::printf("registering the file (path registered) took %.3f s, outside the rows' timing\n", register_seconds);
    std::printf("peak pinned staging memory: %s (limit %s per engine)\n", human_bytes(staging_memory_peak()).c_str(),
                human_bytes(base.staging_memory_limit).c_str());
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
    c->add_option("--paths", a->paths, "paths: staged (the workers' own buffers), lanes (the stream lanes), staged+direct, cufile, host, direct, auto (the planner's choice), stream (read_async on a CUDA stream), registered (the file registered once, ferry::registered_file)")->delimiter(',');
    c->add_option("--repeat", a->repeat, "runs per measurement; the median is reported (default 3)")
        ->check(CLI::Range(1, 100));
    c->add_flag("--cold", a->cold, "evict the file from the page cache before each read");
    c->add_flag("--write", a->write, "also measure writes from GPU memory to a file");
    c->add_flag("--json", a->json, "print one JSON object");
    c->add_flag("--no-naive", a->no_naive, "skip the naive baseline (one thread, pageable memory, one copy)");
    c->callback([a] { run_bench(*a); });
}

}  // namespace ferry::cli
