// libFuzzer target: any bytes as the "ferry.checksums" record of a safetensors file. The parser
// must accept them or throw format_error naming the field; never crash, hang or over-allocate.
// What it accepts must write out and read back the same, and checking a small tensor against
// it must either pass or throw integrity_error (never anything else).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ferry/error.hpp"
#include "ferry/integrity.hpp"
#include "formats/checksum_record.hpp"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    ferry::formats::checksum_record got;
    try {
        got = ferry::formats::parse_checksum_record(text, "fuzz.safetensors");
    } catch (const ferry::format_error& e) {
        check(e.field() == "__metadata__/ferry.checksums");
        return 0;
    }
    const std::string written = ferry::formats::to_json(got);
    ferry::formats::checksum_record back;
    try {
        back = ferry::formats::parse_checksum_record(written, "again.safetensors");
    } catch (const ferry::format_error&) {
        check(false);  // what was accepted and written again must read back
    }
    check(back.chunk == got.chunk && back.header == got.header && back.tensors == got.tensors);
    // A one-tensor file whose metadata is this record, checked against 16 bytes of data.
    ferry::safetensors_info info;
    info.data_offset = 64;
    info.tensors.push_back({"t", ferry::dtype::uint8, {16}, 0, 16});
    info.metadata.emplace(std::string(ferry::formats::checksum_key), std::string(text));
    const unsigned char bytes[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    std::vector<ferry::formats::loaded_view> views{{&info.tensors[0], {bytes, 16, ferry::placement::host()}}};
    try {
        ferry::formats::verify_loaded(info, "fuzz.safetensors", views, ferry::verify_mode::always, nullptr);
    } catch (const ferry::integrity_error&) {
    }
    return 0;
}
