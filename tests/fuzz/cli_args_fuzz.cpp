// libFuzzer target: what a user types for `ferry load` / `ferry convert` on a raw file: the
// dtype, shape, device, conversion, offset and count options, parsed the way the CLI parses
// them (CLI11, shape split at commas) and then applied by fromfile to a file holding the rest
// of the input. Every input must end in a parsed result or a typed error (CLI::Error,
// usage_error, format_error); never a crash, a hang or an allocation the file cannot back.
//
// Input: up to seven lines (dtype, shape, device, as, offset, count, format), then the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "ferry/array.hpp"
#include "ferry/dtype.hpp"
#include "ferry/error.hpp"
#include "ferry/formats.hpp"
#include "ferry/raw.hpp"
#include "fuzz_util.hpp"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

struct raw_args {
    std::string dtype, device, as, format;
    std::vector<std::int64_t> shape;
    std::uint64_t offset = 0;
    std::int64_t count = -1;
};

// The options as tools/ferry/cmd_load.cpp declares them.
bool parse_args(const std::vector<std::string>& fields, raw_args& a) {
    CLI::App app("fuzz");
    app.add_option("--dtype", a.dtype);
    app.add_option("--shape", a.shape)->delimiter(',');
    app.add_option("--device", a.device);
    app.add_option("--as", a.as);
    app.add_option("--offset", a.offset);
    app.add_option("--count", a.count);
    app.add_option("--format", a.format);
    static const char* const flags[] = {"--dtype", "--shape", "--device", "--as",
                                        "--offset", "--count", "--format"};
    std::vector<std::string> args{"ferry"};
    for (std::size_t i = 0; i < fields.size() && i < 7; ++i) {
        if (fields[i].empty()) continue;
        args.push_back(std::string(flags[i]) + "=" + fields[i]);
    }
    std::vector<const char*> argv;
    for (const auto& s : args) argv.push_back(s.c_str());
    try {
        app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::Error&) {
        return false;
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> fields;
    std::string_view content;
    ferry::fuzz::split(text, '\n', 8, [&](std::string_view f) {
        if (fields.size() < 7) fields.emplace_back(f);
        else content = f;
    });

    raw_args a;
    if (!parse_args(fields, a)) return 0;
    try {
        ferry::typed_order type = ferry::parse_dtype(a.dtype.empty() ? "uint8" : a.dtype, "--dtype");
        check(ferry::dtype_from_name(ferry::to_string(type.type)) == type.type);
        if (ferry::has_numpy_descr(type.type)) {
            std::string descr = ferry::numpy_descr(type.type, type.order);
            check(ferry::parse_dtype(descr) == type);
        }
        ferry::load_options o;
        if (!a.device.empty()) {
            o.where = ferry::parse_placement(a.device);
            check(ferry::parse_placement(ferry::to_string(o.where)) == o.where);
        }
        if (!a.as.empty()) o.as = ferry::parse_dtype(a.as, "--as").type;
        if (!a.format.empty()) {
            auto f = ferry::parse_file_format(a.format);
            check(ferry::parse_file_format(ferry::to_string(f)) == f);
        }
        if (!a.shape.empty()) (void)ferry::shape_to_string(a.shape);
        // Pageable host memory only: pinned and GPU memory need a GPU the fuzzer runs without.
        if (o.where.kind != ferry::memory_kind::host) return 0;
        const std::string& path = ferry::fuzz::scratch_file(
            reinterpret_cast<const std::uint8_t*>(content.data()), content.size());
        ferry::array arr = ferry::fromfile(path, type, a.count, a.offset, a.shape, o);
        check(a.offset + arr.nbytes() <= content.size() || o.as.has_value());
        if (!a.shape.empty()) check(arr.shape() == a.shape);
    } catch (const ferry::usage_error&) {
    } catch (const ferry::format_error&) {
    }
    return 0;
}
