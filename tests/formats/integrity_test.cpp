// Checksums written with safetensors files and checked on load: every injected corruption of
// the data (first and last byte of every tensor, a chunk boundary, random places) is refused
// with an integrity_error that names the tensor and a byte range holding the flipped byte;
// header flips are refused or load the original bytes; files without checksums load under
// "auto" and are refused under "always"; no false alarm on intact files.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "ferry/error.hpp"
#include "ferry/integrity.hpp"
#include "ferry/safetensors.hpp"
#include "formats/checksum_record.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

array patterned(dtype t, std::vector<std::int64_t> shape, std::uint32_t seed) {
    array a(t, std::move(shape), placement::host());
    auto bytes = test::pattern(a.nbytes(), 0, seed);
    if (t == dtype::bool_)
        for (auto& b : bytes) b &= 1;
    if (a.nbytes()) std::memcpy(a.data(), bytes.data(), a.nbytes());
    return a;
}

std::vector<named_array> every_dtype() {
    std::vector<named_array> v;
    std::uint32_t seed = 1;
    for (int i = 0; i < dtype_count; ++i) {
        auto t = static_cast<dtype>(i);
        if (!safetensors_name(t)) continue;
        v.push_back({"t." + std::string(to_string(t)), patterned(t, {3, 5}, seed++)});
    }
    v.push_back({"empty", patterned(dtype::int32, {0, 7}, seed++)});
    v.push_back({"scalar", patterned(dtype::float64, {}, seed++)});
    return v;
}

void flip(const std::string& path, std::uint64_t at, unsigned char mask = 0x01) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ mask);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
}

load_options verifying(verify_mode m = verify_mode::always) {
    load_options o;
    o.verify = m;
    return o;
}

// Loads `path` expecting an integrity_error whose tensor is `tensor` and whose range holds `at`.
void expect_caught(const std::string& path, const std::string& tensor, std::uint64_t at) {
    try {
        load_safetensors(path, verifying(verify_mode::automatic));
        ADD_FAILURE() << "byte " << at << " of '" << tensor << "' flipped, and the load succeeded";
    } catch (const integrity_error& e) {
        EXPECT_EQ(e.tensor(), tensor);
        EXPECT_LE(e.begin(), at);
        EXPECT_GT(e.end(), at);
        EXPECT_NE(e.expected(), e.actual());
        EXPECT_EQ(e.expected().rfind("crc32c:", 0), 0u);
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

// The record's JSON, written entry by entry: names that need escaping, tensors of no chunk and
// of several, and a record of many tensors come back as they were, in name order.
TEST(integrity, record_text_round_trips) {
    formats::checksum_record r;
    r.chunk = 1 << 20;
    r.header = 0x0123abcd;
    r.tensors["plain.weight"] = {0xdeadbeef, 0x00000001};
    r.tensors["quote\"back\\slash"] = {0xffffffff};
    r.tensors["line\nfeed\ttab\x01"] = {};
    r.tensors["caf\xc3\xa9"] = {0x12345678};
    for (int i = 0; i < 20000; ++i)
        r.tensors["layers." + std::to_string(i) + ".scale"] = {static_cast<std::uint32_t>(i) * 2654435761u};
    const std::string text = formats::to_json(r);
    EXPECT_EQ(text.rfind("{\"v\":1,\"alg\":\"crc32c\",\"chunk\":1048576,\"header\":\"0123abcd\",\"tensors\":{", 0), 0u)
        << text.substr(0, 80);
    const formats::checksum_record back = formats::parse_checksum_record(text, "m.safetensors");
    EXPECT_EQ(back.chunk, r.chunk);
    EXPECT_EQ(back.header, r.header);
    EXPECT_EQ(back.tensors, r.tensors);
    EXPECT_LT(text.find("\"caf\xc3\xa9\""), text.find("\"layers.0.scale\""));  // name order, as the map holds them
}

TEST(integrity, save_records_and_load_checks_every_dtype) {
    test::temp_dir dir;
    auto arrays = every_dtype();
    save_safetensors(dir / "m.safetensors", arrays, {{"step", "3"}});
    safetensors_info info = read_safetensors_info(dir / "m.safetensors");
    auto rec = formats::find_record(info, "m");
    ASSERT_TRUE(rec.has_value());
    EXPECT_EQ(rec->tensors.size(), arrays.size());
    EXPECT_TRUE(rec->tensors.at("empty").empty());  // nothing to hash: no chunk
    EXPECT_EQ(info.metadata.at("step"), "3");
    auto loaded = load_safetensors(dir / "m.safetensors", verifying());
    EXPECT_EQ(loaded.size(), arrays.size());
}

TEST(integrity, first_and_last_byte_of_every_tensor) {
    test::temp_dir dir;
    save_safetensors(dir / "good.safetensors", every_dtype());
    safetensors_info info = read_safetensors_info(dir / "good.safetensors");
    for (const auto& t : info.tensors) {
        if (t.end == t.begin) continue;
        for (std::uint64_t at : {info.data_offset + t.begin, info.data_offset + t.end - 1}) {
            std::filesystem::copy_file(dir / "good.safetensors", dir / "bad.safetensors",
                                       std::filesystem::copy_options::overwrite_existing);
            flip(dir / "bad.safetensors", at, 0x80);
            expect_caught(dir / "bad.safetensors", t.name, at);
        }
    }
}

TEST(integrity, random_flips_in_the_data) {
    test::temp_dir dir;
    std::vector<named_array> arrays{{"a", patterned(dtype::float32, {1000, 37}, 4)},
                                    {"b", patterned(dtype::bfloat16, {333}, 5)},
                                    {"c", patterned(dtype::uint8, {4097}, 6)}};
    save_safetensors(dir / "good.safetensors", arrays);
    safetensors_info info = read_safetensors_info(dir / "good.safetensors");
    const std::uint64_t size = std::filesystem::file_size(dir / "good.safetensors");
    std::mt19937_64 rng(2026);
    for (int round = 0; round < 40; ++round) {
        const std::uint64_t at = info.data_offset + rng() % (size - info.data_offset);
        std::filesystem::copy_file(dir / "good.safetensors", dir / "bad.safetensors",
                                   std::filesystem::copy_options::overwrite_existing);
        flip(dir / "bad.safetensors", at, static_cast<unsigned char>(1u << (rng() % 8)));
        std::string owner;
        for (const auto& t : info.tensors)
            if (at >= info.data_offset + t.begin && at < info.data_offset + t.end) owner = t.name;
        expect_caught(dir / "bad.safetensors", owner, at);
    }
}

TEST(integrity, chunk_boundary_of_a_large_tensor) {
    test::temp_dir dir;
    const std::int64_t n = static_cast<std::int64_t>(formats::checksum_chunk) + 64;
    save_safetensors(dir / "big.safetensors", {{"w", patterned(dtype::uint8, {n}, 8)}});
    safetensors_info info = read_safetensors_info(dir / "big.safetensors");
    auto rec = formats::find_record(info, "big");
    ASSERT_EQ(rec->tensors.at("w").size(), 2u);
    const std::uint64_t boundary = info.data_offset + formats::checksum_chunk;
    for (std::uint64_t at : {boundary - 1, boundary}) {
        flip(dir / "big.safetensors", at);
        try {
            load_safetensors(dir / "big.safetensors");
            ADD_FAILURE() << "flip at " << at << " loaded";
        } catch (const integrity_error& e) {
            // The chunk holding the byte, not the whole tensor.
            EXPECT_EQ(e.begin(), at < boundary ? info.data_offset : boundary) << e.what();
            EXPECT_EQ(e.end(), at < boundary ? boundary : info.data_offset + n) << e.what();
        }
        flip(dir / "big.safetensors", at);  // back
    }
    EXPECT_EQ(load_safetensors(dir / "big.safetensors", verifying()).size(), 1u);
}

TEST(integrity, header_flips_are_refused_or_change_nothing) {
    test::temp_dir dir;
    std::vector<named_array> arrays{{"x", patterned(dtype::int32, {6}, 11)}, {"y", patterned(dtype::float16, {5}, 12)}};
    save_safetensors(dir / "good.safetensors", arrays, {{"k", "v"}});
    safetensors_info info = read_safetensors_info(dir / "good.safetensors");
    auto good = load_safetensors(dir / "good.safetensors");
    std::size_t refused = 0;
    for (std::uint64_t at = 8; at < info.data_offset; ++at) {
        std::filesystem::copy_file(dir / "good.safetensors", dir / "bad.safetensors",
                                   std::filesystem::copy_options::overwrite_existing);
        flip(dir / "bad.safetensors", at, static_cast<unsigned char>(1u << (at % 8)));
        try {
            auto got = load_safetensors(dir / "bad.safetensors");
            // Loaded: then every tensor is the one written, byte for byte, type and shape.
            ASSERT_EQ(got.size(), good.size()) << at;
            for (std::size_t i = 0; i < got.size(); ++i) {
                ASSERT_EQ(got[i].name, good[i].name) << at;
                ASSERT_EQ(got[i].value.type(), good[i].value.type()) << at;
                ASSERT_EQ(got[i].value.shape(), good[i].value.shape()) << at;
                ASSERT_EQ(std::memcmp(got[i].value.data(), good[i].value.data(), good[i].value.nbytes()), 0) << at;
            }
        } catch (const format_error&) {
            ++refused;
        } catch (const integrity_error&) {
            ++refused;
        }
    }
    EXPECT_GT(refused, (info.data_offset - 8) / 2);
}

TEST(integrity, same_size_dtype_change_is_caught_by_the_header_checksum) {
    test::temp_dir dir;
    save_safetensors(dir / "m.safetensors", {{"x", patterned(dtype::int32, {4}, 1)}});
    auto bytes = test::read_whole(dir / "m.safetensors");
    std::string s(bytes.begin(), bytes.end());
    auto at = s.find("\"I32\"");
    ASSERT_NE(at, std::string::npos);
    flip(dir / "m.safetensors", at + 1, 'I' ^ 'U');  // I32 -> U32: same size, still valid
    EXPECT_EQ(read_safetensors_info(dir / "m.safetensors").tensors[0].type, dtype::uint32);
    try {
        load_safetensors(dir / "m.safetensors");
        ADD_FAILURE() << "a changed dtype loaded";
    } catch (const integrity_error& e) {
        EXPECT_EQ(e.tensor(), "");
        EXPECT_NE(std::string(e.what()).find("header"), std::string::npos) << e.what();
    }
}

TEST(integrity, truncated_file_is_refused) {
    test::temp_dir dir;
    save_safetensors(dir / "m.safetensors", {{"x", patterned(dtype::float32, {100}, 1)}});
    std::filesystem::resize_file(dir / "m.safetensors", std::filesystem::file_size(dir / "m.safetensors") - 1);
    EXPECT_THROW(load_safetensors(dir / "m.safetensors"), format_error);
}

TEST(integrity, without_checksums_auto_loads_and_always_refuses) {
    test::temp_dir dir;
    save_safetensors(dir / "m.safetensors", {{"x", patterned(dtype::float32, {10}, 1)}}, {}, false);
    EXPECT_EQ(read_safetensors_info(dir / "m.safetensors").metadata.count("ferry.checksums"), 0u);
    EXPECT_EQ(load_safetensors(dir / "m.safetensors").size(), 1u);
    try {
        load_safetensors(dir / "m.safetensors", verifying(verify_mode::always));
        ADD_FAILURE() << "always loaded a file without checksums";
    } catch (const integrity_error& e) {
        EXPECT_NE(std::string(e.what()).find("no checksums"), std::string::npos) << e.what();
    }
}

TEST(integrity, never_skips_the_check_and_subsets_check_their_own_tensors) {
    test::temp_dir dir;
    save_safetensors(dir / "m.safetensors",
                     {{"a", patterned(dtype::float32, {10}, 1)}, {"b", patterned(dtype::float32, {10}, 2)}});
    safetensors_info info = read_safetensors_info(dir / "m.safetensors");
    const auto& b = *std::find_if(info.tensors.begin(), info.tensors.end(), [](auto& t) { return t.name == "b"; });
    flip(dir / "m.safetensors", info.data_offset + b.begin + 3);
    EXPECT_EQ(load_safetensors(dir / "m.safetensors", verifying(verify_mode::never)).size(), 2u);
    EXPECT_EQ(load_safetensors(dir / "m.safetensors", {}, {"a"}).size(), 1u);  // a is intact
    EXPECT_THROW(load_safetensors(dir / "m.safetensors", {}, {"b"}), integrity_error);
}

TEST(integrity, a_copied_record_is_replaced_not_trusted) {
    test::temp_dir dir;
    save_safetensors(dir / "a.safetensors", {{"x", patterned(dtype::float32, {10}, 1)}});
    auto meta = read_safetensors_info(dir / "a.safetensors").metadata;
    ASSERT_EQ(meta.count("ferry.checksums"), 1u);
    save_safetensors(dir / "b.safetensors", {{"x", patterned(dtype::float32, {10}, 2)}}, meta);
    EXPECT_EQ(load_safetensors(dir / "b.safetensors", verifying()).size(), 1u);
    save_safetensors(dir / "c.safetensors", {{"x", patterned(dtype::float32, {10}, 2)}}, meta, false);
    EXPECT_EQ(read_safetensors_info(dir / "c.safetensors").metadata.count("ferry.checksums"), 0u);
}

TEST(integrity, device_save_records_what_the_host_does_and_device_loads_check) {
    FERRY_REQUIRE_GPU();
    test::temp_dir dir;
    auto arrays = every_dtype();
    arrays.push_back({"large", patterned(dtype::uint8, {static_cast<std::int64_t>(formats::checksum_chunk) + 4099}, 3)});
    std::vector<named_array> on_device;
    for (auto& a : arrays) on_device.push_back({a.name, a.value.copy_to(placement::cuda(0))});
    save_safetensors(dir / "h.safetensors", arrays);
    save_safetensors(dir / "d.safetensors", on_device);
    EXPECT_EQ(test::read_whole(dir / "d.safetensors"), test::read_whole(dir / "h.safetensors"));
    load_options o = verifying();
    o.where = placement::cuda(0);
    EXPECT_EQ(load_safetensors(dir / "d.safetensors", o).size(), arrays.size());
    safetensors_info info = read_safetensors_info(dir / "d.safetensors");
    const auto& t = *std::find_if(info.tensors.begin(), info.tensors.end(), [](auto& x) { return x.name == "large"; });
    const std::uint64_t at = info.data_offset + t.begin + formats::checksum_chunk + 4000;
    flip(dir / "d.safetensors", at);
    try {
        load_safetensors(dir / "d.safetensors", o);
        ADD_FAILURE() << "a GPU load of a flipped byte succeeded";
    } catch (const integrity_error& e) {
        EXPECT_EQ(e.tensor(), "large");
        EXPECT_EQ(e.begin(), info.data_offset + t.begin + formats::checksum_chunk);
    }
}

}  // namespace
}  // namespace ferry
