#include "ferry/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "ferry/checksum.hpp"
#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "ferry/stats.hpp"
#include "formats/safetensors_header.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

array patterned(dtype t, std::vector<std::int64_t> shape, std::uint32_t seed,
                storage_order layout = storage_order::c, byte_order order = native_byte_order) {
    array a(t, std::move(shape), placement::host(), layout, order);
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
    v.push_back({"scalar", patterned(dtype::float64, {}, seed++)});
    v.push_back({"empty", patterned(dtype::int32, {0, 7}, seed++)});
    v.push_back({"odd", patterned(dtype::uint8, {13}, seed++)});
    v.push_back({"fortran", patterned(dtype::float32, {4, 6}, seed++, storage_order::fortran)});
    v.push_back({"big", patterned(dtype::int64, {5}, seed++, storage_order::c, byte_order::big)});
    return v;
}

TEST(safetensors, round_trip_every_dtype) {
    test::temp_dir dir;
    auto arrays = every_dtype();
    std::map<std::string, std::string> meta{{"format", "pt"}, {"ünïcode", "välue"}};
    save_safetensors(dir / "m.safetensors", arrays, meta);
    safetensors_info info = read_safetensors_info(dir / "m.safetensors");
    EXPECT_EQ(info.metadata.erase("ferry.checksums"), 1u);  // written with the data (integrity_test.cpp)
    EXPECT_EQ(info.metadata, meta);
    EXPECT_EQ(info.data_offset % 8, 0u);
    for (const auto& t : info.tensors) EXPECT_EQ(t.begin % size_of(t.type), 0u) << t.name;
    auto loaded = load_safetensors(dir / "m.safetensors");
    ASSERT_EQ(loaded.size(), arrays.size());
    std::sort(arrays.begin(), arrays.end(), [](auto& a, auto& b) { return a.name < b.name; });
    for (std::size_t i = 0; i < arrays.size(); ++i) {
        EXPECT_EQ(loaded[i].name, arrays[i].name);
        EXPECT_EQ(loaded[i].value.type(), arrays[i].value.type());
        EXPECT_EQ(loaded[i].value.shape(), arrays[i].value.shape());
        EXPECT_EQ(loaded[i].value.layout(), storage_order::c);
        EXPECT_TRUE(loaded[i].value.is_native());
        EXPECT_EQ(checksum(loaded[i].value), checksum(arrays[i].value)) << arrays[i].name;
    }
    // All tensors of one load share one allocation.
    for (const auto& a : loaded) EXPECT_EQ(a.value.owner(), loaded[0].value.owner());
}

TEST(safetensors, empty_dict) {
    test::temp_dir dir;
    save_safetensors(dir / "e.safetensors", {}, {}, false);
    EXPECT_EQ(test::read_whole(dir / "e.safetensors").size(), 16u);
    EXPECT_TRUE(load_safetensors(dir / "e.safetensors").empty());
    save_safetensors(dir / "c.safetensors", {});  // with checksums: a header record, no tensor
    load_options always;
    always.verify = verify_mode::always;
    EXPECT_TRUE(load_safetensors(dir / "c.safetensors", always).empty());
}

TEST(safetensors, subset) {
    test::temp_dir dir;
    auto arrays = every_dtype();
    save_safetensors(dir / "m.safetensors", arrays);
    auto some = load_safetensors(dir / "m.safetensors", {}, {"odd", "t.float32", "odd"});
    ASSERT_EQ(some.size(), 2u);
    EXPECT_EQ(some[0].name, "odd");
    EXPECT_EQ(some[1].name, "t.float32");
    EXPECT_EQ(checksum(some[1].value), checksum(arrays[11].value));
    EXPECT_THROW(load_safetensors(dir / "m.safetensors", {}, {"nope"}), usage_error);
}

std::uint64_t read_requests(const io_stats& s) {
    std::uint64_t n = 0;
    for (const auto& c : s.read) n += c.requests;
    return n;
}

TEST(safetensors, one_read_per_merged_range) {
    test::temp_dir dir;
    std::vector<named_array> many;
    for (int i = 0; i < 200; ++i)
        many.push_back({"t" + std::to_string(1000 + i), patterned(dtype::float32, {i % 7 + 1}, i + 1)});
    // Sorted by name, this 3 MiB tensor lands between t1000 and t1001.
    many.push_back({"t1000.big", patterned(dtype::float32, {3 << 18}, 1)});
    save_safetensors(dir / "m.safetensors", many);
    io_stats before = process_stats();
    auto all = load_safetensors(dir / "m.safetensors");
    EXPECT_EQ(all.size(), many.size());
    // The 8-byte length, the header, and the whole data buffer as one range.
    EXPECT_EQ(read_requests(process_stats() - before), 3u);
    before = process_stats();
    auto some = load_safetensors(dir / "m.safetensors", {}, {"t1001", "t1002", "t1150", "t1199"});
    EXPECT_EQ(some.size(), 4u);
    EXPECT_EQ(read_requests(process_stats() - before), 3u);  // neighbours merge into one range
    before = process_stats();
    auto far = load_safetensors(dir / "m.safetensors", {}, {"t1000", "t1001"});
    EXPECT_EQ(read_requests(process_stats() - before), 4u);  // 3 MiB apart: two ranges
    EXPECT_EQ(checksum(far[1].value), checksum(many[1].value));
}

TEST(safetensors, ownership_outlives_siblings) {
    test::temp_dir dir;
    save_safetensors(dir / "m.safetensors", every_dtype());
    array kept;
    std::string expect;
    {
        auto all = load_safetensors(dir / "m.safetensors");
        kept = all.back().value;
        expect = checksum(kept);
    }
    EXPECT_EQ(checksum(kept), expect);
}

TEST(safetensors, as_float32) {
    test::temp_dir dir;
    array h(dtype::bfloat16, {2});
    std::uint16_t v[] = {0x3f80, 0xc040};  // 1, -3
    std::memcpy(h.data(), v, 4);
    save_safetensors(dir / "b.safetensors", {{"w", h}, {"i", patterned(dtype::int8, {3}, 1)}});
    load_options o;
    o.as = dtype::float32;
    auto l = load_safetensors(dir / "b.safetensors", o);
    EXPECT_EQ(l[0].value.type(), dtype::int8);
    ASSERT_EQ(l[1].value.type(), dtype::float32);
    EXPECT_EQ(static_cast<float*>(l[1].value.data())[1], -3.0f);
}

TEST(safetensors, refuses_what_it_cannot_store) {
    test::temp_dir dir;
    EXPECT_THROW(save_safetensors(dir / "x.safetensors", {{"c", array(dtype::complex128, {1})}}),
                 usage_error);
    EXPECT_THROW(save_safetensors(dir / "x.safetensors", {{"a", array(dtype::int8, {1})},
                                                          {"a", array(dtype::int8, {1})}}),
                 usage_error);
    EXPECT_THROW(save_safetensors(dir / "x.safetensors", {{"__metadata__", array(dtype::int8, {1})}}),
                 usage_error);
    EXPECT_FALSE(std::filesystem::exists(dir / "x.safetensors"));
}

// The header is JSON: names and metadata of bytes that are not UTF-8 are refused by name,
// before anything is written (the JSON library's own exception said neither file nor name).
TEST(safetensors, refuses_names_that_are_not_utf8) {
    test::temp_dir dir;
    try {
        save_safetensors(dir / "x.safetensors", {{"ok", array(dtype::int8, {1})}, {"w\xff", array(dtype::int8, {1})}});
        FAIL();
    } catch (const format_error& e) {
        EXPECT_EQ(e.file(), dir / "x.safetensors");
        EXPECT_EQ(e.field(), "tensor name");
        EXPECT_NE(e.reason().find("'w\\xff' is not UTF-8"), std::string::npos) << e.reason();
    }
    try {
        save_safetensors(dir / "x.safetensors", {{"w", array(dtype::int8, {1})}}, {{"k", "v\xfe"}});
        FAIL();
    } catch (const format_error& e) {
        EXPECT_EQ(e.field(), "metadata");
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "x.safetensors"));
    save_safetensors(dir / "x.safetensors", {{"caf\xc3\xa9", array(dtype::int8, {1})}});  // UTF-8 is fine
    EXPECT_EQ(load_safetensors(dir / "x.safetensors")[0].name, "caf\xc3\xa9");
}

TEST(safetensors_header, layout_is_aligned_and_padded) {
    const std::vector<std::int64_t> s3{3}, s2{2}, s1{1};
    std::vector<formats::safetensors_entry> e = {
        {"a", dtype::uint8, &s3, 3}, {"b", dtype::float64, &s2, 16}, {"c", dtype::int16, &s1, 2}};
    auto l = formats::layout_safetensors(e, {});
    EXPECT_EQ(l.offsets[1], 0u);   // 8-byte items first
    EXPECT_EQ(l.offsets[2], 16u);  // then 2-byte
    EXPECT_EQ(l.offsets[0], 18u);
    EXPECT_EQ(l.data_bytes, 21u);
    EXPECT_EQ(l.prefix.size() % 8, 0u);
    EXPECT_EQ(l.prefix[8], '{');
}

// The header is written as text: names that JSON must escape, metadata and shapes of several
// dimensions read back as they were given.
TEST(safetensors_header, layout_text_parses_back) {
    const std::vector<std::int64_t> matrix{2, 3}, scalar{}, empty{0, 5};
    const std::string odd = std::string("q\"b\\s\x01\n caf\xc3\xa9");
    std::vector<formats::safetensors_entry> e = {
        {odd, dtype::float32, &matrix, 24}, {"scalar", dtype::int64, &scalar, 8}, {"empty", dtype::float16, &empty, 0}};
    auto l = formats::layout_safetensors(e, {{"k\"", "v\\"}, {"format", "pt"}});
    const std::string header = l.prefix.substr(8);
    auto info = formats::parse_safetensors_header(header, 8 + header.size() + l.data_bytes, "f");
    ASSERT_EQ(info.tensors.size(), 3u);
    EXPECT_EQ(info.metadata.at("k\""), "v\\");
    EXPECT_EQ(info.metadata.at("format"), "pt");
    for (std::size_t i = 0; i < e.size(); ++i) {
        auto it = std::find_if(info.tensors.begin(), info.tensors.end(), [&](auto& t) { return t.name == e[i].name; });
        ASSERT_NE(it, info.tensors.end()) << i;
        EXPECT_EQ(it->shape, *e[i].shape);
        EXPECT_EQ(it->type, e[i].type);
        EXPECT_EQ(it->begin, l.offsets[i]);
        EXPECT_EQ(it->end - it->begin, e[i].bytes);
    }
}

TEST(safetensors_header, parse_checks_arithmetic) {
    auto parse = [](const std::string& h, std::uint64_t data) {
        return formats::parse_safetensors_header(h, 8 + h.size() + data, "f");
    };
    EXPECT_NO_THROW(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8));
    EXPECT_THROW(parse(R"({"a":{"dtype":"F32","shape":[9223372036854775807,2],"data_offsets":[0,8]}})", 8),
                 format_error);
    EXPECT_THROW(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", 8),
                 format_error);
    EXPECT_THROW(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"x":{"y":"z"}}})", 8),
                 format_error);
    // A dimension of 0 makes the tensor empty whatever the others say.
    EXPECT_NO_THROW(parse(R"({"a":{"dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[0,0]}})", 0));
}

TEST(safetensors, device_round_trip) {
    FERRY_REQUIRE_GPU();
    test::temp_dir dir;
    auto arrays = every_dtype();
    save_safetensors(dir / "m.safetensors", arrays);
    std::vector<named_array> on_device;
    for (auto& a : arrays) on_device.push_back({a.name, a.value.copy_to(placement::cuda(0))});
    save_safetensors(dir / "d.safetensors", on_device);
    EXPECT_EQ(test::read_whole(dir / "d.safetensors"), test::read_whole(dir / "m.safetensors"));
    load_options o;
    o.where = placement::cuda(0);
    auto loaded = load_safetensors(dir / "m.safetensors", o);
    auto host = load_safetensors(dir / "m.safetensors");
    for (std::size_t i = 0; i < loaded.size(); ++i) {
        EXPECT_EQ(loaded[i].value.where().kind, memory_kind::device);
        array back = loaded[i].value.copy_to(placement::host());
        EXPECT_EQ(std::memcmp(back.data(), host[i].value.data(), back.nbytes()), 0) << loaded[i].name;
    }
    auto subset = load_safetensors(dir / "m.safetensors", o, {"t.float16", "odd"});
    EXPECT_EQ(checksum(subset[1].value), checksum(host[std::distance(host.begin(),
        std::find_if(host.begin(), host.end(), [](auto& h) { return h.name == "t.float16"; }))].value));
    // `as` converts the floating types it can and refuses the rest (float8): convert those.
    std::vector<std::string> convertible;
    for (auto& h : host)
        if (!is_floating(h.value.type()) || can_astype(h.value.type(), dtype::float32)) convertible.push_back(h.name);
    o.as = dtype::float32;
    auto conv = load_safetensors(dir / "m.safetensors", o, convertible);
    load_options ho;
    ho.as = dtype::float32;
    auto hconv = load_safetensors(dir / "m.safetensors", ho, convertible);
    ASSERT_EQ(conv.size(), convertible.size());
    for (std::size_t i = 0; i < conv.size(); ++i) {
        array back = conv[i].value.copy_to(placement::host());
        ASSERT_EQ(back.nbytes(), hconv[i].value.nbytes());
        EXPECT_EQ(std::memcmp(back.data(), hconv[i].value.data(), back.nbytes()), 0) << conv[i].name;
    }
}

}  // namespace
}  // namespace ferry
