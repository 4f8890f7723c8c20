// The group load over NCCL (see include/ferry/distributed.hpp and docs/design/distributed.md).
//
// On every rank, in order:
// 1. open: plan (plan_group, the same on every rank), destinations (the caller's, checked, or
//    one fresh device block for the replicated tensors), the sliced reads planned (which checks
//    their destinations); then one agreement: an all_reduce of every rank's status and a digest
//    of its headers and plan, so a rank that failed, or that sees another checkpoint, is named
//    on every rank before any byte moves;
// 2. per chunk of replicated bytes: a reader thread reads this rank's pieces of chunk i+1
//    (load_checkpoint with a row range and an into= view of the final tensor) while the calling
//    thread runs chunk i's agreement and broadcasts; the sliced reads come after the last
//    chunk, behind its broadcasts;
// 3. an agreement before each chunk's broadcasts: a rank whose read failed reports it there
//    and every rank throws the same group_load_error, instead of waiting forever in a broadcast
//    whose sender has given up. Every wait has a deadline (nccl_group::wait).
//
// Nothing is staged: bytes land where they stay, on the reader and on the receivers.
#include "ferry/distributed.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <set>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "checkpoint/plan.hpp"
#include "cuda/cuda_owners.hpp"
#include "cuda/cuda_runtime.hpp"
#include "distributed/group_plan.hpp"
#include "distributed/nccl_group.hpp"
#include "ferry/convert.hpp"
#include "shim/nccl.hpp"

namespace ferry {

group_load_error::group_load_error(std::string what, int rank, std::string file, std::string step, std::string reason,
                                   std::vector<int> failed_ranks)
    : error(std::move(what)),
      rank_(rank),
      file_(std::move(file)),
      step_(std::move(step)),
      reason_(std::move(reason)),
      failed_(std::move(failed_ranks)) {}

namespace {

using clock = std::chrono::steady_clock;
using distributed::nccl_group;

double since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

// The error report a failing rank broadcasts: its file and reason, NUL-separated, truncated.
constexpr std::size_t report_bytes = 4096;

// What a failing rank's exception says: the file it names (else `fallback`) and its message.
std::pair<std::string, std::string> describe(const std::exception_ptr& e, const std::string& fallback) {
    try {
        std::rethrow_exception(e);
    } catch (const format_error& x) {  // checkpoint_error too
        return {x.file().empty() ? fallback : x.file(), x.what()};
    } catch (const end_of_file_error& x) {
        return {x.where().path.empty() ? fallback : x.where().path, x.what()};
    } catch (const system_error& x) {
        return {x.where().path.empty() ? fallback : x.where().path, x.what()};
    } catch (const cuda_error& x) {
        return {x.where().path.empty() ? fallback : x.where().path, x.what()};
    } catch (const remote_error& x) {
        return {x.url(), x.what()};
    } catch (const std::exception& x) {
        return {fallback, x.what()};
    } catch (...) {
        return {fallback, "unknown exception"};
    }
}

std::string rank_list(const std::vector<int>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

// One replicated tensor's destination on this rank.
struct target {
    array dst;
    dtype to = dtype::uint8;
};

struct read_result {
    std::uint64_t bytes = 0;
    std::size_t requests = 0;
    double seconds = 0;
    std::vector<named_array> tensors;  // the sliced read's
};

// The digest every rank compares at the first agreement: the selected tensors' table (file
// base names, so ranks may keep the checkpoint under different folders), the plan, the options
// that change what moves. 62 bits, never 0 (0 means "no digest": a rank that failed to plan).
std::int64_t digest_of(const checkpoint& c, const group_plan& p, const std::vector<std::string>& loaded,
                       const group_load_options& o) {
    XXH64_state_t* h = XXH64_createState();
    XXH64_reset(h, 0);
    auto add = [&](const void* d, std::size_t n) { XXH64_update(h, d, n); };
    auto add_s = [&](const std::string& s) {
        std::uint64_t n = s.size();
        add(&n, sizeof n);
        add(s.data(), s.size());
    };
    auto add_u = [&](std::uint64_t v) { add(&v, sizeof v); };
    auto tensors = p.sliced;
    tensors.insert(tensors.end(), p.replicated.begin(), p.replicated.end());
    std::sort(tensors.begin(), tensors.end());
    for (std::size_t i : tensors) {
        const checkpoint_tensor& t = c.tensors[i];
        add_s(t.name);
        add_u(static_cast<std::uint64_t>(t.type));
        for (auto d : t.shape) add_u(static_cast<std::uint64_t>(d));
        const std::string& path = c.shards[t.shard].path;
        add_s(path.substr(path.find_last_of('/') + 1));
        add_u(t.offset);
        add_u(t.bytes);
    }
    for (std::size_t i : p.sliced) add_u(i);
    for (const auto& r : p.ranks) add_u(r.replicated_bytes);
    add_u(p.chunks.size());
    for (const auto& g : p.subgroups) add_u(g.size());
    for (const auto& n : loaded) add_s(n);
    add_u(o.as ? static_cast<std::uint64_t>(*o.as) + 1 : 0);
    std::uint64_t v = XXH64_digest(h);
    XXH64_freeState(h);
    return static_cast<std::int64_t>((v >> 2) | 1);
}

class executor {
public:
    executor(const checkpoint& c, const group_load_options& o, const shim::nccl_library& lib, int device)
        : c_(c), o_(o), device_(device), g_(lib, static_cast<shim::nccl_comm_t>(o.communicator), device, o.timeout_seconds) {
        const int w = g_.world();
        status_host_ = detail::owned_pinned::allocate(2 * w * sizeof(std::int64_t) + report_bytes,
                                                       "cudaHostAlloc (group load status)");
        status_dev_ = array(dtype::uint8, {static_cast<std::int64_t>(2 * w * sizeof(std::int64_t) + report_bytes)},
                            placement::cuda(device));
        read_stream_ = detail::owned_stream::create("cudaStreamCreateWithFlags (group load reads)");
    }

    group_load run();

private:
    void open();
    void agree(const std::string& step, const std::exception_ptr& err, const std::string& file, std::int64_t digest);
    read_result read_chunk(std::size_t i);
    read_result read_slices();
    array view(const group_piece& p, std::size_t* out_bytes) const;

    const checkpoint& c_;
    const group_load_options& o_;
    int device_;
    nccl_group g_;
    detail::owned_pinned status_host_;
    array status_dev_;
    detail::owned_stream read_stream_;

    group_plan plan_;
    std::map<std::size_t, target> replicated_;   // loaded replicated tensors, by tensor index
    std::vector<std::string> sliced_names_;      // loaded sliced tensors
    std::vector<std::string> missing_, unexpected_;
    std::atomic<bool> stop_{false};
};

void executor::open() {
    const int w = g_.world(), rank = g_.rank();
    group_plan_options po;
    po.world = w;
    po.tp = o_.tp;
    po.layout = o_.layout;
    po.reads = o_.reads;
    po.chunk_bytes = o_.chunk_bytes ? o_.chunk_bytes : (64ull << 20) * static_cast<std::uint64_t>(w);
    po.select = o_.select;
    plan_ = plan_group(c_, po);

    // Which tensors load here: with only_into, those with a destination.
    std::set<std::string> selected;
    for (std::size_t i : plan_.sliced) selected.insert(c_.tensors[i].name);
    for (std::size_t i : plan_.replicated) selected.insert(c_.tensors[i].name);
    for (const auto& [name, a] : o_.into) {
        if (selected.count(name)) continue;
        if (!o_.only_into)
            throw checkpoint_error(c_.source, name, "a destination is given but no selected tensor has that name");
        missing_.push_back(name);
    }
    auto loads = [&](const std::string& n) { return !o_.only_into || o_.into.count(n); };
    for (const auto& n : selected)
        if (!loads(n)) unexpected_.push_back(n);
    if (o_.only_into && o_.strict_into && (!missing_.empty() || !unexpected_.empty()))
        throw usage_error(c_.source + ": destinations and checkpoint do not match: missing key(s) " +
                          std::to_string(missing_.size()) + ", unexpected key(s) " + std::to_string(unexpected_.size()) +
                          (missing_.empty() ? "" : " (first missing: " + missing_[0] + ")") +
                          (unexpected_.empty() ? "" : " (first unexpected: " + unexpected_[0] + ")"));

    // Replicated destinations: the caller's (checked here, before any byte moves) or one block.
    std::uint64_t block_bytes = 0;
    std::vector<std::pair<std::size_t, std::uint64_t>> fresh;
    for (std::size_t i : plan_.replicated) {
        const checkpoint_tensor& t = c_.tensors[i];
        if (!loads(t.name)) continue;
        const std::string& file = c_.shards[t.shard].path;
        dtype to = t.type;
        if (o_.as && is_floating(t.type) && can_astype(t.type, *o_.as)) to = *o_.as;
        auto it = o_.into.find(t.name);
        if (it == o_.into.end()) {
            block_bytes = (block_bytes + 255) / 256 * 256;
            fresh.emplace_back(i, block_bytes);
            block_bytes += element_count(t.shape) * size_of(to);
            replicated_[i] = {array(), to};
            continue;
        }
        const array& a = it->second;
        if (a.read_only())
            throw checkpoint_error(file, t.name, "destination is read-only (its memory was lent read-only)");
        if (a.type() != to) {
            if (is_floating(t.type) && is_floating(a.type()) && can_astype(t.type, a.type()))
                to = a.type();
            else
                throw checkpoint_error(file, t.name, "destination dtype " + std::string(to_string(a.type())) +
                                                         " does not match the tensor's " + std::string(to_string(to)));
        }
        if (a.shape() != t.shape)
            throw checkpoint_error(file, t.name, "destination shape " + shape_to_string(a.shape()) +
                                                     " does not match the tensor's " + shape_to_string(t.shape) +
                                                     " (a replicated tensor loads whole on every rank)");
        if (!a.is_native() || (a.layout() != storage_order::c && !a.is_c_and_fortran()))
            throw checkpoint_error(file, t.name, "destination must be C-contiguous in native byte order");
        if (a.where() != placement::cuda(device_))
            throw checkpoint_error(file, t.name, "destination is on " + to_string(a.where()) +
                                                     ", an NCCL group load targets " + to_string(placement::cuda(device_)));
        if (a.size() > 0 && a.data() == nullptr) throw checkpoint_error(file, t.name, "destination has no storage");
        replicated_[i] = {a, to};
    }
    if (!fresh.empty()) {
        array block(dtype::uint8, {static_cast<std::int64_t>(std::max<std::uint64_t>(block_bytes, 1))},
                    placement::cuda(device_));
        for (const auto& [i, at] : fresh) {
            target& tg = replicated_[i];
            tg.dst = array(block.owner(), static_cast<unsigned char*>(block.data()) + at, tg.to, c_.tensors[i].shape,
                           placement::cuda(device_));
        }
    }

    // Sliced reads: planned now so that their destinations and rules fail here, not at the end.
    for (std::size_t i : plan_.sliced)
        if (loads(c_.tensors[i].name)) sliced_names_.push_back(c_.tensors[i].name);
    if (!sliced_names_.empty()) {
        checkpoint_load_options so;
        so.where = placement::cuda(device_);
        so.as = o_.as;
        so.select.how = tensor_selection::kind::names;
        so.select.patterns = sliced_names_;
        for (const auto& s : plan_.ranks[rank].slices)
            if (loads(c_.tensors[s.tensor].name)) so.slices[c_.tensors[s.tensor].name] = s.slice;
        for (const auto& n : sliced_names_)
            if (auto it = o_.into.find(n); it != o_.into.end()) so.into[n] = it->second;
        so.route = o_.route;
        plan_checkpoint(c_, so);
    }
}

void executor::agree(const std::string& step, const std::exception_ptr& err, const std::string& file,
                     std::int64_t digest) {
    const int w = g_.world(), rank = g_.rank();
    auto* status = reinterpret_cast<std::int64_t*>(status_host_.get());
    char* report = status_host_.get() + 2 * w * sizeof(std::int64_t);
    auto* status_dev = static_cast<std::int64_t*>(status_dev_.data());
    char* report_dev = static_cast<char*>(status_dev_.data()) + 2 * w * sizeof(std::int64_t);
    std::fill(status, status + 2 * w, 0);
    status[rank] = err ? 1 : 0;
    status[w + rank] = digest;
    const std::size_t n = 2 * w * sizeof(std::int64_t);
    const std::string what = step + " (agreement)";
    detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, status_dev, status, n, cudaMemcpyHostToDevice, g_.stream()),
                       "cudaMemcpyAsync (group load status)");
    g_.all_reduce_sum(status_dev, 2 * w, what);
    detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, status, status_dev, n, cudaMemcpyDeviceToHost, g_.stream()),
                       "cudaMemcpyAsync (group load status)");
    g_.wait(what);

    std::vector<int> failed;
    for (int r = 0; r < w; ++r)
        if (status[r]) failed.push_back(r);
    if (!failed.empty()) {
        // The first failing rank tells every rank its file and reason.
        const int src = failed.front();
        std::memset(report, 0, report_bytes);
        if (rank == src) {
            auto [f, reason] = describe(err, file);
            std::size_t fl = std::min(f.size(), report_bytes / 4);
            std::memcpy(report, f.data(), fl);
            std::size_t rl = std::min(reason.size(), report_bytes - fl - 2);
            std::memcpy(report + fl + 1, reason.data(), rl);
        }
        const std::string rstep = step + " (error report)";
        detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, report_dev, report, report_bytes, cudaMemcpyHostToDevice, g_.stream()),
                           "cudaMemcpyAsync (group load error report)");
        g_.broadcast(report_dev, report_bytes, src, 0, rstep);
        detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, report, report_dev, report_bytes, cudaMemcpyDeviceToHost, g_.stream()),
                           "cudaMemcpyAsync (group load error report)");
        g_.wait(rstep);
        report[report_bytes - 1] = '\0';
        std::string f(report);
        std::string reason(report + std::min(f.size() + 1, report_bytes - 1));
        std::string what_failed = "distributed load: rank " + std::to_string(src) + " failed at " + step +
                                  (f.empty() ? "" : " reading " + f) + ": " + reason +
                                  (failed.size() > 1 ? "; ranks " + rank_list(failed) + " failed" : "");
        throw group_load_error(what_failed, src, f, step, reason, failed);
    }
    if (digest) {
        std::vector<int> odd;
        for (int r = 0; r < w; ++r)
            if (status[w + r] != status[w]) odd.push_back(r);
        if (!odd.empty())
            throw group_load_error("distributed load: ranks " + rank_list(odd) +
                                       " see a different checkpoint or plan than rank 0 (headers, files, "
                                       "tensor-parallel rules or options differ)",
                                   odd.front(), "", step, "", odd);
    }
}

array executor::view(const group_piece& p, std::size_t* out_bytes) const {
    const checkpoint_tensor& t = c_.tensors[p.tensor];
    const target& tg = replicated_.at(p.tensor);
    std::vector<std::int64_t> shape = t.shape;
    std::size_t item = size_of(tg.to), off = 0;
    if (p.dim >= 0) {
        std::size_t inner = 1;
        for (std::size_t d = static_cast<std::size_t>(p.dim) + 1; d < t.shape.size(); ++d)
            inner *= static_cast<std::size_t>(t.shape[d]);
        shape[static_cast<std::size_t>(p.dim)] = p.stop - p.start;
        off = static_cast<std::size_t>(p.start) * inner * item;
    }
    *out_bytes = element_count(shape) * item;
    return array(tg.dst.owner(), static_cast<unsigned char*>(tg.dst.data()) + off, tg.to, shape, tg.dst.where());
}

read_result executor::read_chunk(std::size_t i) {
    read_result r;
    if (stop_) return r;
    auto t0 = clock::now();
    // A rank has one piece of a tensor per chunk; a second one goes to a second load.
    std::vector<checkpoint_load_options> batches;
    for (const group_piece& p : plan_.chunks[i].pieces) {
        if (p.reader != g_.rank() || p.bytes == 0 || !replicated_.count(p.tensor)) continue;
        const std::string& name = c_.tensors[p.tensor].name;
        auto b = std::find_if(batches.begin(), batches.end(), [&](auto& o) { return !o.into.count(name); });
        if (b == batches.end()) {
            checkpoint_load_options o;
            o.where = placement::cuda(device_);
            o.select.how = tensor_selection::kind::names;
            o.only_into = true;
            o.route = o_.route;
            o.stream = read_stream_.get();
            batches.push_back(std::move(o));
            b = batches.end() - 1;
        }
        std::size_t n = 0;
        b->select.patterns.push_back(name);
        b->into[name] = view(p, &n);
        const checkpoint_tensor& t = c_.tensors[p.tensor];
        if (p.dim >= 0 && (p.start != 0 || p.stop != t.shape[static_cast<std::size_t>(p.dim)]))
            b->slices[name] = tensor_slice::range(p.dim, p.start, p.stop);
    }
    for (const auto& o : batches) {
        checkpoint_load l = load_checkpoint(c_, o);
        r.bytes += l.stats.bytes_read;
        r.requests += l.stats.requests;
    }
    r.seconds = since(t0);
    return r;
}

read_result executor::read_slices() {
    read_result r;
    if (stop_ || sliced_names_.empty()) return r;
    auto t0 = clock::now();
    checkpoint_load_options so;
    so.where = placement::cuda(device_);
    so.as = o_.as;
    so.select.how = tensor_selection::kind::names;
    so.select.patterns = sliced_names_;
    std::set<std::string> names(sliced_names_.begin(), sliced_names_.end());
    for (const auto& s : plan_.ranks[g_.rank()].slices)
        if (names.count(c_.tensors[s.tensor].name)) so.slices[c_.tensors[s.tensor].name] = s.slice;
    for (const auto& n : sliced_names_)
        if (auto it = o_.into.find(n); it != o_.into.end()) so.into[n] = it->second;
    so.route = o_.route;
    so.stream = read_stream_.get();
    checkpoint_load l = load_checkpoint(c_, so);
    r.bytes = l.stats.bytes_read;
    r.requests = l.stats.requests;
    r.tensors = std::move(l.tensors);
    r.seconds = since(t0);
    return r;
}

group_load executor::run() {
    auto t_start = clock::now();
    const int rank = g_.rank();
    std::exception_ptr err;
    std::int64_t digest = 0;
    try {
        open();
        std::vector<std::string> loaded;
        for (const auto& [i, tg] : replicated_) loaded.push_back(c_.tensors[i].name);
        loaded.insert(loaded.end(), sliced_names_.begin(), sliced_names_.end());
        digest = digest_of(c_, plan_, loaded, o_);
    } catch (...) {
        err = std::current_exception();
    }
    agree("open", err, c_.source, digest);
    g_.split(plan_.subgroups);

    group_load out;
    group_load_stats& st = out.stats;
    st.rank = rank;
    st.world = g_.world();
    st.chunks = plan_.chunks.size();
    const auto* node_of = o_.layout ? &o_.layout->node_of_rank : nullptr;

    // The reader thread's futures; declared after everything they use, and `stop_` set on the
    // way out so that a failed load does not start further reads.
    struct stopper {
        std::atomic<bool>& f;
        ~stopper() { f = true; }
    };
    std::vector<std::future<read_result>> reads;
    std::future<read_result> slices;
    stopper guard{stop_};
    auto launch_chunk = [&](std::size_t i) {
        reads.push_back(std::async(std::launch::async, [this, i] {
            detail::set_device(device_);
            return read_chunk(i);
        }));
    };
    auto launch_slices = [&] {
        slices = std::async(std::launch::async, [this] {
            detail::set_device(device_);
            return read_slices();
        });
    };
    const std::size_t n = plan_.chunks.size();
    if (n) launch_chunk(0);
    else launch_slices();

    std::uint64_t done_bytes = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const group_chunk& ch = plan_.chunks[i];
        const std::string& file = c_.shards[ch.shard].path;
        const std::string step = "chunk " + std::to_string(i) + " of " + std::to_string(n) + " (" + file + ")";
        err = nullptr;
        try {
            read_result r = reads[i].get();
            st.bytes_read += r.bytes;
            st.replicated_bytes_read += r.bytes;
            st.requests += r.requests;
            st.read_seconds += r.seconds;
        } catch (...) {
            err = std::current_exception();
        }
        if (!err) {  // read ahead: the next chunk (or the slices) while this one moves
            if (i + 1 < n) launch_chunk(i + 1);
            else launch_slices();
        }
        agree(step, err, file, 0);
        const std::string bstep = "broadcasts of " + step;
        for (int stage = 0; stage < 2; ++stage) {
            bool any = false;
            for (const group_broadcast& b : ch.broadcasts) {
                if (b.stage != stage || !g_.member(b.subgroup)) continue;
                const group_piece& p = ch.pieces[b.piece];
                if (!replicated_.count(p.tensor)) continue;
                std::size_t bytes = 0;
                array v = view(p, &bytes);
                if (!any) g_.group_start(bstep);
                any = true;
                g_.broadcast(v.data(), bytes, b.root, b.subgroup, bstep);
                if (b.root == rank) {
                    st.bytes_sent += bytes;
                } else {
                    st.bytes_received += bytes;
                    if (node_of && (*node_of)[rank] != (*node_of)[b.root]) st.bytes_from_other_nodes += bytes;
                }
            }
            if (any) g_.group_end(bstep);
        }
        g_.wait(bstep);
        done_bytes += ch.bytes;
        if (o_.progress) o_.progress(done_bytes, plan_.replicated_bytes);
    }
    err = nullptr;
    read_result sr;
    try {
        sr = slices.get();
        st.bytes_read += sr.bytes;
        st.sliced_bytes_read += sr.bytes;
        st.requests += sr.requests;
        st.read_seconds += sr.seconds;
    } catch (...) {
        err = std::current_exception();
    }
    agree("slices", err, c_.source, 0);
    g_.close();

    for (const auto& [i, tg] : replicated_) out.tensors.push_back({c_.tensors[i].name, tg.dst});
    for (auto& t : sr.tensors) out.tensors.push_back(std::move(t));
    std::sort(out.tensors.begin(), out.tensors.end(),
              [](const named_array& a, const named_array& b) { return a.name < b.name; });
    out.missing = std::move(missing_);
    out.unexpected = std::move(unexpected_);
    st.collective_seconds = g_.wait_seconds();
    st.seconds = since(t_start);
    out.plan = std::move(plan_);
    return out;
}

}  // namespace

group_load load_checkpoint_group(const checkpoint& c, const group_load_options& o) {
    if (!(o.timeout_seconds > 0))
        throw usage_error("load_checkpoint_group: timeout_seconds must be positive");
    const std::string name = o.nccl_library.empty() ? "libnccl.so.2" : o.nccl_library;
    const shim::nccl_library& lib = shim::nccl(name);
    if (!lib.state.loaded)
        throw usage_error("load_checkpoint_group: cannot load NCCL from " + name + ": " + lib.state.load_error +
                          " (install NCCL, e.g. the nvidia-nccl-cu13 wheel, and pass its libnccl.so.2 as "
                          "group_load_options::nccl_library or put it on the loader's search path)");
    if (!o.communicator)
        throw usage_error("load_checkpoint_group: no communicator: pass the caller's ncclComm_t as "
                          "group_load_options::communicator");
    if (!detail::cuda_available())
        throw usage_error("load_checkpoint_group: an NCCL group load needs a CUDA GPU: " + cuda_unavailable_reason());
    auto* comm = static_cast<shim::nccl_comm_t>(o.communicator);
    int comm_device = -1;
    if (int rc = lib.api.comm_cu_device(comm, &comm_device); rc != shim::nccl_success)
        throw usage_error(std::string("load_checkpoint_group: ncclCommCuDevice refused the communicator: ") +
                          lib.api.get_error_string(rc));
    int device = o.device >= 0 ? o.device : comm_device;
    if (device != comm_device)
        throw usage_error("load_checkpoint_group: device " + std::to_string(device) + " is not the communicator's (" +
                          std::to_string(comm_device) + "): NCCL moves bytes on the communicator's GPU");
    executor e(c, o, lib, device);
    return e.run();
}

}  // namespace ferry
