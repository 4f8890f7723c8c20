// ferry::read_whole_files: many small files, each read whole with one pread into a block it
// shares with its neighbours in the list, its header parsed from those bytes. Per file that is
// stat, open, pread, close and a parse, on a pool of threads: for files of 16-256 KiB the
// opens, plans and waits of a load each cost more than the bytes.
#include "ferry/many.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "formats/npy_header.hpp"
#include "formats/safetensors_header.hpp"
#include "formats/whole_files_stage.hpp"
#include "os/owned_fd.hpp"
#include "os/posix_io.hpp"
#include "os/sys.hpp"
#include "stop.hpp"

namespace ferry {

// Named, not anonymous: the formats folder compiles as one unit.
namespace whole_file_reading {

constexpr unsigned default_threads = 16;
constexpr std::uint64_t align = 64;  // each file starts so in its block, as a .npy payload in its file
constexpr std::uint64_t aligned(std::uint64_t n) { return (n + align - 1) / align * align; }

std::uint64_t le64(const unsigned char* p) {
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    return n;
}

file_format sniff(const unsigned char* p, std::uint64_t size, const std::string& path) {
    if (size >= 6 && std::memcmp(p, "\x93NUMPY", 6) == 0) return file_format::npy;
    if (size >= 9 && p[8] == '{') {
        std::uint64_t n = le64(p);
        if (n <= safetensors_max_header_size && n <= size - 8) return file_format::safetensors;
    }
    return format_from_extension(path);  // as detect_format: a .npy without its magic fails below
}

void parse_npy(const unsigned char* p, std::uint64_t at, whole_file& f, const std::string& path) {
    std::string_view bytes(reinterpret_cast<const char*>(p), f.size);
    formats::npy_preamble pre = formats::parse_npy_preamble(bytes.substr(0, formats::npy_preamble_max), path);
    if (pre.size + pre.header_size > f.size)
        throw format_error(path, "header", "file ends inside the header (" + std::to_string(pre.header_size) +
                                               " bytes announced, " + std::to_string(f.size - pre.size) + " present)");
    npy_info info = formats::parse_npy_header(bytes.substr(pre.size, pre.header_size), pre, path);
    if (info.data_bytes > f.size - info.data_offset)
        throw format_error(path, "data", "file is truncated: " + std::to_string(info.data_bytes) +
                                             " bytes of data expected, " +
                                             std::to_string(f.size - info.data_offset) + " present");
    f.arrays.push_back({"", info.type, info.layout, info.shape, at + info.data_offset, info.data_bytes});
}

void parse_safetensors(const unsigned char* p, std::uint64_t at, whole_file& f, const std::string& path) {
    if (f.size < 8) throw format_error(path, "header size", "the file has " + std::to_string(f.size) + " bytes, fewer than 8");
    const std::uint64_t n = le64(p);
    formats::check_safetensors_header_size(n, f.size, path);
    safetensors_info info = formats::parse_safetensors_header(
        std::string_view(reinterpret_cast<const char*>(p) + 8, n), f.size, path);
    f.needs_load = info.metadata.count("ferry.checksums") > 0;
    f.arrays.reserve(info.tensors.size());
    for (auto& t : info.tensors)
        f.arrays.push_back({std::move(t.name), typed_order{t.type, byte_order::little}, storage_order::c,
                            std::move(t.shape), at + 8 + n + t.begin, t.end - t.begin});
}

void parse_raw(std::uint64_t at, whole_file& f, const std::string& path, const whole_files_options& o) {
    if (!o.raw_type) throw usage_error(path + " is a raw file: pass dtype= (and shape=) to read it");
    const std::size_t item = size_of(*o.raw_type);
    std::vector<std::int64_t> shape;
    if (o.raw_shape) {
        shape = *o.raw_shape;
        const std::uint64_t need = element_count(shape, item) * item;
        if (need > f.size)
            throw format_error(path, "shape", shape_to_string(shape) + " of " + std::string(to_string(*o.raw_type)) +
                                                  " needs " + std::to_string(need) + " bytes, the file holds " +
                                                  std::to_string(f.size));
    } else {
        shape = {static_cast<std::int64_t>(f.size / item)};
    }
    const std::uint64_t nbytes = element_count(shape, item) * item;
    f.arrays.push_back({"", typed_order{*o.raw_type, native_byte_order}, storage_order::c, std::move(shape), at, nbytes});
}

/// Host blocks of one size kept for the next call once the arrays over them are gone. Fresh
/// memory is faulted in page by page as the reads land in it: a call of 20,000 files of
/// 16-256 KiB took 663,000 page faults and 2.0 s of system time on the 2-core CPU machine,
/// against 0.76 s into memory touched before. Idle blocks are kept up to an eighth of the
/// machine's memory, at most 4 GiB; past that a dropped block is freed.
class block_pool {
public:
    static block_pool& global() {
        static block_pool* p = new block_pool();  // never destroyed: blocks may outlive statics
        return *p;
    }

    std::shared_ptr<const void> get(std::size_t bytes) {
        void* p = nullptr;
        {
            std::lock_guard lock(m_);
            if (bytes == size_ && !idle_.empty()) {
                p = idle_.back();
                idle_.pop_back();
            }
        }
        if (!p) {
            p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
            if (!p) throw std::bad_alloc();
        }
        return std::shared_ptr<const void>(p, [this, bytes](const void* q) { put(const_cast<void*>(q), bytes); });
    }

    void use_size(std::size_t bytes) {
        std::lock_guard lock(m_);
        if (bytes == size_) return;
        for (void* p : idle_) std::free(p);
        idle_.clear();
        size_ = bytes;
    }

private:
    block_pool() {
        const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
        const std::uint64_t ram = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
        cap_bytes_ = std::min<std::uint64_t>(ram / 8, 4ull << 30);
    }

    void put(void* p, std::size_t bytes) {
        {
            std::lock_guard lock(m_);
            if (bytes == size_ && (idle_.size() + 1) * bytes <= cap_bytes_) {
                idle_.push_back(p);
                return;
            }
        }
        std::free(p);
    }

    std::mutex m_;
    std::vector<void*> idle_;
    std::size_t size_ = 0;
    std::uint64_t cap_bytes_ = 0;
};

/// Reads the file whole into `dst` (its size bytes): a file that shrank since its stat is an
/// end_of_file_error, one that grew is read as it was.
void read_file(const std::string& path, unsigned char* dst, std::uint64_t size) {
    detail::owned_fd fd(sys::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) throw system_error(errno, "cannot open", {path});
    const std::size_t got = detail::pread_full(fd.get(), dst, size, 0, {path, 0, size});
    if (got < size) throw end_of_file_error({path, got, size - got}, got);
}

struct shared_state {
    const std::vector<std::string>& paths;
    const whole_files_options& o;
    whole_files& out;
    const block_stage* stage = nullptr;  ///< a GPU load's copy of each complete block
    std::mutex blocks_lock;    ///< taken to allocate and number a block
    std::mutex callback_lock;  ///< on_block calls, one at a time
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    std::size_t step = 1;
};

/// One run of neighbouring files: their sizes first, so that a block is sized for the files
/// that will share it.
void read_run(shared_state& st, std::size_t first, std::size_t last) {
    const auto& paths = st.paths;
    auto& files = st.out.files;
    for (std::size_t i = first; i < last; ++i) {
        struct stat s {};
        if (sys::stat(paths[i].c_str(), &s) != 0) {
            files[i].error = std::make_exception_ptr(system_error(errno, "cannot open", {paths[i]}));
            continue;
        }
        if (!S_ISREG(s.st_mode)) {
            files[i].error = std::make_exception_ptr(usage_error(
                paths[i] + (S_ISDIR(s.st_mode) ? " is a directory, not a file" : " is not a regular file")));
            continue;
        }
        files[i].size = static_cast<std::uint64_t>(s.st_size);
    }
    std::size_t block = 0;
    array current;  // the block being filled, until it is handed over
    unsigned char* base = nullptr;
    std::uint64_t at = 0, end = 0;
    std::vector<std::size_t> placed;
    // A caller's on_block that throws (its copy found no memory) fails the block's files, not
    // the thread: each keeps the error.
    auto hand_over = [&] {
        if (!placed.empty() && (st.stage || st.o.on_block)) {
            try {
                if (st.stage) {
                    array staged = (*st.stage)(current, at, placed, files);
                    std::lock_guard lock(st.blocks_lock);
                    st.out.blocks[block] = std::move(staged);
                }
                if (st.o.on_block) {
                    std::lock_guard lock(st.callback_lock);
                    st.o.on_block(block, placed, files);
                }
            } catch (...) {
                for (std::size_t k : placed) {
                    files[k].arrays.clear();
                    files[k].error = std::current_exception();
                }
                st.failed.store(true, std::memory_order_relaxed);
            }
        }
        placed.clear();
        current = array();
    };
    for (std::size_t i = first; i < last; ++i) {
        whole_file& f = files[i];
        if (f.error) {
            st.failed.store(true, std::memory_order_relaxed);
            continue;
        }
        if (st.o.stop_at_failure && st.failed.load(std::memory_order_relaxed)) break;
        try {
            detail::throw_if_stopped("load_many");
            const std::uint64_t need = aligned(std::max<std::uint64_t>(f.size, 1));
            if (!base || at + need > end) {
                hand_over();
                std::uint64_t total = need;
                for (std::size_t j = i + 1; j < last && total + aligned(files[j].size) <= st.o.block_bytes; ++j)
                    total += aligned(files[j].size);
                // Allocation and numbering in one step: a caller's allocate sees the blocks in order.
                std::lock_guard lock(st.blocks_lock);
                array mem;
                if (st.o.allocate) {
                    mem = st.o.allocate(total + align);
                } else {
                    // Blocks of one size from the pool; a larger file gets memory of its own.
                    const std::uint64_t bytes = std::max(total, st.o.block_bytes) + align;
                    std::shared_ptr<const void> owner = total <= st.o.block_bytes
                        ? block_pool::global().get(bytes)
                        : std::shared_ptr<const void>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096), std::free);
                    if (!owner) throw std::bad_alloc();
                    mem = array(owner, const_cast<void*>(owner.get()), dtype::uint8, {static_cast<std::int64_t>(bytes)},
                                placement::host());
                }
                if (mem.nbytes() < total + align) throw usage_error("load_many: a block's allocation came back short");
                const auto addr = reinterpret_cast<std::uintptr_t>(mem.data());
                at = (align - addr % align) % align;
                end = at + total;
                base = static_cast<unsigned char*>(mem.data());
                block = st.out.blocks.size();
                if (st.stage) current = mem;
                st.out.blocks.push_back(std::move(mem));
            }
            f.block = block;
            f.offset = at;
            at += need;
            read_file(paths[i], base + f.offset, f.size);
            f.format = sniff(base + f.offset, f.size, paths[i]);
            if (f.format == file_format::npy) parse_npy(base + f.offset, f.offset, f, paths[i]);
            else if (f.format == file_format::safetensors) parse_safetensors(base + f.offset, f.offset, f, paths[i]);
            else parse_raw(f.offset, f, paths[i], st.o);
            // A sidecar manifest (ferry verify --record) is checked where the file is loaded alone.
            struct stat side {};
            if (f.format != file_format::safetensors && sys::stat((paths[i] + ".ferry-checksums.json").c_str(), &side) == 0)
                f.needs_load = true;
            placed.push_back(i);
        } catch (const interrupted_error&) {
            f.arrays.clear();
            f.error = std::current_exception();
            st.failed.store(true, std::memory_order_relaxed);
            break;
        } catch (...) {
            f.arrays.clear();
            f.error = std::current_exception();
            st.failed.store(true, std::memory_order_relaxed);
        }
    }
    hand_over();
}

whole_files read_whole_files_staged(const std::vector<std::string>& paths, const whole_files_options& options,
                                    const block_stage& stage) {
    const std::size_t n = paths.size();
    whole_files out;
    out.files.resize(n);
    shared_state st{paths, options, out, stage ? &stage : nullptr};
    if (!options.allocate) block_pool::global().use_size(options.block_bytes + align);
    const unsigned want = options.threads ? options.threads : default_threads;
    const auto threads = static_cast<unsigned>(std::min<std::size_t>(want, n));
    // Runs of up to 64 neighbours, at least four a thread, so that the last runs balance.
    st.step = std::clamp<std::size_t>(threads ? n / (4 * threads) : 1, 1, 64);
    const detail::stop_flag stop = detail::current_stop();
    auto work = [&] {
        detail::stop_binding bound(stop);
        for (std::size_t first; (first = st.next.fetch_add(st.step)) < n;) {
            if (options.stop_at_failure && st.failed.load(std::memory_order_relaxed)) return;
            read_run(st, first, std::min(n, first + st.step));
        }
    };
    {
        std::vector<std::jthread> pool;
        for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
        if (threads) work();
    }
    // An interrupt is the call's own answer, not one file's failure.
    for (const auto& f : out.files) {
        if (!f.error) continue;
        try {
            std::rethrow_exception(f.error);
        } catch (const interrupted_error&) {
            throw;
        } catch (...) {
        }
    }
    return out;
}

}  // namespace whole_file_reading

whole_files read_whole_files(const std::vector<std::string>& paths, const whole_files_options& options) {
    return whole_file_reading::read_whole_files_staged(paths, options, {});
}

}  // namespace ferry
