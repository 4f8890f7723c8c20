// `ferry info DIR` and `ferry load DIR` for checkpoints (see checkpoint_cmd.hpp).
#include "checkpoint_cmd.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "cli_util.hpp"
#include "commands.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/checksum.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/memory.hpp"

namespace ferry::cli {
namespace {

bool has_glob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// The last part of a shard's path or URL, for tables (a URL's query never shows).
std::string leaf(const std::string& path) {
    std::string shown = redact_location(path);
    if (shown.find("://") != std::string::npos) {
        shown = shown.substr(0, shown.find('?'));
        return shown.substr(shown.rfind('/') + 1);
    }
    return std::filesystem::path(shown).filename().string();
}

std::int64_t parse_int(const std::string& s, const std::string& spec) {
    try {
        std::size_t used = 0;
        std::int64_t v = std::stoll(s, &used);
        if (used == s.size()) return v;
    } catch (...) {
    }
    throw usage_error("--slice " + spec + ": '" + s + "' is not an integer");
}

// NAME:DIM:START:STOP, or PATTERN:DIM:K/N (part K of N equal parts).
std::pair<std::string, tensor_slice> parse_slice(const std::string& spec) {
    std::vector<std::string> parts;
    std::size_t from = 0;
    for (std::size_t i = 0; i <= spec.size(); ++i)
        if (i == spec.size() || spec[i] == ':') {
            parts.push_back(spec.substr(from, i - from));
            from = i + 1;
        }
    auto join = [&](std::size_t n) {
        std::string s;
        for (std::size_t i = 0; i < n; ++i) s += (i ? ":" : "") + parts[i];
        return s;
    };
    if (parts.size() >= 3 && parts.back().find('/') != std::string::npos) {
        const std::string& kn = parts.back();
        std::size_t slash = kn.find('/');
        int dim = static_cast<int>(parse_int(parts[parts.size() - 2], spec));
        return {join(parts.size() - 2), tensor_slice::split(dim, parse_int(kn.substr(slash + 1), spec),
                                                             parse_int(kn.substr(0, slash), spec))};
    }
    if (parts.size() >= 4) {
        std::size_t n = parts.size();
        return {join(n - 3), tensor_slice::range(static_cast<int>(parse_int(parts[n - 3], spec)),
                                                 parse_int(parts[n - 2], spec), parse_int(parts[n - 1], spec))};
    }
    throw usage_error("--slice " + spec + ": expected NAME:DIM:START:STOP or PATTERN:DIM:K/N");
}

}  // namespace

bool is_checkpoint_source(const std::string& path) {
    // A URL's query string ('?') is no glob: globs are local. A URL is a checkpoint when it
    // names a prefix ('/' at the end, a host or bucket alone, or a last segment without a dot)
    // or an index; any other URL is one object (open_checkpoint's rules).
    if (auto sep = path.find("://"); sep != std::string::npos) {
        std::string base = path.starts_with("s3://") ? path : path.substr(0, path.find('?'));
        auto slash = base.find('/', sep + 3);
        if (slash == std::string::npos || base.back() == '/') return true;
        if (base.ends_with(".index.json")) return true;
        return base.substr(base.rfind('/') + 1).find('.') == std::string::npos;
    }
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return true;
    if (path.ends_with(".index.json")) return true;
    return has_glob(path) && !std::filesystem::exists(path, ec);
}

int run_checkpoint_info(const std::string& source, bool json) {
    checkpoint c = open_checkpoint(source);
    std::map<std::string, std::pair<std::size_t, std::uint64_t>> by_dtype;
    for (const auto& t : c.tensors) {
        auto& e = by_dtype[std::string(to_string(t.type))];
        ++e.first;
        e.second += t.bytes;
    }
    if (json) {
        nlohmann::json j;
        j["source"] = redact_location(source);
        j["format"] = "checkpoint";
        j["index"] = c.index_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(redact_location(c.index_path));
        j["bytes"] = c.total_bytes();
        j["metadata"] = c.metadata;
        nlohmann::json shards = nlohmann::json::array();
        for (std::size_t s = 0; s < c.shards.size(); ++s) {
            std::uint64_t b = 0;
            std::size_t n = 0;
            for (const auto& t : c.tensors)
                if (t.shard == s) b += t.bytes, ++n;
            shards.push_back({{"path", redact_location(c.shards[s].path)}, {"size", c.shards[s].file_size}, {"tensors", n}, {"bytes", b}});
        }
        j["shards"] = shards;
        nlohmann::json dtypes = nlohmann::json::object();
        for (const auto& [k, v] : by_dtype) dtypes[k] = {{"tensors", v.first}, {"bytes", v.second}};
        j["dtypes"] = dtypes;
        nlohmann::json tensors = nlohmann::json::array();
        for (const auto& t : c.tensors)
            tensors.push_back({{"name", t.name}, {"dtype", std::string(to_string(t.type))}, {"shape", t.shape},
                               {"shard", leaf(c.shards[t.shard].path)},
                               {"offset", t.offset}, {"bytes", t.bytes}});
        j["tensors"] = tensors;
        std::cout << j.dump(2) << "\n";
        return exit_ok;
    }
    std::printf("%s: checkpoint, %zu shard%s, %zu tensors, %s\n", redact_location(source).c_str(), c.shards.size(),
                c.shards.size() == 1 ? "" : "s", c.tensors.size(), human_bytes(c.total_bytes()).c_str());
    if (!c.index_path.empty()) std::printf("  index: %s\n", redact_location(c.index_path).c_str());
    for (const auto& s : c.shards)
        std::printf("  shard %-40s %zu tensors  %s\n", leaf(s.path).c_str(),
                    s.header.tensors.size(), human_bytes(s.file_size).c_str());
    for (const auto& [k, v] : by_dtype)
        std::printf("  dtype %-10s %zu tensors  %s\n", k.c_str(), v.first, human_bytes(v.second).c_str());
    std::size_t shown = 0;
    for (const auto& t : c.tensors) {
        if (++shown > 20) {
            std::printf("  ... %zu more (--json lists all)\n", c.tensors.size() - 20);
            break;
        }
        std::printf("  %-40s %-10s %s\n", t.name.c_str(), std::string(to_string(t.type)).c_str(),
                    shape_to_string(t.shape).c_str());
    }
    return exit_ok;
}

int run_checkpoint_load(const checkpoint_load_args& a) {
    checkpoint_load_options o;
    o.where = a.device.empty() ? (cuda_device_count() > 0 ? placement::cuda(0) : placement::host())
                               : parse_placement(a.device);
    o.verify = parse_verify_mode(a.verify);
    if (!a.as.empty()) o.as = parse_dtype(a.as, "--as").type;
    if (!a.tensors.empty()) {
        bool glob = std::any_of(a.tensors.begin(), a.tensors.end(), has_glob);
        o.select = {glob ? tensor_selection::kind::glob : tensor_selection::kind::names, a.tensors};
    }
    for (const auto& spec : a.slices) {
        auto [name, s] = parse_slice(spec);
        if (has_glob(name)) o.slice_rules.push_back({name, s});
        else o.slices[name] = s;
    }
    if (a.route == "segments") o.route = route_choice::segments;
    else if (a.route == "span") o.route = route_choice::span;
    else if (!a.route.empty() && a.route != "auto") throw usage_error("--route: auto, segments or span");

    auto opened = std::chrono::steady_clock::now();
    checkpoint c = open_checkpoint(a.source);
    const double open_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count();
    // A pattern that matches nothing would load every tensor whole, silently: most likely a typo.
    // (The library lets such a rule be, so that one recipe of patterns serves several models.)
    for (const auto& [pattern, s] : o.slice_rules)
        if (std::none_of(c.tensors.begin(), c.tensors.end(), [&](const checkpoint_tensor& t) {
                return ::fnmatch(pattern.c_str(), t.name.c_str(), 0) == 0;
            }))
            throw usage_error("--slice: the pattern '" + pattern + "' matches no tensor of " +
                              redact_location(a.source));
    checkpoint_load l = load_checkpoint(c, o);
    const auto& st = l.stats;
    // Keyed by name, which is how the rows below (the plan's tensors) find them.
    std::map<std::string, std::string> sums;
    if (a.checksum)
        for (const auto& t : l.tensors) sums[t.name] = ferry::checksum(t.value);
    if (a.json) {
        nlohmann::json j;
        j["format"] = "checkpoint";
        j["source"] = redact_location(a.source);
        j["device"] = to_string(o.where);
        j["shards"] = c.shards.size();
        j["bytes"] = st.bytes_out;
        j["bytes_read"] = st.bytes_read;
        j["requests"] = st.requests;
        j["seconds"] = st.seconds;
        j["open_seconds"] = open_seconds;  // the index and headers, before `seconds` starts
        j["first_read_seconds"] = st.first_read_seconds;
        j["gbps"] = gbps(st.bytes_read, st.seconds);
        j["peak_temp_bytes"] = st.peak_temp_bytes;
        nlohmann::json arrays = nlohmann::json::array();
        for (const auto& tp : l.plan.tensors)
            arrays.push_back({{"name", tp.name}, {"dtype", std::string(to_string(tp.type))}, {"shape", tp.shape},
                              {"route", std::string(to_string(tp.route))}, {"reason", tp.reason},
                              {"reason_code", std::string(to_string(tp.code))},
                              {"bytes_read", tp.bytes_read},
                              {"checksum", a.checksum ? nlohmann::json(sums[tp.name]) : nlohmann::json(nullptr)}});
        j["arrays"] = arrays;
        std::cout << j.dump(2) << "\n";
        return exit_ok;
    }
    std::printf("%s: checkpoint, %zu shard%s, %zu tensors, %s read (%s out) into %s in %.3f s: %s\n",
                redact_location(a.source).c_str(), c.shards.size(), c.shards.size() == 1 ? "" : "s", st.tensors,
                human_bytes(st.bytes_read).c_str(), human_bytes(st.bytes_out).c_str(), to_string(o.where).c_str(),
                st.seconds, rate_text(st.bytes_read, st.seconds).c_str());
    std::printf("  opened (index and headers) in %.1f ms; %zu reads, first read after %.1f ms, temporaries %s\n",
                open_seconds * 1e3, st.requests, st.first_read_seconds * 1e3, human_bytes(st.peak_temp_bytes).c_str());
    std::size_t shown = 0;
    for (const auto& tp : l.plan.tensors) {
        // With --checksum every tensor is listed: a checksum asked for is a checksum shown.
        if (tp.code == reason_code::whole_tensor && ++shown > 20 && !a.checksum) continue;
        std::printf("  %-40s %-10s %-18s %s: %s%s%s\n", tp.name.c_str(), std::string(to_string(tp.type)).c_str(),
                    shape_to_string(tp.shape).c_str(), std::string(to_string(tp.route)).c_str(), tp.reason.c_str(),
                    a.checksum ? "  " : "", a.checksum ? sums[tp.name].c_str() : "");
    }
    if (shown > 20 && !a.checksum) std::printf("  ... %zu more whole tensors\n", shown - 20);
    return exit_ok;
}

}  // namespace ferry::cli
