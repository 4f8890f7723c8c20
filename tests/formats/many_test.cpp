// ferry::load_many: a list of .npy, safetensors and raw files in one call, in order, with each
// failure named by its place in the list.
#include "ferry/many.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "ferry/npy.hpp"
#include "ferry/safetensors.hpp"
#include "ferry/stop.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

array filled(dtype t, std::vector<std::int64_t> shape, int seed) {
    array a(t, std::move(shape));
    auto* p = static_cast<std::uint8_t*>(a.data());
    for (std::size_t i = 0; i < a.nbytes(); ++i) p[i] = static_cast<std::uint8_t>(i * 7 + seed);
    return a;
}

/// n .npy files f0.npy ... in `dir`, each of `type` and `shape`, filled after its index.
std::vector<std::string> npy_files(const test::temp_dir& dir, int n, dtype type, std::vector<std::int64_t> shape) {
    std::vector<std::string> paths;
    for (int i = 0; i < n; ++i) {
        paths.push_back(dir / ("f" + std::to_string(i) + ".npy"));
        save_npy(paths.back(), filled(type, shape, i));
    }
    return paths;
}

bool same_bytes(const array& a, const array& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(load_many, files_of_every_format_in_the_order_given) {
    test::temp_dir dir;
    std::vector<std::string> paths;
    std::vector<array> want;
    for (int i = 0; i < 40; ++i) {
        array a = filled(i % 2 ? dtype::float32 : dtype::int16, {i % 5, 3}, i);
        paths.push_back(dir / ("f" + std::to_string(i) + ".npy"));
        save_npy(paths.back(), a);
        want.push_back(std::move(a));
    }
    save_safetensors(dir / "s.safetensors", {{"b", filled(dtype::uint8, {4}, 1)}, {"a", filled(dtype::int64, {2}, 2)}});
    paths.push_back(dir / "s.safetensors");
    test::write_pattern_file(dir / "r.raw", 64);
    paths.push_back(dir / "r.raw");
    paths.push_back(paths.front());  // the same file twice: two arrays

    load_many_options o;
    o.each.raw_type = parse_dtype("int32");  // the raw file's; the headers give the others theirs
    o.each.shape = {4, 4};
    many_files got = load_many(paths, o);
    ASSERT_EQ(got.files.size(), paths.size());
    EXPECT_TRUE(got.failures.empty());
    for (int i = 0; i < 40; ++i) {
        ASSERT_TRUE(got.files[i]);
        EXPECT_EQ(got.files[i]->format, file_format::npy);
        EXPECT_TRUE(same_bytes(got.files[i]->arrays.at(0).value, want[i])) << paths[i];
    }
    const auto& st = *got.files[40];
    ASSERT_EQ(st.arrays.size(), 2u);
    EXPECT_EQ(st.arrays[0].name, "a");
    EXPECT_EQ(got.files[41]->arrays.at(0).value.shape(), (std::vector<std::int64_t>{4, 4}));
    auto raw = test::pattern(64);
    EXPECT_EQ(std::memcmp(got.files[41]->arrays[0].value.data(), raw.data(), 64), 0);
    EXPECT_TRUE(same_bytes(got.files[42]->arrays[0].value, want[0]));
    EXPECT_NE(got.files[42]->arrays[0].value.data(), got.files[0]->arrays[0].value.data());
    std::uint64_t bytes = 0;
    for (const auto& f : got.files) bytes += f->payload_bytes;
    EXPECT_EQ(got.payload_bytes, bytes);
    EXPECT_TRUE(load_many({}).files.empty());
}

TEST(load_many, the_first_failure_by_index_is_raised_with_its_place) {
    test::temp_dir dir;
    std::vector<std::string> paths = npy_files(dir, 30, dtype::float64, {8});
    std::ofstream(dir / "f7.npy", std::ios::binary | std::ios::trunc) << "\x93NUMPY\x01";  // cut short
    paths[20] = dir / "missing.npy";
    try {
        load_many(paths);
        FAIL() << "a broken file in the list loaded";
    } catch (const file_in_list_error& e) {
        EXPECT_EQ(e.index(), 7u);
        EXPECT_EQ(e.path(), paths[7]);
        EXPECT_NE(std::string(e.what()).find("paths[7]"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("f7.npy"), std::string::npos) << e.what();
        EXPECT_THROW(std::rethrow_exception(e.cause()), error);
    }
}

TEST(load_many, skipping_returns_the_others_and_lists_every_failure) {
    test::temp_dir dir;
    std::vector<std::string> paths = npy_files(dir, 10, dtype::uint8, {3});
    paths[2] = dir / "missing.npy";
    test::write_pattern_file(dir / "f5.npy", 20);  // not a .npy file under its name
    load_many_options o;
    o.failures = on_file_failure::skip;
    o.files_in_flight = 3;
    many_files got = load_many(paths, o);
    ASSERT_EQ(got.failures.size(), 2u);
    EXPECT_EQ(got.failures[0].index, 2u);
    EXPECT_EQ(got.failures[1].index, 5u);
    EXPECT_THROW(std::rethrow_exception(got.failures[0].error), system_error);
    EXPECT_NE(got.failures[0].message.find("missing.npy"), std::string::npos);
    for (std::size_t i = 0; i < paths.size(); ++i) EXPECT_EQ(bool(got.files[i]), i != 2 && i != 5) << i;
}

TEST(load_many, a_stop_request_ends_the_call_as_an_interrupt) {
    test::temp_dir dir;
    std::vector<std::string> paths = npy_files(dir, 20, dtype::uint8, {3});
    stop_source stop;
    stop.request_stop();
    stop_scope scope(stop);
    EXPECT_THROW(load_many(paths), interrupted_error);
}

// read_whole_files: each file's bytes in a shared block, its arrays described where they lie.
TEST(read_whole_files, arrays_lie_in_shared_blocks_as_their_headers_say) {
    test::temp_dir dir;
    std::vector<std::string> paths;
    std::vector<array> want;
    for (int i = 0; i < 50; ++i) {
        array a = filled(i % 3 ? dtype::float32 : dtype::uint16, {i % 4, 5}, i);
        if (i % 7 == 0) a = a.with_endian(byte_order::big);  // kept as the file has it
        paths.push_back(dir / ("f" + std::to_string(i) + ".npy"));
        save_npy(paths.back(), a);
        want.push_back(std::move(a));
    }
    save_safetensors(dir / "s.safetensors", {{"b", filled(dtype::uint8, {4}, 1)}, {"a", filled(dtype::int64, {2}, 2)}});
    paths.push_back(dir / "s.safetensors");
    test::write_pattern_file(dir / "r.raw", 64);
    paths.push_back(dir / "r.raw");
    whole_files_options o;
    o.raw_type = dtype::int32;
    o.raw_shape = std::vector<std::int64_t>{2, 8};
    o.threads = 3;
    o.block_bytes = 1024;  // a few files a block
    std::vector<std::size_t> handed;
    std::size_t described = 0;  // files whose arrays were already described when their block was handed over
    o.on_block = [&](std::size_t b, const std::vector<std::size_t>& files, const std::vector<whole_file>& all) {
        handed.insert(handed.end(), files.begin(), files.end());
        for (std::size_t i : files)
            if (all[i].block == b && !all[i].arrays.empty() && !all[i].error) ++described;
    };
    whole_files got = read_whole_files(paths, o);
    ASSERT_EQ(got.files.size(), paths.size());
    EXPECT_GT(got.blocks.size(), 3u);
    EXPECT_LT(got.blocks.size(), paths.size());
    EXPECT_EQ(handed.size(), paths.size());  // each file once, in the block that holds it
    EXPECT_EQ(described, paths.size());
    for (std::size_t i = 0; i < 50; ++i) {
        const whole_file& f = got.files[i];
        ASSERT_FALSE(f.error) << i;
        ASSERT_EQ(f.arrays.size(), 1u);
        const whole_file_array& a = f.arrays[0];
        EXPECT_EQ(a.type.type, want[i].type());
        EXPECT_EQ(a.type.order, want[i].endian()) << i;
        EXPECT_EQ(a.shape, want[i].shape());
        ASSERT_EQ(a.nbytes, want[i].nbytes());
        const auto* at = static_cast<const unsigned char*>(got.blocks[f.block].data()) + a.offset;
        EXPECT_EQ(std::memcmp(at, want[i].data(), a.nbytes), 0) << i;
        EXPECT_EQ(a.offset % 64, 0u);
    }
    const whole_file& st = got.files[50];
    EXPECT_EQ(st.format, file_format::safetensors);
    ASSERT_EQ(st.arrays.size(), 2u);
    EXPECT_EQ(st.arrays[0].name, "a");
    EXPECT_EQ(st.arrays[1].shape, (std::vector<std::int64_t>{4}));
    const whole_file& raw = got.files[51];
    EXPECT_EQ(raw.format, file_format::raw);
    EXPECT_EQ(raw.arrays.at(0).shape, (std::vector<std::int64_t>{2, 8}));
    auto pattern = test::pattern(64);
    EXPECT_EQ(std::memcmp(static_cast<const unsigned char*>(got.blocks[raw.block].data()) + raw.arrays[0].offset,
                          pattern.data(), 64), 0);
}

TEST(read_whole_files, failures_stay_with_their_file) {
    test::temp_dir dir;
    std::vector<std::string> paths = npy_files(dir, 12, dtype::float64, {8});
    std::ofstream(dir / "f3.npy", std::ios::binary | std::ios::trunc) << "\x93NUMPY\x01";  // cut short
    paths[5] = dir / "missing.npy";
    test::write_pattern_file(dir / "f8.npy", 20);  // not a .npy file under its name
    paths.push_back(dir / "r.raw");
    test::write_pattern_file(paths.back(), 10);     // a raw file, and no dtype for it
    paths.push_back(dir.path());                    // a directory
    whole_files_options o;
    o.stop_at_failure = false;
    whole_files got = read_whole_files(paths, o);
    for (std::size_t i = 0; i < paths.size(); ++i)
        EXPECT_EQ(bool(got.files[i].error), i == 3 || i == 5 || i == 8 || i >= 12) << i;
    auto message = [&](std::size_t i) {
        try {
            std::rethrow_exception(got.files[i].error);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
    };
    EXPECT_THROW(std::rethrow_exception(got.files[5].error), system_error);
    EXPECT_THROW(std::rethrow_exception(got.files[3].error), format_error);
    EXPECT_THROW(std::rethrow_exception(got.files[12].error), usage_error);
    EXPECT_NE(message(3).find("f3.npy"), std::string::npos) << message(3);
    EXPECT_NE(message(5).find("missing.npy"), std::string::npos) << message(5);
    EXPECT_NE(message(12).find("dtype"), std::string::npos) << message(12);
    EXPECT_NE(message(13).find("directory"), std::string::npos) << message(13);
    EXPECT_TRUE(got.files[4].arrays.size() == 1 && !got.files[4].error);
}

TEST(read_whole_files, a_stop_request_ends_the_call_as_an_interrupt) {
    test::temp_dir dir;
    std::vector<std::string> paths = npy_files(dir, 20, dtype::uint8, {3});
    stop_source stop;
    stop.request_stop();
    stop_scope scope(stop);
    EXPECT_THROW(read_whole_files(paths), interrupted_error);
}

TEST(read_whole_files, a_block_handed_over_in_vain_fails_its_files_not_the_call) {
    test::temp_dir dir;
    std::vector<std::string> paths = npy_files(dir, 16, dtype::uint8, {100});
    whole_files_options o;
    o.threads = 4;
    o.block_bytes = 1024;
    o.stop_at_failure = false;
    o.on_block = [](std::size_t b, const std::vector<std::size_t>&, const std::vector<whole_file>&) {
        if (b % 2) throw usage_error("no memory for the copy");
    };
    whole_files got = read_whole_files(paths, o);
    std::size_t failed = 0;
    for (const auto& f : got.files) {
        if (!f.error) continue;
        ++failed;
        EXPECT_TRUE(f.arrays.empty());
        EXPECT_THROW(std::rethrow_exception(f.error), usage_error);
    }
    EXPECT_GT(failed, 0u);
    EXPECT_LT(failed, paths.size());
}

// to_native_c_many: the arrays of many files made native and C-ordered in one go.
void check_native_c_many(placement where) {
    std::vector<array> host, in;
    for (int i = 0; i < 9; ++i) {
        array a = filled(i % 2 ? dtype::float32 : dtype::int16, {3 + i % 2, 5}, i);
        if (i % 3 == 0) a = a.with_endian(byte_order::big);
        storage_order layout = i % 4 == 1 ? storage_order::fortran : storage_order::c;
        a = array(a.owner(), a.data(), a.type(), a.shape(), a.where(), layout, a.endian());
        host.push_back(a);
        in.push_back(a.copy_to(where));
    }
    std::vector<array> got = to_native_c_many(in);
    ASSERT_EQ(got.size(), in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
        array want = to_native_c(host[i]);
        array back = got[i].copy_to(placement::host());
        EXPECT_TRUE(got[i].is_native());
        EXPECT_EQ(got[i].layout(), storage_order::c);
        EXPECT_EQ(got[i].where(), where);
        EXPECT_TRUE(same_bytes(back, want)) << i;
        if (host[i].layout() == storage_order::c) EXPECT_EQ(got[i].data(), in[i].data()) << "swapped in place";
    }
}

TEST(to_native_c_many, host_arrays) { check_native_c_many(placement::host()); }

TEST(to_native_c_many, gpu_arrays) {
    FERRY_REQUIRE_GPU();
    check_native_c_many(placement::cuda(0));
}

// read_whole_files_to_device: every array lands in GPU memory native and C-ordered, byte for
// byte what the file holds once made so on the host; a failure stays with its file; the
// pinned blocks are taken again within a call and from one call to the next.
TEST(read_whole_files_to_device, arrays_arrive_native_and_c_ordered) {
    FERRY_REQUIRE_GPU();
    test::temp_dir dir;
    std::vector<std::string> paths;
    std::vector<array> want;
    for (int i = 0; i < 60; ++i) {
        array a = filled(i % 3 ? dtype::float32 : (i % 2 ? dtype::uint16 : dtype::complex64), {i % 4 + 2, 5 + i % 3}, i);
        byte_order order = i % 5 == 0 ? byte_order::big : native_byte_order;
        storage_order layout = i % 4 == 1 ? storage_order::fortran : storage_order::c;
        array in_file(a.owner(), a.data(), a.type(), a.shape(), placement::host(), layout, order);
        paths.push_back(dir / ("f" + std::to_string(i) + ".npy"));
        save_npy(paths.back(), in_file);
        want.push_back(to_native_c(in_file));
    }
    paths.push_back(dir / "missing.npy");
    save_safetensors(dir / "s.safetensors", {{"b", filled(dtype::uint8, {4}, 1)}, {"a", filled(dtype::int64, {0, 2}, 2)}});
    paths.push_back(dir / "s.safetensors");
    whole_files_options o;
    o.threads = 3;
    o.block_bytes = 1024;  // a few files a block: more blocks than threads
    o.stop_at_failure = false;
    whole_files_device_options d;
    d.arena_bytes = 4096;  // several arenas
    std::size_t handed = 0;
    bool on_gpu = true;
    d.on_block = [&](const array& block, const std::vector<std::size_t>& files, const std::vector<whole_file>& all) {
        on_gpu = on_gpu && block.where().on_gpu();
        for (std::size_t i : files) handed += !all[i].error;
    };
    for (int call = 0; call < 2; ++call) {
        handed = 0;
        whole_files got = read_whole_files_to_device(paths, o, d);
        EXPECT_TRUE(on_gpu);
        EXPECT_EQ(handed, paths.size() - 1);
        EXPECT_GT(got.blocks.size(), 3u);
        EXPECT_EQ(got.pinned_made + got.pinned_reused, got.blocks.size());
        if (call == 1) EXPECT_GT(got.pinned_reused, 0u);  // the first call's, their copies done
        ASSERT_TRUE(got.files[60].error);
        EXPECT_THROW(std::rethrow_exception(got.files[60].error), system_error);
        for (std::size_t i = 0; i < 60; ++i) {
            const whole_file& f = got.files[i];
            ASSERT_FALSE(f.error) << i;
            const whole_file_array& a = f.arrays.at(0);
            EXPECT_EQ(a.type.order, native_byte_order);
            EXPECT_EQ(a.layout, storage_order::c);
            EXPECT_EQ(a.shape, want[i].shape());
            ASSERT_EQ(a.nbytes, want[i].nbytes());
            const array& block = got.blocks[f.block];
            ASSERT_TRUE(block.where().on_gpu());
            std::vector<unsigned char> back(a.nbytes);
            copy_memory(back.data(), static_cast<const unsigned char*>(block.data()) + a.offset, a.nbytes);
            EXPECT_EQ(std::memcmp(back.data(), want[i].data(), a.nbytes), 0) << "file " << i << ", call " << call;
        }
        const whole_file& st = got.files[61];
        ASSERT_EQ(st.arrays.size(), 2u);
        std::vector<unsigned char> b(4);
        copy_memory(b.data(), static_cast<const unsigned char*>(got.blocks[st.block].data()) + st.arrays[1].offset, 4);
        array wb = filled(dtype::uint8, {4}, 1);
        EXPECT_EQ(std::memcmp(b.data(), wb.data(), 4), 0);
        EXPECT_EQ(st.arrays[0].nbytes, 0u);
    }
}

}  // namespace
}  // namespace ferry
