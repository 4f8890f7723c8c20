// `ferry load` of a list of files: which arguments make a list, and the report of the load.
#include "many_cmd.hpp"

#include <glob.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "checkpoint_cmd.hpp"
#include "cli_util.hpp"
#include "commands.hpp"
#include "ferry/checksum.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/many.hpp"
#include "ferry/memory.hpp"

namespace ferry::cli {
namespace {

bool is_pattern(const std::string& s) {
    std::error_code ec;
    return s.find("://") == std::string::npos && s.find_first_of("*?[") != std::string::npos &&
           !std::filesystem::exists(s, ec);
}

std::vector<std::string> matches(const std::string& pattern) {
    glob_t g{};
    int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> out;
    if (rc == 0)
        for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    return out;
}

std::vector<std::string> read_list(const std::string& list) {
    std::ifstream in(list);
    if (!in) throw usage_error("@" + list + ": the list of files cannot be read");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
        if (!line.empty() && line.front() != '#') out.push_back(line);
    }
    if (out.empty()) throw usage_error("@" + list + ": the list names no file (one path a line, # for comments)");
    return out;
}

bool is_shard(const std::string& p) { return p.ends_with(".safetensors"); }

}  // namespace

std::optional<std::vector<std::string>> file_list(const std::vector<std::string>& given) {
    if (given.size() == 1) {
        const std::string& one = given.front();
        if (one.starts_with("@") && one.size() > 1) return read_list(one.substr(1));
        if (!is_pattern(one)) return std::nullopt;
        std::vector<std::string> m = matches(one);
        if (m.empty() || std::any_of(m.begin(), m.end(), is_shard)) return std::nullopt;  // a checkpoint's
        return m;
    }
    std::vector<std::string> out;
    for (const auto& g : given) {
        if (!is_pattern(g)) {
            out.push_back(g);
            continue;
        }
        std::vector<std::string> m = matches(g);
        if (m.empty()) throw usage_error(g + ": no file matches");
        out.insert(out.end(), m.begin(), m.end());
    }
    return out;
}

int run_many_load(const many_load_args& a) {
    load_many_options o;
    any_load_options& each = o.each;
    each.load.where = a.device.empty() ? (cuda_device_count() > 0 ? placement::cuda(0) : placement::host())
                                       : parse_placement(a.device);
    if (!a.as.empty()) each.load.as = parse_dtype(a.as, "--as").type;
    each.raw_type = parse_dtype(a.dtype.empty() ? "uint8" : a.dtype, "--dtype");  // for the raw files, as for one
    each.shape = a.shape;
    each.tensors = a.tensors;
    o.failures = a.keep_going ? on_file_failure::skip : on_file_failure::raise;
    if (each.load.where.on_gpu()) device_buffer warm(4096, each.load.where.device);  // the context, off the clock

    io_stats before = process_stats();
    auto t0 = std::chrono::steady_clock::now();
    many_files got = load_many(a.paths, o);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    io_stats io = process_stats() - before;

    std::map<std::string, std::size_t> by_format;
    std::size_t arrays = 0;
    for (const auto& f : got.files)
        if (f) {
            ++by_format[std::string(to_string(f->format))];
            arrays += f->arrays.size();
        }
    const std::size_t loaded = a.paths.size() - got.failures.size();
    const double files_per_s = seconds > 0 ? loaded / seconds : 0.0;
    if (a.json) {
        nlohmann::json j;
        j["files"] = loaded;
        j["formats"] = by_format;
        j["arrays"] = arrays;
        j["device"] = to_string(each.load.where);
        j["bytes"] = got.payload_bytes;
        j["seconds"] = seconds;
        j["gbps"] = gbps(got.payload_bytes, seconds);
        j["files_per_second"] = files_per_s;
        j["io"] = io_json(io);
        nlohmann::json failed = nlohmann::json::array();
        for (const auto& f : got.failures) failed.push_back({{"index", f.index}, {"path", f.path}, {"error", f.message}});
        j["failures"] = failed;
        if (a.checksum) {
            nlohmann::json sums = nlohmann::json::array();
            for (std::size_t i = 0; i < got.files.size(); ++i)
                if (got.files[i])
                    for (const auto& na : got.files[i]->arrays)
                        sums.push_back({{"index", i}, {"name", na.name}, {"checksum", ferry::checksum(na.value)}});
            j["checksums"] = sums;
        }
        std::cout << j.dump(2) << "\n";
        return got.failures.empty() ? exit_ok : exit_input;
    }
    std::string formats;
    for (const auto& [f, n] : by_format) formats += (formats.empty() ? "" : ", ") + f + " " + std::to_string(n);
    std::printf("%zu files (%s), %zu arrays, %s into %s in %.3f s: %s, %.0f files/s\n", loaded, formats.c_str(), arrays,
                human_bytes(got.payload_bytes).c_str(), to_string(each.load.where).c_str(), seconds,
                rate_text(got.payload_bytes, seconds).c_str(), files_per_s);
    std::printf("  path: %s\n", io_text(io).c_str());
    if (a.checksum)
        for (std::size_t i = 0; i < got.files.size(); ++i)
            if (got.files[i])
                for (const auto& na : got.files[i]->arrays)
                    std::printf("  %s%s%s  %s\n", redact_location(a.paths[i]).c_str(), na.name.empty() ? "" : ":",
                                na.name.c_str(), ferry::checksum(na.value).c_str());
    for (const auto& f : got.failures) std::fprintf(stderr, "failed: %s\n", f.message.c_str());
    return got.failures.empty() ? exit_ok : exit_input;
}

}  // namespace ferry::cli
