// libFuzzer target: any bytes as a .npy file. The preamble and header parsers must accept them
// or throw format_error; never crash, hang or allocate without bound. What they accept must
// survive a round trip through the header writer, and a file whose header parses must load (or
// fail with a typed error) through the real read and deserialize path.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ferry/error.hpp"
#include "ferry/npy.hpp"
#include "formats/npy_header.hpp"
#include "fuzz_util.hpp"

namespace {

void check(bool ok) {
    if (!ok) std::abort();  // an invariant broke: libFuzzer keeps the input
}

// The header numpy would write for what was parsed must parse back to the same thing.
void round_trip(const ferry::npy_info& info) {
    if (!ferry::has_numpy_descr(info.type.type)) return;
    std::string again = ferry::formats::format_npy_header(info.type, info.shape);
    auto pre = ferry::formats::parse_npy_preamble(again, "round trip");
    check(pre.size + pre.header_size == again.size());
    check(again.size() % 64 == 0);
    auto back = ferry::formats::parse_npy_header(std::string_view(again).substr(pre.size),
                                                 pre, "round trip");
    check(back.type == info.type);
    check(back.shape == info.shape);
    check(back.layout == ferry::storage_order::c);
    check(back.data_bytes == info.data_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view bytes(reinterpret_cast<const char*>(data), size);
    ferry::npy_info info;
    try {
        auto pre = ferry::formats::parse_npy_preamble(bytes, "fuzz");
        check(pre.header_size <= ferry::npy_max_header_size);
        if (pre.size + pre.header_size > size) return 0;
        info = ferry::formats::parse_npy_header(bytes.substr(pre.size, pre.header_size), pre,
                                                "fuzz");
        check(info.data_offset == pre.size + pre.header_size);
        check(info.shape.size() <= 64);
    } catch (const ferry::format_error&) {
        return 0;
    }
    round_trip(info);

    // The whole file through load_npy, with options picked from the input's length.
    const std::string& path = ferry::fuzz::scratch_file(data, size);
    ferry::load_options o;
    o.c_order = size & 1;
    o.keep_byte_order = size & 2;
    if (size & 4) o.as = (size & 8) ? ferry::dtype::float32 : ferry::dtype::float16;
    try {
        ferry::array a = ferry::load_npy(path, o);
        check(a.shape() == info.shape);
        check(info.data_offset + info.data_bytes <= size);
    } catch (const ferry::format_error&) {
    } catch (const ferry::usage_error&) {  // e.g. a conversion `as` cannot make
    }
    return 0;
}
