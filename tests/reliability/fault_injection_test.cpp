// Fault injection: every operation that touches a file (ferry::file reads on the host and
// O_DIRECT paths, writes, fromfile/tofile, .npy and safetensors load and save) runs once for
// each k = 1, 2, ... with its k-th system call failing, until it gets through without reaching
// a k-th call. A transient fault (EINTR, EAGAIN, a short transfer) must be absorbed: the
// operation succeeds byte-exact. A persistent one (EIO, ENOSPC, EDQUOT; EINVAL for O_DIRECT)
// must surface as ferry::system_error carrying that errno, or be absorbed by a fallback with
// byte-exact results. Either way: no descriptor leaks, the workers go idle, a save leaves the
// complete old file (or none), or the complete new one when only the directory fsync after the
// rename failed, never a torn one; and nothing hangs (watchdog). The loop: fault_loop.hpp.
#include "fault_loop.hpp"
#include "ferry/npy.hpp"
#include "ferry/raw.hpp"
#include "ferry/safetensors.hpp"
#include "test_util.hpp"

namespace ferry::test {
namespace {

using fault_injection = fault_test;

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

TEST_F(fault_injection, tofile) {
    temp_dir out;
    std::string target = out / "t.bin";
    array a = pattern_array(dtype::float32, {200, 300}, 11);
    auto old_bytes = pattern(5000, 0, 3);
    all_faults(save_operation("tofile", out, target, old_bytes, [&] { tofile(a, target); }, [&] {
        auto b = read_whole(target);
        return b.size() == a.nbytes() && std::memcmp(b.data(), a.data(), a.nbytes()) == 0;
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
                              [&] { return same_bytes(load_npy(target), a); }));
}

TEST_F(fault_injection, save_npy_to_a_new_file) {
    temp_dir out;
    std::string target = out / "new.npy";
    array a = pattern_array(dtype::uint8, {250000}, 4);
    all_faults(save_operation("save_npy (new file)", out, target, {}, [&] { save_npy(target, a); },
                              [&] { return same_bytes(load_npy(target), a); }));
}

std::vector<named_array> two_tensors(std::uint32_t seed) {
    return {{"weight", pattern_array(dtype::float32, {256, 300}, seed)},
            {"bias", pattern_array(dtype::int16, {3001}, seed + 1)}};
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
    op.ok = [&] { EXPECT_TRUE(same_tensors(got, tensors)); };
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
                              [&] { return same_tensors(load_safetensors(target), tensors); }));
}

}  // namespace
}  // namespace ferry::test
