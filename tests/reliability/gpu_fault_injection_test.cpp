// Fault injection on the GPU paths: the loop of fault_loop.hpp over reads into and writes from
// device memory (staged, staged with O_DIRECT, stream-ordered, cuFile), fromfile, .npy loads
// that run the byte-swap, conversion and transpose kernels, and safetensors and .npy saves
// from device memory. The k-th call may be a system call, a CUDA runtime call, a kernel launch
// or a cuFile call; the error must be the typed one for it (system_error with the errno,
// cuda_error with the CUDA code, cufile_error), the bytes exact when it succeeds, and no device
// or pinned allocation, descriptor or busy worker left behind. Needs a GPU; skips without one.
#include "fault_loop.hpp"
#include "ferry/npy.hpp"
#include "ferry/raw.hpp"
#include "ferry/safetensors.hpp"
#include "shim/cufile.hpp"
#include "shim/cufile_test_util.hpp"

namespace ferry::test {
namespace {

constexpr std::size_t file_bytes = (1u << 20) + 4100;  // many 64 KiB tasks, an odd tail

class gpu_fault_injection : public fault_test {
protected:
    void SetUp() override {
        fault_test::SetUp();
        FERRY_REQUIRE_GPU();
    }
    // Host errors are covered by the host loops; here the CUDA seam's two meanings.
    void gpu_faults(const operation& op) { all_faults(op, {EIO, ENOMEM}); }
    // Stream lanes of 64 KiB buffers (what 1 MiB leaves after the staging buffers): a request
    // spans 17 chunks over the 4 lanes. Made global too: the loop checks that engine's workers.
    static settings small_lanes() {
        settings s = small_settings();
        s.staging_buffer_size = 64 << 10;
        s.staging_memory_limit = 1 << 20;
        settings::set_global(s);
        return s;
    }
};

// A .npy file written by hand, for byte orders and layouts save_npy does not produce.
void write_npy(const std::string& path, const std::string& descr, bool fortran, const std::string& shape,
               const std::vector<std::uint8_t>& payload) {
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
    std::size_t total = 10 + dict.size() + 1;
    dict.append((64 - total % 64) % 64, ' ');
    dict.push_back('\n');
    std::string head = "\x93NUMPY";
    head.push_back('\x01');
    head.push_back('\x00');
    head.push_back(static_cast<char>(dict.size() & 0xff));
    head.push_back(static_cast<char>(dict.size() >> 8));
    std::ofstream out(path, std::ios::binary);
    out << head << dict;
    out.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
}

std::vector<std::uint8_t> device_bytes(const void* p, std::size_t n) {
    std::vector<std::uint8_t> v(n);
    copy_memory(v.data(), p, n);
    return v;
}

TEST_F(gpu_fault_injection, read_to_device_staged) {
    std::string path = dir_ / "in.bin";
    write_pattern_file(path, file_bytes);
    const auto expect = pattern(file_bytes);
    device_buffer dst(file_bytes);
    operation op;
    op.name = "file::read (device, staged)";
    op.prepare = [&] { fill_memory(dst.data(), 0, file_bytes); };
    op.run = [&] {
        file f(path);
        f.read(dst.data(), file_bytes, 0);
    };
    op.ok = [&] { EXPECT_TRUE(device_bytes(dst.data(), file_bytes) == expect) << "bytes differ"; };
    gpu_faults(op);
}

TEST_F(gpu_fault_injection, read_to_device_staged_direct) {
    std::string path = dir_ / "in.bin";
    write_pattern_file(path, file_bytes);
    settings s = small_settings();
    s.direct_io = direct_io_mode::on;
    s.gds = gds_mode::off;
    device_buffer dst(file_bytes);
    {
        file f(path, open_mode::read, s);
        f.read(dst.data(), file_bytes, 0);
        if (f.stats().reads(io_path::staged_direct).bytes == 0)
            GTEST_SKIP() << "the file system here refuses O_DIRECT (" << dir_.path() << ")";
    }
    const std::uint64_t offset = 1000;  // unaligned on purpose
    const std::size_t n = file_bytes - offset - 7;
    const auto expect = pattern(n, offset);
    operation op;
    op.name = "file::read (device, staged+direct)";
    op.prepare = [&] { fill_memory(dst.data(), 0, file_bytes); };
    op.run = [&] {
        file f(path, open_mode::read, s);
        f.read(dst.data(), n, offset);
    };
    op.ok = [&] { EXPECT_TRUE(device_bytes(dst.data(), n) == expect) << "bytes differ"; };
    fault_plan::whole_blocks = true;  // O_DIRECT transfers move whole blocks, short or not
    gpu_faults(op);
    fault_plan::whole_blocks = false;
}

TEST_F(gpu_fault_injection, read_to_device_stream_ordered) {
    std::string path = dir_ / "in.bin";
    write_pattern_file(path, file_bytes);
    const auto expect = pattern(file_bytes);
    device_buffer dst(file_bytes);
    stream st;
    operation op;
    const settings s = small_lanes();
    op.name = "file::read_async (device, on a stream)";
    op.prepare = [&] { fill_memory(dst.data(), 0, file_bytes); };
    op.run = [&] {
        file f(path, open_mode::read, s);
        auto done = f.read_async(dst.data(), file_bytes, 0, st.get());
        done.get();
        st.synchronize();
    };
    op.ok = [&] { EXPECT_TRUE(device_bytes(dst.data(), file_bytes) == expect) << "bytes differ"; };
    gpu_faults(op);
}

TEST_F(gpu_fault_injection, write_from_device_stream_ordered) {
    std::string path = dir_ / "out.bin";
    const auto data = pattern(file_bytes, 0, 7);
    device_buffer src(file_bytes);
    copy_memory(src.data(), data.data(), file_bytes);
    const settings s = small_lanes();
    stream st;
    operation op;
    op.name = "file::write_async (device, on a stream)";
    op.prepare = [&] { ::unlink(path.c_str()); };
    op.run = [&] {
        file f(path, open_mode::write, s);
        auto done = f.write_async(src.data(), file_bytes, 0, st.get());
        done.get();
        st.synchronize();
        f.sync();
        f.close();
    };
    op.ok = [&] { EXPECT_TRUE(read_whole(path) == data) << "bytes differ after a write that succeeded"; };
    gpu_faults(op);
}

TEST_F(gpu_fault_injection, write_from_device_staged) {
    std::string path = dir_ / "out.bin";
    const auto data = pattern(file_bytes, 0, 5);
    device_buffer src(file_bytes);
    copy_memory(src.data(), data.data(), file_bytes);
    operation op;
    op.name = "file::write (device, staged)";
    op.prepare = [&] { ::unlink(path.c_str()); };
    op.run = [&] {
        file f(path, open_mode::write);
        f.write(src.data(), file_bytes, 0);
        f.sync();
        f.close();
    };
    op.ok = [&] { EXPECT_TRUE(read_whole(path) == data) << "bytes differ after a write that succeeded"; };
    gpu_faults(op);
}

TEST_F(gpu_fault_injection, cufile_read_and_write) {
    settings s = small_settings();
    s.gds = gds_mode::on;
    s.gds_threshold = 0;
    std::string in = dir_ / "in.bin", out = dir_ / "out.bin";
    write_pattern_file(in, file_bytes);
    if (std::string why = test::cufile_unusable_reason(s.cufile_library, in); !why.empty()) GTEST_SKIP() << why;
    const auto expect = pattern(file_bytes);
    device_buffer buf(file_bytes);
    operation rd;
    rd.name = "file::read (device, cuFile)";
    rd.prepare = [&] { fill_memory(buf.data(), 0, file_bytes); };
    rd.run = [&] {
        file f(in, open_mode::read, s);
        f.read(buf.data(), file_bytes, 0);
    };
    rd.ok = [&] { EXPECT_TRUE(device_bytes(buf.data(), file_bytes) == expect) << "bytes differ"; };
    gpu_faults(rd);

    operation wr;
    wr.name = "file::write (device, cuFile)";
    wr.prepare = [&] {
        ::unlink(out.c_str());
        copy_memory(buf.data(), expect.data(), file_bytes);
    };
    wr.run = [&] {
        file f(out, open_mode::write, s);
        f.write(buf.data(), file_bytes, 0);
        f.close();
    };
    wr.ok = [&] { EXPECT_TRUE(read_whole(out) == expect) << "bytes differ after a write that succeeded"; };
    gpu_faults(wr);
}

TEST_F(gpu_fault_injection, fromfile_to_device) {
    std::string path = dir_ / "in.f4";
    write_pattern_file(path, 4 * 70000);
    const auto expect = pattern(4 * 70000);
    load_options o;
    o.where = placement::cuda();
    std::optional<array> got;
    operation op;
    op.name = "fromfile (device)";
    op.prepare = [&] { got.reset(); };
    op.run = [&] { got = fromfile(path, parse_dtype("<f4"), -1, 0, {350, 200}, o); };
    op.ok = [&] {
        ASSERT_TRUE(got);
        EXPECT_EQ(got->where().kind, memory_kind::device);
        EXPECT_TRUE(device_bytes(got->data(), expect.size()) == expect);
    };
    gpu_faults(op);
}

// .npy loads into device memory that end in a kernel: the byte swap, a conversion, a transpose.
struct npy_case {
    const char* name;
    const char* descr;
    bool fortran;
    bool c_order;
    std::optional<dtype> as;
};

// Test listings name the parameter, not its bytes.
void PrintTo(const npy_case& c, std::ostream* os) { *os << c.name; }

class gpu_npy_fault_injection : public gpu_fault_injection, public ::testing::WithParamInterface<npy_case> {};

TEST_P(gpu_npy_fault_injection, load_npy_to_device) {
    const npy_case& c = GetParam();
    std::string path = dir_ / "a.npy";
    const std::int64_t rows = 300, cols = 170;
    typed_order t = parse_dtype(c.descr);
    const std::size_t n = static_cast<std::size_t>(rows * cols) * size_of(t.type);
    write_npy(path, c.descr, c.fortran, "(300, 170)", pattern(n, 0, 8));
    load_options host;
    host.c_order = c.c_order;
    host.as = c.as;
    const array want = load_npy(path, host);  // the host conversions are checked elsewhere
    load_options o = host;
    o.where = placement::cuda();
    std::optional<array> got;
    operation op;
    op.name = std::string("load_npy (device, ") + c.name + ")";
    op.prepare = [&] { got.reset(); };
    op.run = [&] { got = load_npy(path, o); };
    op.ok = [&] {
        ASSERT_TRUE(got);
        EXPECT_EQ(got->layout(), want.layout());
        EXPECT_TRUE(same_bytes(*got, want));
    };
    gpu_faults(op);
}

INSTANTIATE_TEST_SUITE_P(kernels, gpu_npy_fault_injection,
                         ::testing::Values(npy_case{"byte swap", ">f4", false, false, std::nullopt},
                                           npy_case{"float64 to float32", "<f8", false, false, dtype::float32},
                                           npy_case{"Fortran to C", "<i2", true, true, std::nullopt}),
                         [](const auto& info) {
                             std::string s = info.param.name;
                             for (char& ch : s)
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return s;
                         });

std::vector<named_array> device_tensors(std::uint32_t seed) {
    return {{"weight", pattern_array(dtype::float32, {256, 300}, seed).copy_to(placement::cuda())},
            {"bias", pattern_array(dtype::bfloat16, {3001}, seed + 1).copy_to(placement::cuda())}};
}

TEST_F(gpu_fault_injection, load_safetensors_to_device) {
    std::string path = dir_ / "m.safetensors";
    auto tensors = device_tensors(3);
    save_safetensors(path, tensors, {{"format", "pt"}});
    load_options o;
    o.where = placement::cuda();
    std::vector<named_array> got;
    operation op;
    op.name = "load_safetensors (device)";
    op.prepare = [&] { got.clear(); };
    op.run = [&] { got = load_safetensors(path, o); };
    op.ok = [&] {
        for (const auto& g : got) EXPECT_EQ(g.value.where().kind, memory_kind::device) << g.name;
        EXPECT_TRUE(same_tensors(got, tensors));
    };
    gpu_faults(op);
}

TEST_F(gpu_fault_injection, save_safetensors_from_device) {
    temp_dir out;
    std::string target = out / "m.safetensors";
    auto tensors = device_tensors(13);
    save_safetensors(target, device_tensors(23), {});
    auto old_bytes = read_whole(target);
    gpu_faults(save_operation("save_safetensors (device)", out, target, old_bytes,
                              [&] { save_safetensors(target, tensors, {{"k", "v"}}); },
                              [&] { return same_tensors(load_safetensors(target), tensors); }));
}

TEST_F(gpu_fault_injection, save_npy_from_device) {
    temp_dir out;
    std::string target = out / "a.npy";
    array a = pattern_array(dtype::float64, {300, 211}, 17).copy_to(placement::cuda());
    gpu_faults(save_operation("save_npy (device)", out, target, {}, [&] { save_npy(target, a); },
                              [&] { return same_bytes(load_npy(target), a); }));
}

}  // namespace
}  // namespace ferry::test
