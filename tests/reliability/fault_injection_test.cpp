// Fault injection: every operation that touches a file (ferry::file reads on the host and
// O_DIRECT paths, writes, fromfile/tofile, .npy and safetensors load and save) runs once for
// each k = 1, 2, ... with its k-th system call failing, until it gets through without reaching
// a k-th call. A transient fault (EINTR, EAGAIN, a short transfer) must be absorbed: the
// operation succeeds byte-exact. A persistent one (EIO, ENOSPC, EDQUOT; EINVAL for O_DIRECT)
// must surface as ferry::system_error carrying that errno, or be absorbed by a fallback with
// byte-exact results. Either way: no descriptor leaks, the workers go idle, a save leaves the
// complete old file (or none) and no temporary file behind, and nothing hangs (watchdog).
#include <cstring>
#include <map>
#include <optional>

#include "ferry/ferry.hpp"
#include "ferry/npy.hpp"
#include "ferry/raw.hpp"
#include "ferry/safetensors.hpp"
#include "reliability_util.hpp"
#include "test_util.hpp"

namespace ferry::test {
namespace {

using namespace std::chrono_literals;

// Small tasks so that even modest files split into several concurrent requests.
settings small_settings() {
    settings s;
    s.threads = 4;
    s.task_size = 64 << 10;
    return s;
}

array pattern_array(dtype t, std::vector<std::int64_t> shape, std::uint32_t seed) {
    array a(t, std::move(shape));
    auto bytes = pattern(a.nbytes(), 0, seed);
    std::memcpy(a.data(), bytes.data(), bytes.size());
    return a;
}

bool same_bytes(const array& a, const array& b) {
    return a.type() == b.type() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
           std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// One operation under test: prepare() sets the stage with the hook off, run() is what faults
// hit, ok() checks the result of a run that succeeded and failed() the state after a run that
// threw (both with the hook off).
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

// What the loops of one test did, printed at its end (docs/reliability.md quotes the figures).
loop_totals& figures() {
    static loop_totals t;
    return t;
}

// Fails the k-th call for k = 1, 2, ... until a run no longer reaches a k-th call.
loop_totals fault_loop(const operation& op, fault_kind kind, int error = EIO) {
    loop_totals t;
    std::string label = op.name + " / " + to_string(kind) +
                        (kind == fault_kind::persistent ? std::string(" ") + std::strerror(error) : "");
    for (int k = 1;; ++k) {
        if (k > 5000) {
            ADD_FAILURE() << label << ": still injecting at k = " << k;
            break;
        }
        op.prepare();
        const int fds = open_fds();
        std::optional<int> code;
        bool wrong_type = false;
        {
            fault_guard guard;
            fault_plan::arm(kind, k, error);
            try {
                within(60s, label, op.run);
            } catch (const system_error& e) {
                code = e.code();
            } catch (const std::exception& e) {
                wrong_type = true;
                ADD_FAILURE() << label << ", k = " << k << ": not a ferry::system_error: " << e.what();
            }
        }
        const int injected = fault_plan::injected.load();
        ++t.runs;
        if (wrong_type) {
        } else if (!code) {
            ++t.succeeded;
            if (kind == fault_kind::persistent && injected > 0) ++t.absorbed;
            op.ok();
        } else {
            ++t.typed_errors;
            if (kind != fault_kind::persistent)
                ADD_FAILURE() << label << ", k = " << k << ": a transient fault surfaced as errno " << *code;
            else
                EXPECT_EQ(*code, error) << label << ", k = " << k;
            op.failed();
        }
        EXPECT_EQ(open_fds(), fds) << label << ", k = " << k << ": descriptors leaked";
        EXPECT_TRUE(workers_idle(settings::global())) << label << ", k = " << k;
        if (::testing::Test::HasFailure()) break;  // one report per loop is enough
        if (injected == 0) break;                   // the run got through: done
    }
    figures().runs += t.runs;
    figures().succeeded += t.succeeded;
    figures().typed_errors += t.typed_errors;
    figures().absorbed += t.absorbed;
    return t;
}

class fault_injection : public ::testing::Test {
protected:
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

    // Every transient kind, then every persistent errno in `errors`.
    void all_faults(const operation& op, std::initializer_list<int> errors = {EIO, ENOSPC, EDQUOT}) {
        // Once without faults: lazily made process-wide state (CUDA probing, the engine)
        // exists before descriptors are counted.
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

constexpr std::size_t file_bytes = (3u << 20) + 123;  // several tasks of at least 1 MiB

TEST_F(fault_injection, file_read_host_path) {
    std::string path = dir_ / "in.bin";
    write_pattern_file(path, file_bytes);
    const auto expect = pattern(file_bytes);
    std::vector<std::uint8_t> back;
    operation op;
    op.name = "file::read (host)";
    op.prepare = [&] { back.assign(file_bytes, 0); };
    op.run = [&] {
        file f(path);
        f.read(back.data(), back.size(), 0);
    };
    op.ok = [&] { EXPECT_TRUE(back == expect) << "bytes differ after a read that succeeded"; };
    all_faults(op);
}

TEST_F(fault_injection, file_read_direct_path) {
    std::string path = dir_ / "in.bin";
    write_pattern_file(path, file_bytes);
    settings s = small_settings();
    s.direct_io = direct_io_mode::on;
    {
        file f(path, open_mode::read, s);
        std::vector<std::uint8_t> probe(file_bytes);
        f.read(probe.data(), probe.size(), 0);
        if (f.stats().reads(io_path::direct).bytes == 0)
            GTEST_SKIP() << "the file system here refuses O_DIRECT (" << dir_.path() << ")";
    }
    const std::uint64_t offset = 1000;  // unaligned on purpose
    const std::size_t n = file_bytes - offset - 7;
    const auto expect = pattern(n, offset);
    std::vector<std::uint8_t> back;
    operation op;
    op.name = "file::read (O_DIRECT)";
    op.prepare = [&] { back.assign(n, 0); };
    op.run = [&] {
        file f(path, open_mode::read, s);
        f.read(back.data(), n, offset);
    };
    op.ok = [&] { EXPECT_TRUE(back == expect) << "bytes differ after a read that succeeded"; };
    fault_plan::whole_blocks = true;  // O_DIRECT transfers move whole blocks, short or not
    all_faults(op, {EIO, ENOSPC, EINVAL});
    fault_plan::whole_blocks = false;
}

TEST_F(fault_injection, file_write_host_path) {
    std::string path = dir_ / "out.bin";
    const auto data = pattern(file_bytes, 0, 7);
    operation op;
    op.name = "file::write";
    op.prepare = [&] { ::unlink(path.c_str()); };
    op.run = [&] {
        file f(path, open_mode::write);
        f.write(data.data(), data.size(), 0);
        f.sync();
        f.close();
    };
    op.ok = [&] { EXPECT_TRUE(read_whole(path) == data) << "bytes differ after a write that succeeded"; };
    all_faults(op);
}

TEST_F(fault_injection, fromfile) {
    std::string path = dir_ / "in.f32";
    write_pattern_file(path, 4 * 75000);
    const auto expect = pattern(4 * 75000);
    std::optional<array> got;
    operation op;
    op.name = "fromfile";
    op.prepare = [&] { got.reset(); };
    op.run = [&] { got = fromfile(path, parse_dtype("<f4"), -1, 0, {300, 250}); };
    op.ok = [&] {
        ASSERT_TRUE(got);
        EXPECT_EQ(got->shape(), (std::vector<std::int64_t>{300, 250}));
        EXPECT_EQ(std::memcmp(got->data(), expect.data(), expect.size()), 0);
    };
    all_faults(op);
}

// The shared part of every save: the target holds `old_bytes` (or is absent when empty) before
// each run, and afterwards the complete new file or the complete old one, alone in its directory.
operation save_operation(const std::string& name, const temp_dir& dir, const std::string& target,
                         std::vector<std::uint8_t> old_bytes, std::function<void()> save,
                         std::function<void()> check_new) {
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
    op.ok = [=, &dir] {
        check_new();
        EXPECT_EQ(dir_entries(dir.path()), std::set<std::string>{base}) << "a temporary file was left behind";
    };
    op.failed = [=, &dir] {
        if (old_bytes.empty()) {
            EXPECT_TRUE(dir_entries(dir.path()).empty()) << "a failed save left something behind";
        } else {
            EXPECT_TRUE(read_whole(target) == old_bytes) << "a failed save changed the old file";
            EXPECT_EQ(dir_entries(dir.path()), std::set<std::string>{base}) << "a temporary file was left behind";
        }
    };
    return op;
}

TEST_F(fault_injection, tofile) {
    temp_dir out;
    std::string target = out / "t.bin";
    array a = pattern_array(dtype::float32, {200, 300}, 11);
    auto old_bytes = pattern(5000, 0, 3);
    all_faults(save_operation("tofile", out, target, old_bytes, [&] { tofile(a, target); }, [&] {
        auto b = read_whole(target);
        ASSERT_EQ(b.size(), a.nbytes());
        EXPECT_EQ(std::memcmp(b.data(), a.data(), a.nbytes()), 0);
    }));
}

TEST_F(fault_injection, load_npy) {
    std::string path = dir_ / "a.npy";
    array a = pattern_array(dtype::float64, {123, 301}, 5);
    save_npy(path, a);
    std::optional<array> got;
    operation op;
    op.name = "load_npy";
    op.prepare = [&] { got.reset(); };
    op.run = [&] { got = load_npy(path); };
    op.ok = [&] {
        ASSERT_TRUE(got);
        EXPECT_TRUE(same_bytes(*got, a));
    };
    all_faults(op);
}

TEST_F(fault_injection, save_npy_over_an_old_file) {
    temp_dir out;
    std::string target = out / "a.npy";
    array a = pattern_array(dtype::int32, {400, 201}, 9);
    save_npy(target, pattern_array(dtype::int16, {17}, 2));
    auto old_bytes = read_whole(target);
    all_faults(save_operation("save_npy", out, target, old_bytes, [&] { save_npy(target, a); },
                              [&] { EXPECT_TRUE(same_bytes(load_npy(target), a)); }));
}

TEST_F(fault_injection, save_npy_to_a_new_file) {
    temp_dir out;
    std::string target = out / "new.npy";
    array a = pattern_array(dtype::uint8, {250000}, 4);
    all_faults(save_operation("save_npy (new file)", out, target, {}, [&] { save_npy(target, a); },
                              [&] { EXPECT_TRUE(same_bytes(load_npy(target), a)); }));
}

std::vector<named_array> two_tensors(std::uint32_t seed) {
    return {{"weight", pattern_array(dtype::float32, {256, 300}, seed)},
            {"bias", pattern_array(dtype::int16, {3001}, seed + 1)}};
}

void expect_same_tensors(const std::vector<named_array>& got, const std::vector<named_array>& want) {
    ASSERT_EQ(got.size(), want.size());
    std::map<std::string, const array*> by_name;
    for (const auto& w : want) by_name[w.name] = &w.value;
    for (const auto& g : got) {
        ASSERT_TRUE(by_name.count(g.name)) << g.name;
        EXPECT_TRUE(same_bytes(g.value, *by_name[g.name])) << g.name;
    }
}

TEST_F(fault_injection, load_safetensors) {
    std::string path = dir_ / "m.safetensors";
    auto tensors = two_tensors(21);
    save_safetensors(path, tensors, {{"format", "pt"}});
    std::vector<named_array> got;
    operation op;
    op.name = "load_safetensors";
    op.prepare = [&] { got.clear(); };
    op.run = [&] { got = load_safetensors(path); };
    op.ok = [&] { expect_same_tensors(got, tensors); };
    all_faults(op);
}

TEST_F(fault_injection, save_safetensors_over_an_old_file) {
    temp_dir out;
    std::string target = out / "m.safetensors";
    auto tensors = two_tensors(31);
    save_safetensors(target, two_tensors(41), {});
    auto old_bytes = read_whole(target);
    all_faults(save_operation("save_safetensors", out, target, old_bytes,
                              [&] { save_safetensors(target, tensors, {{"k", "v"}}); },
                              [&] { expect_same_tensors(load_safetensors(target), tensors); }));
}

}  // namespace
}  // namespace ferry::test
