// The fault-injection loop shared by the host and GPU fault tests: an operation runs once for
// each k = 1, 2, ... with its k-th wrapped call failing (os/fault_hook.hpp), until it gets
// through without reaching a k-th call. After every run: the result is byte-exact or the error
// is the typed one for the call that failed, and no descriptor, pinned buffer or device
// allocation leaked, the workers are idle, nothing hung.
#pragma once

#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cuda/cuda_runtime.hpp"
#include "ferry/ferry.hpp"
#include "ferry/safetensors.hpp"
#include "reliability_util.hpp"
#include "test_util.hpp"

namespace ferry::test {

using namespace std::chrono_literals;

inline array pattern_array(dtype t, std::vector<std::int64_t> shape, std::uint32_t seed) {
    array a(t, std::move(shape));
    auto bytes = pattern(a.nbytes(), 0, seed);
    std::memcpy(a.data(), bytes.data(), bytes.size());
    return a;
}

/// Same dtype, shape and bytes; either array may live on the GPU.
inline bool same_bytes(const array& a, const array& b) {
    if (a.type() != b.type() || a.shape() != b.shape() || a.nbytes() != b.nbytes()) return false;
    const array ha = a.where().kind == memory_kind::device ? a.copy_to(placement::host()) : a;
    const array hb = b.where().kind == memory_kind::device ? b.copy_to(placement::host()) : b;
    return std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

/// The same names with the same bytes, in any order.
inline bool same_tensors(const std::vector<named_array>& got, const std::vector<named_array>& want) {
    if (got.size() != want.size()) return false;
    std::map<std::string, const array*> by_name;
    for (const auto& w : want) by_name[w.name] = &w.value;
    for (const auto& g : got)
        if (!by_name.count(g.name) || !same_bytes(g.value, *by_name[g.name])) return false;
    return true;
}

/// One operation under test: prepare() sets the stage with the hook off and drops the result of
/// the run before, run() is what faults hit, ok() checks the result of a run that succeeded and
/// failed() the state after a run that threw (both with the hook off).
struct operation {
    std::string name;
    std::function<void()> prepare = [] {};
    std::function<void()> run;
    std::function<void()> ok = [] {};
    std::function<void()> failed = [] {};
};

struct loop_totals {
    int runs = 0;
    int succeeded = 0;
    int typed_errors = 0;
    int absorbed = 0;  // persistent faults a fallback absorbed, results still exact
};

/// What the loops of one test did, printed at its end (docs/reliability.md quotes the figures).
inline loop_totals& figures() {
    static loop_totals t;
    return t;
}

/// The cudaError_t an injected errno stands for (cuda/cuda_runtime.cpp, cuda_fault).
inline int cuda_code_for(int error) { return error == ENOMEM ? cudaErrorMemoryAllocation : cudaErrorUnknown; }

/// Fails the k-th call for k = 1, 2, ... until a run no longer reaches a k-th call.
inline loop_totals fault_loop(const operation& op, fault_kind kind, int error = EIO) {
    loop_totals t;
    std::string label = op.name + " / " + to_string(kind) +
                        (kind == fault_kind::persistent ? std::string(" ") + std::strerror(error) : "");
    for (int k = 1;; ++k) {
        if (k > 20000) {
            ADD_FAILURE() << label << ": still injecting at k = " << k;
            break;
        }
        op.prepare();
        const int fds = open_fds();
        const auto allocations = detail::live_cuda_allocations();
        bool threw = false;
        std::string wrong;  // why the error was not the one this fault must give
        {
            fault_guard guard;
            fault_plan::arm(kind, k, error);
            try {
                within(60s, label, op.run);
            } catch (const system_error& e) {
                threw = true;
                if (e.code() != error)
                    wrong = "errno " + std::to_string(e.code()) + " instead of " + std::to_string(error);
                else if (!fault_plan::any_hit([](std::string_view c) { return !fault_plan::cuda_call(c); }))
                    wrong = "a system_error although only CUDA calls failed";
            } catch (const cuda_error& e) {
                threw = true;
                if (!fault_plan::any_hit(&fault_plan::cuda_call))
                    wrong = std::string("a cuda_error although no CUDA call failed: ") + e.what();
                else if (e.code() != cuda_code_for(error))
                    wrong = "CUDA error " + std::to_string(e.code()) + " instead of " + std::to_string(cuda_code_for(error));
            } catch (const cufile_error& e) {
                threw = true;
                if (!fault_plan::was_hit("cuFileHandleRegister"))
                    wrong = std::string("a cufile_error although no cuFile call was refused: ") + e.what();
            } catch (const std::exception& e) {
                threw = true;
                wrong = std::string("not a typed ferry error: ") + e.what();
            }
        }
        const int injected = fault_plan::injected.load();
        ++t.runs;
        if (!threw) {
            ++t.succeeded;
            if (kind == fault_kind::persistent && injected > 0) ++t.absorbed;
            op.ok();
        } else {
            ++t.typed_errors;
            if (kind != fault_kind::persistent)
                ADD_FAILURE() << label << ", k = " << k << ": a transient fault surfaced as an error";
            else if (!wrong.empty())
                ADD_FAILURE() << label << ", k = " << k << ": " << wrong;
            op.failed();
        }
        op.prepare();  // drops the result, so that what is still allocated is what leaked
        EXPECT_EQ(open_fds(), fds) << label << ", k = " << k << ": descriptors leaked; open now:" << fd_listing();
        const auto now = detail::live_cuda_allocations();
        EXPECT_EQ(now.device, allocations.device) << label << ", k = " << k << ": device allocations leaked";
        EXPECT_EQ(now.pinned, allocations.pinned) << label << ", k = " << k << ": pinned allocations leaked";
        EXPECT_TRUE(workers_idle(settings::global())) << label << ", k = " << k;
        if (::testing::Test::HasFailure()) break;  // one report per loop is enough
        // Done once a run no longer reaches a k-th call. (A k-th transfer too small to shorten
        // gets no fault but is reached: the loop goes on, whichever worker got there first.)
        if (fault_plan::seen.load() < k) break;
    }
    figures().runs += t.runs;
    figures().succeeded += t.succeeded;
    figures().typed_errors += t.typed_errors;
    figures().absorbed += t.absorbed;
    return t;
}

/// The fixture: small tasks so that even modest files split into several concurrent requests.
class fault_test : public ::testing::Test {
protected:
    static settings small_settings() {
        settings s;
        s.threads = 4;
        s.task_size = 64 << 10;
        return s;
    }

    void SetUp() override {
        saved_ = settings::global();
        settings::set_global(small_settings());
    }
    void TearDown() override {
        settings::set_global(saved_);
        const loop_totals& f = figures();
        std::printf("[ figures  ] %d fault-injected runs: %d succeeded (%d absorbed a persistent "
                    "fault), %d typed errors\n", f.runs, f.succeeded, f.absorbed, f.typed_errors);
        figures() = {};
    }

    /// Every transient kind, then every persistent errno in `errors`.
    void all_faults(const operation& op, std::initializer_list<int> errors = {EIO, ENOSPC, EDQUOT}) {
        // Once without faults: lazily made process-wide state (CUDA probing, the engine, its
        // staging buffers) exists before descriptors and allocations are counted.
        op.prepare();
        within(60s, op.name, op.run);
        op.ok();
        for (fault_kind k : {fault_kind::eintr, fault_kind::eagain, fault_kind::short_io}) {
            loop_totals t = fault_loop(op, k);
            EXPECT_GT(t.runs, 1) << op.name << ": no " << to_string(k) << " fault was ever injected";
        }
        for (int e : errors) {
            loop_totals t = fault_loop(op, fault_kind::persistent, e);
            EXPECT_GT(t.typed_errors, 0) << op.name << ": no persistent " << std::strerror(e) << " surfaced";
        }
    }

    settings saved_;
    temp_dir dir_;
};

inline bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

/// The shared part of every save: the target holds `old_bytes` (or is absent when empty) before
/// each run. After a run that succeeded it is the new file (`is_new`), alone in its directory.
/// After one that failed it is the complete old file (or absent) or the complete new one (the
/// error came after the rename, from the directory fsync), never anything else; a temporary
/// file may stay only when removing it was one of the failed calls, and the next save removes it.
inline operation save_operation(const std::string& name, const temp_dir& dir, const std::string& target,
                                std::vector<std::uint8_t> old_bytes, std::function<void()> save,
                                std::function<bool()> is_new) {
    operation op;
    op.name = name;
    op.prepare = [=] {
        ::unlink(target.c_str());
        if (!old_bytes.empty()) {
            std::ofstream(target, std::ios::binary)
                .write(reinterpret_cast<const char*>(old_bytes.data()), static_cast<std::streamsize>(old_bytes.size()));
        }
    };
    op.run = save;
    std::string base = target.substr(target.find_last_of('/') + 1);
    auto new_ok = [is_new] {
        try {
            return is_new();
        } catch (const std::exception&) {
            return false;
        }
    };
    op.ok = [=, &dir] {
        EXPECT_TRUE(new_ok()) << "the saved file is not the new contents";
        EXPECT_EQ(dir_entries(dir.path()), std::set<std::string>{base}) << "a temporary file was left behind";
    };
    op.failed = [=, &dir] {
        bool old_intact = old_bytes.empty() ? !file_exists(target) : read_whole(target) == old_bytes;
        EXPECT_TRUE(old_intact || (file_exists(target) && new_ok())) << "a failed save left a torn target";
        std::set<std::string> left = dir_entries(dir.path());
        left.erase(base);
        if (!left.empty()) {
            EXPECT_TRUE(fault_plan::was_hit("unlink")) << "a temporary file was left behind: " << *left.begin();
            save();  // the hook is off: this save must clear what the failed one left
            EXPECT_EQ(dir_entries(dir.path()), std::set<std::string>{base}) << "the next save left a temporary file";
        }
    };
    return op;
}

}  // namespace ferry::test
