// Opening a checkpoint: finding its shards (folder, index, glob, list or one file), reading every
// shard header in parallel, and checking the index against the headers, so that a load plans
// over tensors whose places are known to be consistent.
#include "ferry/checkpoint.hpp"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ferry/error.hpp"
#include "ferry/safetensors.hpp"

namespace ferry {

checkpoint_error::checkpoint_error(std::string file, std::string tensor, std::string reason)
    : format_error(std::move(file), tensor.empty() ? std::string("checkpoint") : "tensor '" + tensor + "'",
                   std::move(reason)),
      tensor_(std::move(tensor)) {}

checkpoint_io_error::checkpoint_io_error(std::string what, std::vector<std::string> complete,
                                         std::vector<std::string> incomplete)
    : error(std::move(what)), complete_(std::move(complete)), incomplete_(std::move(incomplete)) {}

std::uint64_t checkpoint::total_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const auto& t : tensors) n += t.bytes;
    return n;
}

const checkpoint_tensor* checkpoint::find(const std::string& name) const {
    auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                               [](const checkpoint_tensor& t, const std::string& n) { return t.name < n; });
    return it != tensors.end() && it->name == name ? &*it : nullptr;
}

namespace {

namespace fs = std::filesystem;

constexpr const char* index_name = "model.safetensors.index.json";
// Headers are small reads; more threads than this only contend on the metadata path.
constexpr std::size_t max_parallel_headers = 16;

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> expand_glob(const std::string& pattern) {
    glob_t g{};
    int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> out;
    if (rc == 0)
        for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<checkpoint_shard> read_headers(const std::vector<std::string>& paths) {
    std::vector<checkpoint_shard> shards(paths.size());
    for (std::size_t first = 0; first < paths.size(); first += max_parallel_headers) {
        std::size_t last = std::min(paths.size(), first + max_parallel_headers);
        std::vector<std::future<void>> pending;
        for (std::size_t i = first; i < last; ++i)
            pending.push_back(std::async(std::launch::async, [&, i] {
                shards[i].path = paths[i];
                shards[i].file_size = fs::file_size(paths[i]);
                shards[i].header = read_safetensors_info(paths[i]);
            }));
        std::exception_ptr err;
        for (auto& p : pending) {
            try {
                p.get();
            } catch (...) {
                if (!err) err = std::current_exception();
            }
        }
        if (err) std::rethrow_exception(err);
    }
    return shards;
}

// Every tensor of every shard, each in exactly one shard.
void collect_tensors(checkpoint& c) {
    std::unordered_map<std::string, std::size_t> seen;
    for (std::size_t s = 0; s < c.shards.size(); ++s) {
        const auto& sh = c.shards[s];
        for (const auto& t : sh.header.tensors) {
            auto [it, fresh] = seen.emplace(t.name, s);
            if (!fresh)
                throw checkpoint_error(sh.path, t.name,
                                       "is also in shard " + c.shards[it->second].path);
            c.tensors.push_back({t.name, t.type, t.shape, s, sh.header.data_offset + t.begin,
                                 t.end - t.begin});
        }
    }
    std::sort(c.tensors.begin(), c.tensors.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
}

checkpoint open_index(const std::string& index_path, const std::string& source) {
    std::ifstream in(index_path, std::ios::binary);
    if (!in) throw system_error(errno, "open", {index_path, 0, 0});
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
        throw format_error(index_path, "index", std::string("invalid JSON: ") + e.what());
    }
    if (!j.is_object()) throw format_error(index_path, "index", "not a JSON object");
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object())
        throw format_error(index_path, "weight_map", "missing or not an object");

    checkpoint c;
    c.source = source;
    c.index_path = index_path;
    if (auto md = j.find("metadata"); md != j.end() && md->is_object())
        for (auto& [k, v] : md->items()) c.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();

    fs::path dir = fs::path(index_path).parent_path();
    std::map<std::string, std::string> placed;  // tensor -> shard file name, as the index says
    std::vector<std::string> names;             // shard file names, in first-use order
    std::map<std::string, std::size_t> shard_of;
    for (auto& [tensor, file] : wm->items()) {
        if (!file.is_string())
            throw checkpoint_error(index_path, tensor, "weight_map value is not a file name");
        std::string f = file.get<std::string>();
        if (f.empty() || fs::path(f).is_absolute() || f.find("..") != std::string::npos)
            throw checkpoint_error(index_path, tensor, "shard name '" + f + "' leaves the folder");
        placed[tensor] = f;
        if (shard_of.emplace(f, names.size()).second) {
            std::error_code ec;
            if (!fs::is_regular_file(dir / f, ec))
                throw checkpoint_error(index_path, tensor,
                                       "the index places it in shard " + (dir / f).string() +
                                           ", which does not exist");
            names.push_back(f);
        }
    }
    std::sort(names.begin(), names.end());
    std::vector<std::string> paths;
    for (const auto& n : names) paths.push_back((dir / n).string());
    c.shards = read_headers(paths);
    collect_tensors(c);

    // The index and the headers must agree on every tensor's shard.
    for (const auto& t : c.tensors) {
        const std::string& shard = c.shards[t.shard].path;
        auto it = placed.find(t.name);
        if (it == placed.end())
            throw checkpoint_error(shard, t.name, "is in this shard but not in the index " + index_path);
        if ((dir / it->second).string() != shard)
            throw checkpoint_error(shard, t.name, "is in this shard but the index " + index_path +
                                                      " places it in " + it->second);
    }
    for (const auto& [tensor, file] : placed)
        if (!c.find(tensor))
            throw checkpoint_error((dir / file).string(), tensor,
                                   "the index " + index_path + " places it here but no shard holds it");
    return c;
}

checkpoint open_files(std::vector<std::string> files, const std::string& source) {
    if (files.empty()) throw checkpoint_error(source, "", "no safetensors files found");
    checkpoint c;
    c.source = source;
    c.shards = read_headers(files);
    collect_tensors(c);
    return c;
}

}  // namespace

checkpoint open_checkpoint(const std::string& source) {
    std::error_code ec;
    if (fs::is_directory(source, ec)) {
        fs::path dir(source);
        if (fs::is_regular_file(dir / index_name, ec)) return open_index((dir / index_name).string(), source);
        std::vector<std::string> indexes = expand_glob((dir / "*.safetensors.index.json").string());
        if (indexes.size() == 1) return open_index(indexes[0], source);
        if (indexes.size() > 1)
            throw checkpoint_error(source, "", "holds " + std::to_string(indexes.size()) +
                                                   " index files: name the one to load");
        return open_files(expand_glob((dir / "*.safetensors").string()), source);
    }
    if (source.size() > 5 && source.ends_with(".json")) return open_index(source, source);
    if (has_glob_chars(source) && !fs::exists(source, ec)) {
        std::vector<std::string> files = expand_glob(source);
        if (files.empty()) throw checkpoint_error(source, "", "the pattern matches no file");
        return open_files(std::move(files), source);
    }
    return open_files({source}, source);
}

checkpoint open_checkpoint(const std::vector<std::string>& files) {
    std::string source = files.empty() ? std::string("(no files)") : files.front();
    return open_files(files, source);
}

}  // namespace ferry
