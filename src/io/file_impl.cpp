#include "io/file_impl.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "backend/direct/direct_read.hpp"
#include "backend/host/host_backend.hpp"
#include "backend/staged/staged_backend.hpp"
#include "cuda/cuda_runtime.hpp"
#include "os/page_cache.hpp"
#include "log.hpp"
#include "shim/cufile.hpp"
#include "os/sys.hpp"
#include "trace.hpp"

namespace ferry::detail {
namespace {

using clock = std::chrono::steady_clock;

// Requests smaller than this run on the calling thread: a hand-off costs more than it saves.
constexpr std::size_t inline_limit = 256 << 10;
// Tasks are not made smaller than this when a request is spread over the workers.
constexpr std::size_t min_task = 1 << 20;

int open_flags(open_mode m) {
    switch (m) {
        case open_mode::read: return O_RDONLY;
        case open_mode::write: return O_WRONLY | O_CREAT | O_TRUNC;
        case open_mode::read_write: return O_RDWR | O_CREAT;
        case open_mode::append_write: return O_WRONLY | O_CREAT;
    }
    return O_RDONLY;
}

bool nvidia_fs_present() {
    return ::access("/proc/driver/nvidia-fs/stats", F_OK) == 0 || ::access("/dev/nvidia-fs0", F_OK) == 0;
}

std::string bytes_text(std::uint64_t n) {
    if (n >= (1ull << 30) && n % (1ull << 30) == 0) return std::to_string(n >> 30) + " GiB";
    if (n >= (1ull << 20) && n % (1ull << 20) == 0) return std::to_string(n >> 20) + " MiB";
    if (n >= (1ull << 10) && n % (1ull << 10) == 0) return std::to_string(n >> 10) + " KiB";
    return std::to_string(n) + " bytes";
}

const char* range_name(io_path p, bool is_write) {
    switch (p) {
        case io_path::gds: return is_write ? "ferry write gds" : "ferry read gds";
        case io_path::cufile_compat: return is_write ? "ferry write cufile-compat" : "ferry read cufile-compat";
        case io_path::staged: return is_write ? "ferry write staged" : "ferry read staged";
        case io_path::staged_direct: return "ferry read staged+direct";
        case io_path::host: return is_write ? "ferry write host" : "ferry read host";
        case io_path::direct: return "ferry read direct";
        default: return "ferry request";
    }
}

}  // namespace

// ---- a request in flight ----

struct request_state {
    std::shared_ptr<file_impl> file;
    request r;
    std::atomic<std::size_t> remaining{0};
    std::promise<std::size_t> done;
    std::mutex error_mutex;
    std::exception_ptr error;
    clock::time_point start = clock::now();

    void task_done(std::exception_ptr e) {
        if (e) {
            std::lock_guard lock(error_mutex);
            if (!error) error = e;
        }
        if (remaining.fetch_sub(1) != 1) return;
        // Let go of the file before the caller wakes: the other tasks' closures, which the pool
        // destroys a moment later, still hold this state, and the file object (its descriptors
        // are closed by the handle either way) would otherwise outlive the caller's last handle.
        std::shared_ptr<file_impl> f = std::move(file);
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count();
        if (!error && !r.file_side) f->count(r.is_write, r.path, 0, static_cast<std::uint64_t>(ns), 1);
        {
            std::lock_guard lock(f->inflight_mutex_);
            --f->inflight_;
        }
        f->inflight_cv_.notify_all();
        f.reset();
        if (error) done.set_exception(error);
        else done.set_value(r.n);
    }
};

// ---- open / close ----

file_impl::file_impl(const std::string& path, open_mode mode, const settings& s)
    : path_(path), mode_(mode), config_(s.resolved()), pid_(::getpid()) {
    // O_NONBLOCK so that opening a FIFO by mistake fails below instead of hanging here.
    fd_ = sys::open(path.c_str(), open_flags(mode) | O_NONBLOCK, 0666);
    if (fd_ < 0) throw system_error(errno, "cannot open", {path});
    struct stat st {};
    if (sys::fstat(fd_, &st) != 0) {
        int e = errno;
        sys::close(fd_);
        throw system_error(e, "fstat failed", {path});
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        sys::close(fd_);
        throw system_error(S_ISDIR(st.st_mode) ? EISDIR : EINVAL, "not a regular file or block device", {path});
    }
    int flags = sys::fcntl(fd_, F_GETFL);
    if (flags < 0 || sys::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        sys::close(fd_);
        throw system_error(e, "fcntl(F_SETFL) failed", {path});
    }
    engine_ = engine::shared(config_);
}

file_impl::~file_impl() {
    // Reached only when no request holds the file any more.
    gds_.reset();
    if (direct_fd_ >= 0) sys::close(direct_fd_);
    if (fd_ >= 0) sys::close(fd_);
}

void file_impl::check_open() const {
    if (closed_) throw usage_error("file is closed: " + path_);
    // In a forked child the parent's requests on this file never finish and its engine has no
    // workers: refuse rather than hang.
    if (pid_ != ::getpid())
        throw usage_error("file was opened in process " + std::to_string(pid_) +
                          " before fork(); open it again in this process: " + path_);
}

std::uint64_t file_impl::size() const {
    check_open();
    return file_size(fd_, path_);
}

void file_impl::sync() const {
    check_open();
    if (sys::fsync(fd_) != 0) throw system_error(errno, "fsync failed", {path_});
}

void file_impl::truncate(std::uint64_t size) const {
    check_open();
    if (sys::ftruncate(fd_, static_cast<off_t>(size)) != 0) throw system_error(errno, "ftruncate failed", {path_, 0, size});
}

void file_impl::close() {
    if (closed_.exchange(true)) return;
    if (pid_ == ::getpid()) {  // a forked child cannot wait for the parent's requests
        std::unique_lock lock(inflight_mutex_);
        inflight_cv_.wait(lock, [&] { return inflight_ == 0; });
    }
    gds_.reset();
    int e1 = 0, e2 = 0;
    if (direct_fd_ >= 0 && sys::close(direct_fd_) != 0) e1 = errno;
    direct_fd_ = -1;
    if (fd_ >= 0 && sys::close(fd_) != 0) e2 = errno;
    fd_ = -1;
    if (e2) throw system_error(e2, "close failed", {path_});
    if (e1) throw system_error(e1, "close failed (O_DIRECT descriptor)", {path_});
}

// ---- lazily made descriptors ----

int file_impl::direct_fd() {
    if (direct_disabled_) return -1;
    std::lock_guard lock(direct_mutex_);
    if (direct_tried_) return direct_fd_;
    direct_tried_ = true;
    if (mode_ == open_mode::write || mode_ == open_mode::append_write) {
        direct_reason_ = "opened for writing only";
        return -1;
    }
    int fd = sys::open(path_.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) {
        direct_reason_ = errno == EINVAL ? "the file system refuses O_DIRECT (open: EINVAL)"
                                         : std::string("O_DIRECT open failed: ") + std::strerror(errno);
        return -1;
    }
    align_ = query_direct_alignment(fd);
    std::size_t a = std::max(align_.memory, align_.offset);
    if (a > 4096 || 4096 % a != 0 || engine_->staging().buffer_size() < 4 * a) {
        sys::close(fd);
        direct_reason_ = "O_DIRECT alignment of " + std::to_string(a) + " bytes does not fit the staging buffers";
        return -1;
    }
    align_.offset = a;
    direct_fd_ = fd;
    return fd;
}

void file_impl::disable_direct(const std::string& why) {
    if (direct_disabled_.exchange(true)) return;
    {
        std::lock_guard lock(direct_mutex_);
        direct_reason_ = why;
    }
    fallback("O_DIRECT: " + why + "; reading buffered");
}

const cufile_handle* file_impl::gds_handle() {
    std::lock_guard lock(gds_mutex_);
    if (gds_tried_) return gds_ && gds_->ok() ? &*gds_ : nullptr;
    gds_tried_ = true;
    const shim::cufile_state& cf = shim::cufile(config_.cufile_library);
    if (!cf.loaded) {
        gds_reason_ = "cuFile is not available: " + cf.load_error;
        return nullptr;
    }
    if (!cf.driver_open) {
        gds_reason_ = "cuFileDriverOpen failed with error " + std::to_string(cf.driver_open_status) + " (" +
                      shim::cufile_status_string(cf.driver_open_status) + ")";
        return nullptr;
    }
    // Real GDS wants an O_DIRECT descriptor. In compatibility mode cuFile does POSIX I/O on the
    // descriptor it gets, so an O_DIRECT one would bypass the page cache (1.6 against 11 GB/s
    // hot on our measurements): hand it the buffered one unless O_DIRECT was asked for.
    int dfd = (cf.direct_dma() || config_.direct_io == direct_io_mode::on) ? direct_fd() : -1;
    gds_.emplace(dfd >= 0 ? dfd : fd_);
    if (!gds_->ok()) {
        gds_reason_ = gds_->failure();
        if (::access("/run/udev/data", F_OK) != 0)
            gds_reason_ += "; the udev database (/run/udev/data) is missing, so cuFile cannot read "
                           "the volume's attributes";
        return nullptr;
    }
    return &*gds_;
}

// ---- choosing a path ----

path_plan file_impl::plan(memory_kind kind, std::size_t n, bool is_write) {
    path_plan p{io_path::host, {}};
    const settings& s = config_;
    bool want_direct = false;
    if (!is_write) {
        if (s.direct_io == direct_io_mode::on) {
            want_direct = true;
            p.reasons.push_back("FERRY_DIRECT_IO=on");
        } else if (s.direct_io == direct_io_mode::auto_) {
            double r = resident_fraction(fd_, size());
            want_direct = r >= 0 && r < 0.5;
            p.reasons.push_back(r < 0 ? "page-cache residency unknown: buffered reads"
                                      : std::to_string(static_cast<int>(r * 100)) +
                                            "% of the file is in the page cache: " +
                                            (want_direct ? "O_DIRECT reads" : "buffered reads"));
        }
        if (want_direct && direct_fd() < 0) {
            want_direct = false;
            std::lock_guard lock(direct_mutex_);
            p.reasons.push_back("O_DIRECT unusable: " + direct_reason_);
        }
    }

    if (kind == memory_kind::host || kind == memory_kind::pinned) {
        p.path = want_direct ? io_path::direct : io_path::host;
        p.reasons.insert(p.reasons.begin(), std::string(to_string(kind)) + " memory: parallel " +
                                                (is_write ? "pwrite" : "pread") + " on " +
                                                std::to_string(s.threads) + " threads");
        return p;
    }

    io_path staged = want_direct ? io_path::staged_direct : io_path::staged;
    auto use_staged = [&](std::string why, bool is_fallback) {
        p.path = staged;
        p.reasons.push_back(std::move(why));
        p.reasons.push_back("staged: " + std::to_string(s.threads) + " threads, " +
                            std::to_string(engine_->staging().buffers_per_worker()) + " x " +
                            bytes_text(engine_->staging().buffer_size()) + " pinned buffers each");
        if (is_fallback) fallback(p.reasons[p.reasons.size() - 2]);
        return p;
    };
    if (kind == memory_kind::managed) return use_staged("managed memory: cuFile reads only into device memory", false);
    if (s.gds == gds_mode::off) return use_staged("FERRY_GDS=off", false);
    if (n < s.gds_threshold)
        return use_staged("request of " + bytes_text(n) + " is below FERRY_GDS_THRESHOLD (" +
                              bytes_text(s.gds_threshold) + ")",
                          false);
    if (s.gds == gds_mode::auto_ && !nvidia_fs_present())
        return use_staged("GPUDirect Storage: nvidia-fs is not loaded (no /proc/driver/nvidia-fs), so cuFile "
                          "could only run in compatibility mode, slower than the staged path",
                          true);
    const cufile_handle* h = gds_handle();
    if (!h) {
        std::string why;
        {
            std::lock_guard lock(gds_mutex_);
            why = gds_reason_;
        }
        if (s.gds == gds_mode::on) throw cufile_error(gds_ && !gds_->ok() ? gds_->status() : 0,
                                                      "FERRY_GDS=on but cuFile cannot be used: " + why, {path_});
        return use_staged("GPUDirect Storage unusable: " + why, true);
    }
    const shim::cufile_state& cf = shim::cufile(s.cufile_library);
    if (cf.direct_dma()) {
        p.path = io_path::gds;
        p.reasons.push_back("GPUDirect Storage: cuFile with nvidia-fs " +
                            std::to_string(cf.properties.nvfs.major_version) + "." +
                            std::to_string(cf.properties.nvfs.minor_version));
        return p;
    }
    if (s.gds == gds_mode::on) {
        p.path = io_path::cufile_compat;
        p.reasons.push_back("FERRY_GDS=on: cuFile in compatibility mode (nvidia-fs not loaded: POSIX I/O "
                            "and copies inside cuFile, not GPUDirect Storage)");
        return p;
    }
    return use_staged("GPUDirect Storage: cuFile would run in compatibility mode (nvidia-fs 0.0)", true);
}

void file_impl::log_plan_once(const path_plan& p, bool is_write) {
    if (!log_enabled(log_level::info, config_)) return;
    std::string line = path_ + ": " + (is_write ? "writes from " : "reads into ") + "this memory take the " +
                       std::string(to_string(p.path)) + " path";
    for (const auto& r : p.reasons) line += "; " + r;
    {
        std::lock_guard lock(log_mutex_);
        if (!logged_.insert(line).second) return;
    }
    log(log_level::info, config_, line);
}

void file_impl::fallback(const std::string& reason) {
    note_process_fallback(reason);
    if (counters_.add_fallback(reason)) log(log_level::info, config_, path_ + ": fallback: " + reason);
}

void file_impl::count(bool is_write, io_path p, std::uint64_t bytes, std::uint64_t ns, std::uint64_t requests) {
    counters_.add(is_write, p, bytes, ns, requests);
    process_counter().add(is_write, p, bytes, ns, requests);
}

// ---- requests ----

request file_impl::prepare(bool is_write, const void* mem, std::size_t n, std::uint64_t offset, bool exact) {
    check_open();
    if (is_write && mode_ == open_mode::read) throw usage_error("file is open for reading only: " + path_);
    if (!is_write && (mode_ == open_mode::write || mode_ == open_mode::append_write))
        throw usage_error("file is open for writing only: " + path_);
    if (n > 0 && !mem) throw usage_error("null buffer for a request of " + std::to_string(n) + " bytes: " + path_);
    request r;
    r.is_write = is_write;
    r.mem = static_cast<char*>(const_cast<void*>(mem));
    r.offset = offset;
    r.n = n;
    if (!is_write) {
        std::uint64_t sz = size();
        if (offset > sz || n > sz - offset) {
            if (exact) throw end_of_file_error({path_, offset, n}, sz);
            r.n = offset >= sz ? 0 : static_cast<std::size_t>(sz - offset);
        }
    }
    if (r.n == 0) return r;
    r.kind = memory_kind_of(mem);
    if (r.kind == memory_kind::device || r.kind == memory_kind::managed) r.device = device_of(mem);
    path_plan p = plan(r.kind, r.n, is_write);
    r.path = p.path;
    log_plan_once(p, is_write);
    if (log_enabled(log_level::debug, config_))
        log(log_level::debug, config_,
            path_ + ": " + (is_write ? "write " : "read ") + std::to_string(r.n) + " bytes at " +
                std::to_string(offset) + " (" + to_string(r.kind) + " memory) via " + std::string(to_string(r.path)));
    return r;
}

void file_impl::run_task(const request& r, std::size_t pos, std::size_t len) {
    trace_range range(range_name(r.path, r.is_write));
    io_context where{path_, r.offset + pos, len};
    char* mem = r.mem + pos;
    std::uint64_t off = r.offset + pos;
    io_path used = r.path;
    switch (r.path) {
        case io_path::host:
            if (r.is_write) host_write(fd_, mem, len, off, where);
            else host_read(fd_, mem, len, off, where);
            break;
        case io_path::gds:
        case io_path::cufile_compat:
            set_device(r.device);
            if (r.is_write) gds_write(*gds_, r.mem, pos, len, off, where);
            else gds_read(*gds_, r.mem, pos, len, off, where);
            break;
        case io_path::direct:
        case io_path::staged:
        case io_path::staged_direct: {
            int w = thread_pool::worker_index();
            staging_pool& pool = engine_->staging();
            staging_slot& slot = pool.slot(w);
            bool to_device = r.path != io_path::direct;
            if (r.is_write) {
                staged_write(slot, pool.buffer_size(), fd_, mem, r.device, len, off, where);
                break;
            }
            bool direct = r.path != io_path::staged;
            int dfd = direct ? direct_fd() : -1;
            if (direct && dfd < 0) {
                direct = false;
                used = to_device ? io_path::staged : io_path::host;
            }
            try {
                if (!direct && !to_device) host_read(fd_, mem, len, off, where);
                else staged_read(slot, pool.buffer_size(), {direct ? dfd : fd_, direct ? align_.offset : 0},
                                 mem, to_device, r.device, len, off, where);
            } catch (const system_error& e) {
                // Some file systems accept O_DIRECT at open and refuse it at read time.
                if (!direct || e.code() != EINVAL) throw;
                disable_direct("the file system refused an O_DIRECT read (EINVAL)");
                used = to_device ? io_path::staged : io_path::host;
                if (!to_device) host_read(fd_, mem, len, off, where);
                else staged_read(slot, pool.buffer_size(), {fd_, 0}, mem, true, r.device, len, off, where);
            }
            break;
        }
        default:
            throw usage_error("internal: no path for request");
    }
    if (!r.file_side) count(r.is_write, used, len, 0, 0);
}

std::future<std::size_t> file_impl::start(const request& r, thread_pool* workers) {
    auto st = std::make_shared<request_state>();
    st->file = shared_from_this();
    st->r = r;
    std::future<std::size_t> f = st->done.get_future();
    if (r.n == 0) {
        st->done.set_value(0);
        return f;
    }
    trace_range range(range_name(r.path, r.is_write));
    thread_pool& pool = workers ? *workers : engine_->pool();
    std::size_t threads = pool.size();
    std::size_t task = std::clamp<std::size_t>((r.n + threads - 1) / threads, min_task, std::max(min_task, config_.task_size));
    std::size_t tasks = (r.n + task - 1) / task;
    {
        // A file side checks for close() under the same lock as it counts itself in flight, so
        // close() either waits for it or it never touches the descriptors.
        std::lock_guard lock(inflight_mutex_);
        if (r.file_side && closed_) throw usage_error("file was closed before its stream reached the request: " + path_);
        ++inflight_;
    }
    st->remaining = tasks;
    bool run_here = r.n <= inline_limit && (r.path == io_path::host);
    for (std::size_t t = 0; t < tasks; ++t) {
        std::size_t pos = t * task;
        std::size_t len = std::min(task, r.n - pos);
        auto body = [st, pos, len] {
            std::exception_ptr e;
            try {
                st->file->run_task(st->r, pos, len);
            } catch (...) {
                e = std::current_exception();
            }
            st->task_done(e);
        };
        if (run_here) body();
        else pool.submit(std::move(body));
    }
    return f;
}

// ---- planning for the doctor ----

path_plan plan_read_path(const std::string& path, const settings& s) {
    struct stat st {};
    std::string target = path;
    std::string probe;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        probe = path + "/.ferry-probe-XXXXXX";
        std::vector<char> name(probe.begin(), probe.end());
        name.push_back('\0');
        int fd = ::mkstemp(name.data());
        if (fd < 0) throw system_error(errno, "cannot create a probe file in", {path});
        // A few blocks, so that O_DIRECT and cuFile registration have data to look at.
        std::vector<char> zeros(1 << 16, 0);
        ssize_t w = ::write(fd, zeros.data(), zeros.size());
        (void)w;
        ::close(fd);
        target = probe = name.data();
    }
    path_plan p;
    try {
        auto f = std::make_shared<file_impl>(target, open_mode::read, s);
        // What a read of a large file into device memory would do; for residency, look at the
        // file itself (a fresh probe file is in the page cache).
        p = f->plan(cuda_available() ? memory_kind::device : memory_kind::host, std::size_t(1) << 30, false);
        if (!cuda_available()) p.reasons.insert(p.reasons.begin(), "no GPU: " + cuda_unavailable_reason());
    } catch (...) {
        if (!probe.empty()) ::unlink(probe.c_str());
        throw;
    }
    if (!probe.empty()) ::unlink(probe.c_str());
    return p;
}

}  // namespace ferry::detail
