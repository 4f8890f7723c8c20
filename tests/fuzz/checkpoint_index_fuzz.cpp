// libFuzzer target: any bytes as a checkpoint's index (model.safetensors.index.json). The
// reader must accept them or throw format_error / checkpoint_error; never crash, hang or
// over-allocate. What it accepts is a weight_map sorted by tensor, each tensor once, and
// writing it out again as JSON must read back the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "checkpoint/index_json.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    ferry::checkpoints::index_json got;
    try {
        got = ferry::checkpoints::parse_index_json(text, "fuzz.json", "fuzz.json");
    } catch (const ferry::format_error&) {  // checkpoint_error is one
        return 0;
    }
    for (std::size_t i = 1; i < got.weight_map.size(); ++i)
        check(got.weight_map[i - 1].tensor < got.weight_map[i].tensor);
    for (const auto& e : got.weight_map) check(e.file < got.files.size());
    nlohmann::json again = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
    for (const auto& [k, v] : got.metadata) again["metadata"][k] = v;
    for (const auto& e : got.weight_map) again["weight_map"][std::string(e.tensor)] = got.files[e.file];
    const std::string written = again.dump();
    ferry::checkpoints::index_json back;
    try {
        back = ferry::checkpoints::parse_index_json(written, "again.json", "again.json");
    } catch (const ferry::format_error&) {
        check(false);  // JSON written by nlohmann::json from what was read must read back
    }
    check(back.weight_map.size() == got.weight_map.size());
    for (std::size_t i = 0; i < got.weight_map.size(); ++i) {
        check(back.weight_map[i].tensor == got.weight_map[i].tensor);
        check(back.files[back.weight_map[i].file] == got.files[got.weight_map[i].file]);
    }
    check(back.metadata == got.metadata);
    return 0;
}
