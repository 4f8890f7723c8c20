// libFuzzer target: any bytes as a whole safetensors file (length prefix, header, data). The
// parser must accept them or throw format_error; never crash, hang or over-allocate. What it
// accepts must tile the data buffer exactly, survive a round trip through the layout writer,
// and load (or fail with a typed error) through the real read path.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ferry/error.hpp"
#include "ferry/safetensors.hpp"
#include "formats/safetensors_header.hpp"
#include "fuzz_util.hpp"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

void invariants(const ferry::safetensors_info& info, std::size_t size) {
    check(info.data_offset == 8 + info.header_size);
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < info.tensors.size(); ++i) {
        const auto& t = info.tensors[i];
        check(t.begin <= t.end);
        total += t.end - t.begin;
        if (i > 0) check(info.tensors[i - 1].name < t.name);  // sorted, no duplicates
    }
    check(info.data_offset + total == size);  // exact tiling, no trailing bytes
}

// Writing the parsed tensors out again must give a header that parses to the same tensors.
void round_trip(const ferry::safetensors_info& info) {
    std::vector<ferry::formats::safetensors_entry> entries;
    for (const auto& t : info.tensors) entries.push_back({t.name, t.type, &t.shape, t.end - t.begin});
    auto layout = ferry::formats::layout_safetensors(entries, info.metadata);
    std::uint64_t file_size = layout.prefix.size() + layout.data_bytes;
    auto back = ferry::formats::parse_safetensors_header(
        std::string_view(layout.prefix).substr(8), file_size, "round trip");
    check(back.tensors.size() == info.tensors.size());
    for (std::size_t i = 0; i < back.tensors.size(); ++i) {
        check(back.tensors[i].name == info.tensors[i].name);
        check(back.tensors[i].type == info.tensors[i].type);
        check(back.tensors[i].shape == info.tensors[i].shape);
    }
    check(back.metadata == info.metadata);
    check(back.data_offset % 8 == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 8) return 0;
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(data[i]) << (8 * i);
    ferry::safetensors_info info;
    try {
        ferry::formats::check_safetensors_header_size(n, size, "fuzz");
        info = ferry::formats::parse_safetensors_header(
            std::string_view(reinterpret_cast<const char*>(data) + 8, n), size, "fuzz");
    } catch (const ferry::format_error&) {
        return 0;
    }
    invariants(info, size);
    try {
        round_trip(info);
    } catch (const ferry::format_error&) {
        check(false);  // the writer produced a header the parser refuses
    }

    const std::string& path = ferry::fuzz::scratch_file(data, size);
    ferry::load_options o;
    o.keep_byte_order = size & 1;
    if (size & 2) o.as = (size & 4) ? ferry::dtype::float32 : ferry::dtype::bfloat16;
    try {
        auto arrays = ferry::load_safetensors(path, o);
        check(arrays.size() == info.tensors.size());
        for (std::size_t i = 0; i < arrays.size(); ++i) {
            check(arrays[i].name == info.tensors[i].name);
            check(arrays[i].value.shape() == info.tensors[i].shape);
        }
    } catch (const ferry::format_error&) {
    } catch (const ferry::usage_error&) {
    }
    return 0;
}
