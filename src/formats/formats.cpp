#include "ferry/formats.hpp"

#include <fcntl.h>

#include <nlohmann/json.hpp>
#include <string>

#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/npy.hpp"
#include "ferry/raw.hpp"
#include "ferry/safetensors.hpp"
#include "os/sys.hpp"

namespace ferry {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return s;
}

}  // namespace

std::string_view to_string(file_format f) noexcept {
    switch (f) {
    case file_format::npy: return "npy";
    case file_format::safetensors: return "safetensors";
    case file_format::raw: return "raw";
    }
    return "raw";
}

file_format parse_file_format(std::string_view text) {
    if (text == "npy") return file_format::npy;
    if (text == "safetensors") return file_format::safetensors;
    if (text == "raw") return file_format::raw;
    throw usage_error("format: expected npy, safetensors or raw, got '" + std::string(text) + "'");
}

file_format format_from_extension(const std::string& path) {
    std::string p = lower(path);
    if (ends_with(p, ".npy")) return file_format::npy;
    if (ends_with(p, ".safetensors")) return file_format::safetensors;
    return file_format::raw;
}

file_format detect_format(const std::string& path) {
    file f(path, open_mode::read);  // the checks and errors of every open
    std::uint64_t size = f.size();
    // The sniff reads the first bytes beside the engine: the header is read (and counted) once
    // more by its parser, and the counters add up to the bytes a load moves.
    unsigned char head[9] = {};
    std::size_t got = 0;
    if (int fd = sys::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
        ssize_t n = sys::pread(fd, head, sizeof head, 0);
        got = n > 0 ? static_cast<std::size_t>(n) : 0;
        sys::close(fd);
    } else {
        got = f.read_some(head, sizeof head, 0);
    }
    if (got >= 6 && std::string_view(reinterpret_cast<char*>(head), 6) == std::string_view("\x93NUMPY", 6))
        return file_format::npy;
    if (got == 9 && head[8] == '{') {
        std::uint64_t n = 0;
        for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(head[i]) << (8 * i);
        if (n <= safetensors_max_header_size && n <= size - 8) return file_format::safetensors;
    }
    return format_from_extension(path);
}

loaded_file load_any(const std::string& path, const any_load_options& options) {
    loaded_file out;
    out.format = options.format ? *options.format : detect_format(path);
    // What describes a raw file is refused for a file that describes itself, not ignored.
    bool raw_options = options.count != -1 || options.offset != 0 || !options.shape.empty() ||
                       options.raw_type.has_value();
    if (out.format != file_format::raw && raw_options)
        throw usage_error(path + ": dtype, count, offset and shape apply to raw files only (this is " +
                          std::string(to_string(out.format)) +
                          ", whose header gives them; to convert floating-point arrays, ask for that "
                          "type as the load's `as`)");
    if (out.format != file_format::safetensors && !options.tensors.empty())
        throw usage_error(path + ": tensor names apply to safetensors files only (this is " +
                          std::string(to_string(out.format)) + ")");
    switch (out.format) {
    case file_format::npy: {
        npy_info info;
        array a = load_npy(path, options.load, &info);  // the header is read once
        out.payload_bytes = info.data_bytes;
        out.arrays.push_back({"", std::move(a)});
        break;
    }
    case file_format::safetensors: {
        safetensors_info info;
        out.arrays = load_safetensors(path, options.load, options.tensors, &info);
        out.metadata = info.metadata;
        // Both lists are sorted by name.
        auto t = info.tensors.begin();
        for (const auto& a : out.arrays) {
            while (t != info.tensors.end() && t->name < a.name) ++t;
            if (t != info.tensors.end() && t->name == a.name) out.payload_bytes += t->end - t->begin;
        }
        break;
    }
    case file_format::raw: {
        if (!options.raw_type)
            throw usage_error(path + ": a raw file needs a dtype (e.g. float32 or >f4)");
        array a = fromfile(path, *options.raw_type, options.count, options.offset, options.shape,
                           options.load);
        out.payload_bytes = a.size() * size_of(options.raw_type->type);
        out.arrays.push_back({"", std::move(a)});
        break;
    }
    }
    return out;
}

std::string to_json(const file_description& d, const std::string& path) {
    nlohmann::json j;
    j["file"] = path;
    j["format"] = std::string(to_string(d.format));
    j["version"] = d.version.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.version);
    j["file_size"] = d.file_size;
    j["header_size"] = d.header_size;
    nlohmann::json arrays = nlohmann::json::array();
    for (const auto& e : d.arrays) {
        // One-byte elements have no byte order (numpy's '|').
        nlohmann::json order = size_of(e.type.type) > 1 ? nlohmann::json(std::string(to_string(e.type.order)))
                                                          : nlohmann::json(nullptr);
        arrays.push_back({{"name", e.name},
                          {"dtype", std::string(to_string(e.type.type))},
                          {"byte_order", order},
                          {"order", e.layout == storage_order::fortran ? "F" : "C"},
                          {"shape", e.shape},
                          {"begin", e.begin},
                          {"end", e.end}});
    }
    j["arrays"] = arrays;
    j["metadata"] = d.metadata;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

file_description describe_file(const std::string& path, std::optional<file_format> format) {
    file_description d;
    d.format = format ? *format : detect_format(path);
    {
        file f(path, open_mode::read);
        d.file_size = f.size();
    }
    switch (d.format) {
    case file_format::npy: {
        npy_info info = read_npy_info(path);
        d.version = std::to_string(info.major) + "." + std::to_string(info.minor);
        d.header_size = info.data_offset;
        d.arrays.push_back({"", info.type, info.layout, info.shape, info.data_offset,
                            info.data_offset + info.data_bytes});
        break;
    }
    case file_format::safetensors: {
        safetensors_info info = read_safetensors_info(path);
        d.header_size = info.data_offset;
        d.metadata = info.metadata;
        for (const auto& t : info.tensors)
            d.arrays.push_back({t.name, {t.type, byte_order::little}, storage_order::c, t.shape,
                                info.data_offset + t.begin, info.data_offset + t.end});
        break;
    }
    case file_format::raw: break;
    }
    return d;
}

void save_any(const std::string& path, file_format format, const std::vector<named_array>& arrays,
              const std::map<std::string, std::string>& metadata, bool checksums) {
    if (format != file_format::safetensors) {
        if (arrays.size() != 1)
            throw usage_error(std::string(to_string(format)) + " files hold exactly one array; got " +
                              std::to_string(arrays.size()) + " (choose one tensor)");
        if (!metadata.empty())
            throw usage_error(std::string(to_string(format)) + " files cannot store metadata");
    }
    switch (format) {
    case file_format::npy: return save_npy(path, arrays.front().value);
    case file_format::raw: return tofile(arrays.front().value, path);
    case file_format::safetensors: return save_safetensors(path, arrays, metadata, checksums);
    }
}

}  // namespace ferry
