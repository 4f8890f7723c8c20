// Opening a checkpoint: finding its shards (folder, index, glob, list or one file; or, for
// http(s):// and s3:// URLs, a prefix, an index URL or one object), reading every shard header
// in parallel, and checking the index against the headers, so that a load plans over tensors
// whose places are known to be consistent.
//
// Remote shards: each header costs one HEAD (the open) and one ranged GET, the first 256 KiB
// (formats::read_safetensors_header). Messages name URLs with their credentials redacted.
#include "ferry/checkpoint.hpp"

#include <glob.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <future>
#include <system_error>


#include "backend/registry.hpp"
#include "checkpoint/index_json.hpp"
#include "checkpoint/open.hpp"
#include "checkpoint/side_by_side.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/safetensors.hpp"
#include "formats/safetensors_header.hpp"
#include "os/posix_io.hpp"

namespace ferry {

namespace checkpoints {

bool is_url(const std::string& location) { return detail::location(location).is_url(); }

std::string shown(const std::string& location) { return detail::location(location).shown(); }

}  // namespace checkpoints

checkpoint_error::checkpoint_error(std::string file, std::string tensor, std::string reason)
    : format_error(checkpoints::shown(file), tensor.empty() ? std::string("checkpoint") : "tensor '" + tensor + "'",
                   std::move(reason)),
      tensor_(std::move(tensor)) {}

checkpoint_changed_error::checkpoint_changed_error(std::string file, std::string reason)
    : error(checkpoints::shown(file) + ": the checkpoint changed while it was read (" + reason +
            "); open and load it again"),
      file_(checkpoints::shown(file)),
      reason_(std::move(reason)) {}

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
using checkpoints::is_url;
using checkpoints::shown;

constexpr const char* index_name = "model.safetensors.index.json";
// Headers are small reads; more threads than this only contend on the metadata path (or, for
// remote shards, open more connections than the sources' own concurrency).
constexpr std::size_t max_parallel_headers = 16;
// An index is a name per tensor: far below this.
constexpr std::uint64_t max_index_size = 256ull << 20;

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

checkpoint_shard read_header(const std::string& path) {
    checkpoint_shard s;
    s.path = path;
    file f(path, open_mode::read);
    s.file_size = f.size();
    s.version = f.version();
    s.header = formats::read_safetensors_header(f, s.file_size, shown(path));
    return s;
}

// Header reads already under way, by shard path.
using started_headers = std::unordered_map<std::string, std::future<checkpoint_shard>>;

// Every shard's header, side by side (those in `started` already are); once all are done, the
// first error in the order of `paths` is thrown.
std::vector<checkpoint_shard> read_headers(const std::vector<std::string>& paths, started_headers* started = nullptr) {
    std::vector<checkpoint_shard> shards(paths.size());
    std::vector<std::exception_ptr> errors(paths.size());
    std::vector<std::size_t> rest;
    for (std::size_t i = 0; i < paths.size(); ++i)
        if (!started || !started->count(paths[i])) rest.push_back(i);
    checkpoints::side_by_side(rest.size(), max_parallel_headers, [&](std::size_t k) {
        try {
            shards[rest[k]] = read_header(paths[rest[k]]);
        } catch (...) {
            errors[rest[k]] = std::current_exception();
        }
    });
    if (started)
        for (std::size_t i = 0; i < paths.size(); ++i) {
            auto it = started->find(paths[i]);
            if (it == started->end()) continue;
            try {
                shards[i] = it->second.get();
            } catch (...) {
                errors[i] = std::current_exception();
            }
        }
    for (const auto& e : errors)
        if (e) std::rethrow_exception(e);
    return shards;
}

// Every tensor of every shard, each in exactly one shard. Sorted by name (shard order among
// equal names), a tensor in two shards is two neighbours. Each shard's tensors come sorted
// (parse_safetensors_header): the shards' runs are merged, pairwise, as places, and each
// tensor is then copied once into its place (a stable sort of the tensors themselves cost a
// tenth of the open of 100,000 tensors on the CPU machine).
void collect_tensors(checkpoint& c) {
    using ref = std::pair<const safetensors_tensor_info*, std::size_t>;  // tensor, shard
    std::vector<ref> refs, merged;
    std::vector<std::size_t> runs{0};  // run k is [runs[k], runs[k + 1])
    for (std::size_t s = 0; s < c.shards.size(); ++s) {
        for (const auto& t : c.shards[s].header.tensors) refs.emplace_back(&t, s);
        runs.push_back(refs.size());
    }
    auto by_name = [](const ref& a, const ref& b) { return a.first->name < b.first->name; };
    while (runs.size() > 2) {
        merged.resize(refs.size());
        std::vector<std::size_t> next{0};
        for (std::size_t k = 0; k + 1 < runs.size(); k += 2) {
            const std::size_t end = k + 2 < runs.size() ? runs[k + 2] : runs[k + 1];
            std::merge(refs.begin() + runs[k], refs.begin() + runs[k + 1], refs.begin() + runs[k + 1],
                       refs.begin() + end, merged.begin() + runs[k], by_name);
            next.push_back(end);
        }
        refs.swap(merged);
        runs.swap(next);
    }
    c.tensors.reserve(refs.size());
    for (const auto& [t, s] : refs)
        c.tensors.push_back({t->name, t->type, t->shape, s, c.shards[s].header.data_offset + t->begin, t->end - t->begin});
    for (std::size_t i = 1; i < c.tensors.size(); ++i)
        if (c.tensors[i].name == c.tensors[i - 1].name)
            throw checkpoint_error(c.shards[c.tensors[i].shard].path, c.tensors[i].name,
                                   "is also in shard " + shown(c.shards[c.tensors[i - 1].shard].path));
}

struct index_text {
    std::string text;
    std::string version;  ///< file::version() of what was read: a local index's identity
};

index_text read_index_text(const std::string& index_path) {
    file f(index_path, open_mode::read);
    std::uint64_t n = f.size();
    if (n > max_index_size)
        throw format_error(shown(index_path), "index", "larger than 256 MiB (" + std::to_string(n) + " bytes)");
    index_text out;
    out.version = f.version();
    out.text.assign(n, '\0');
    try {
        if (n) f.read(out.text.data(), n, 0);
    } catch (const remote_error& e) {
        // Its GET asks for the ETag its open saw (If-Match): a save replaced it in between.
        if (e.status() == 412) throw checkpoint_changed_error(index_path, "the index was replaced while it was read");
        throw;
    }
    // Replaced by a save while it was read: the bytes read are still the older file's whole
    // (an open descriptor keeps it); rewritten in place, they may be neither.
    if (!is_url(index_path) && f.version() != out.version)
        throw checkpoint_changed_error(index_path, "the index was rewritten while it was read");
    return out;
}

// The version of an index now (a local file's identity, a remote object's ETag), or why there
// is none. For a remote index this is a new request: asked only when a load already failed.
std::string index_version_now(const std::string& index_path) {
    if (is_url(index_path)) {
        try {
            return file(index_path, open_mode::read).version();
        } catch (const remote_error& e) {
            return "none (HTTP " + std::to_string(e.status()) + ")";
        }
    }
    std::string why;
    std::string v = detail::file_version(index_path, &why);
    return v.empty() ? "none (" + why + ")" : v;
}

// The generation a save wrote into the index and every shard's header (save.cpp): a shard of
// another generation than its index is a load that would mix two saves.
constexpr const char* generation_key = "ferry.generation";

void check_generation(const checkpoint& c) {
    auto want = c.metadata.find(generation_key);
    if (want == c.metadata.end()) return;
    for (const auto& sh : c.shards) {
        auto got = sh.header.metadata.find(generation_key);
        if (got == sh.header.metadata.end() || got->second != want->second)
            throw checkpoint_changed_error(
                sh.path, "the shard is of generation " +
                             (got == sh.header.metadata.end() ? std::string("none") : got->second) + ", its index " +
                             shown(c.index_path) + " of " + want->second);
    }
}

// Where an index's shard names point: beside the index (a local folder, or the URL the index
// was read from, its query string kept for each shard).
class shard_namer {
public:
    explicit shard_namer(const std::string& index_path) : remote_(is_url(index_path)) {
        if (!remote_) {
            dir_ = fs::path(index_path).parent_path();
            return;
        }
        const detail::location where(index_path);
        literal_ = detail::scheme_for(where).naming == detail::object_naming::literal_key;
        std::string base = index_path;
        if (!literal_) {  // a key (s3) may hold '?'; a URL's query is no part of its path
            auto q = base.find('?');
            if (q != std::string::npos) query_ = base.substr(q), base = base.substr(0, q);
        }
        base_ = base.substr(0, base.rfind('/') + 1);
    }
    /// Why `name` cannot be a shard of this index (it leaves the folder, is no plain object
    /// name, or names no local file), or "".
    std::string unusable(const std::string& name) const {
        if (name.empty() || fs::path(name).is_absolute() || name.find("..") != std::string::npos)
            return "shard name '" + name + "' leaves the folder";
        if (remote_ && (name.find("://") != std::string::npos || name.find_first_of("?#\\") != std::string::npos))
            return "shard name '" + name + "' is not a plain object name";
        std::error_code ec;
        if (!remote_ && !fs::is_regular_file((*this)(name), ec))
            return "the index places it in shard " + (*this)(name) + ", which does not exist";
        return {};
    }
    std::string operator()(const std::string& name) const {
        if (!remote_) return (dir_ / name).string();
        // Keys (s3://) are encoded when the request is made; URL paths (http(s)) are encoded here.
        return base_ + (literal_ ? name : detail::uri_encode(name, true)) + query_;
    }

private:
    bool remote_ = false, literal_ = false;
    fs::path dir_;
    std::string base_, query_;
};

checkpoint index_checkpoint(const std::string& index_path, const std::string& source, const shard_namer& place,
                            checkpoints::index_json parsed, started_headers& early, const checkpoints::shards_read& on_read);

checkpoint open_index(const std::string& index_path, const std::string& source, const checkpoints::shards_read& on_read) {
    const std::string shown_index = shown(index_path);
    const shard_namer place(index_path);

    // A shard's header read starts when the index first names the shard, and runs while the
    // rest of the index is parsed (on the H200 machine the index of 819 tensors took 1.2 ms to
    // parse, six headers read side by side 1.9 ms after it). Only names that pass the checks
    // below are opened early; whatever the index turns out to say, every read started here
    // has ended before this function returns or throws (the futures wait as they are freed).
    started_headers early;
    std::unordered_set<std::string> named;
    auto on_file = [&](const std::string& f) {
        if (early.size() >= max_parallel_headers || !named.insert(f).second || !place.unusable(f).empty()) return;
        std::string path = place(f);
        try {
            early.emplace(path, std::async(std::launch::async, read_header, path));
        } catch (const std::system_error&) {  // no thread to spare: read_headers reads it below
        }
    };
    const index_text read = read_index_text(index_path);
    // Sorted and checked once the shards' reads have begun (index_checkpoint): 2.7 ms for an
    // index of 50,000 tensors on the CPU machine.
    checkpoints::index_json parsed = checkpoints::read_index_json(read.text, shown_index, on_file);
    const bool local = !is_url(index_path);
    const bool has_generation = parsed.metadata.count(generation_key) > 0;
    // A shard missing or disagreeing with the index, because a save replaced the index after
    // it was read: the checkpoint changed, not a broken one.
    auto index_replaced = [&]() -> std::string {
        if (read.version.empty()) return {};
        std::string now = index_version_now(index_path);
        return now == read.version ? std::string() : read.version + " became " + now;
    };
    try {
        checkpoint c = index_checkpoint(index_path, source, place, std::move(parsed), early, on_read);
        // Without a generation, only the index's identity tells that the shards read may be of
        // two saves (another tool's, writing over the same names). Remote objects are each
        // checked against the ETag their header was read with instead (range_reader).
        if (!has_generation && local)
            if (std::string how = index_replaced(); !how.empty())
                throw checkpoint_changed_error(index_path, "the index was replaced while its shards were read: " + how);
        return c;
    } catch (const checkpoint_changed_error&) {
        throw;
    } catch (const error&) {
        if (std::string how = index_replaced(); !how.empty())
            throw checkpoint_changed_error(index_path, "the index was replaced while its shards were read: " + how);
        throw;
    }
}

// The checkpoint an index describes: its shards' headers read and checked against it.
checkpoint index_checkpoint(const std::string& index_path, const std::string& source, const shard_namer& place,
                            checkpoints::index_json parsed, started_headers& early, const checkpoints::shards_read& on_read) {
    const std::string shown_index = shown(index_path);

    checkpoint c;
    c.source = source;
    c.index_path = index_path;
    c.metadata = std::move(parsed.metadata);
    const auto& weight_map = parsed.weight_map;  // in the index's order until order_index_json below
    // Each file the index names (parsed.files) is checked against the tensor placed there
    // first (in name order); names: the shard file names, sorted; shard_of_file: where each of
    // parsed.files went among them.
    // Names, not entries: the weight_map is sorted in place further down.
    std::vector<std::optional<std::string_view>> first_tensor(parsed.files.size());
    for (const auto& e : weight_map)
        if (e.file != checkpoints::not_a_file && (!first_tensor[e.file] || e.tensor < *first_tensor[e.file]))
            first_tensor[e.file] = e.tensor;
    std::vector<std::size_t> by_first(parsed.files.size());
    for (std::size_t k = 0; k < by_first.size(); ++k) by_first[k] = k;
    std::sort(by_first.begin(), by_first.end(), [&](std::size_t a, std::size_t b) {
        return *first_tensor[a] < *first_tensor[b];
    });
    for (std::size_t k : by_first)
        if (std::string no = place.unusable(parsed.files[k]); !no.empty())
            throw checkpoint_error(index_path, std::string(*first_tensor[k]), no);
    std::vector<std::size_t> order = by_first;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return parsed.files[a] < parsed.files[b]; });
    std::vector<std::string> names;
    std::vector<std::size_t> shard_of_file(parsed.files.size());
    for (std::size_t k : order) {
        shard_of_file[k] = names.size();
        names.push_back(parsed.files[k]);
    }
    std::vector<std::string> paths;
    for (const auto& n : names) paths.push_back(place(n));
    try {
        c.shards = read_headers(paths, &early);
    } catch (const remote_error& e) {
        // A shard the index names but the store does not have: the index's error, as for a
        // local folder, naming the tensor and the shard's URL.
        if (e.status() != 404) throw;
        for (std::size_t k : order)
            if (shown(place(parsed.files[k])) == e.url())
                throw checkpoint_error(index_path, std::string(*first_tensor[k]),
                                       "the index places it in shard " + shown(place(parsed.files[k])) +
                                           ", which does not exist (HTTP 404)");
        throw;
    }
    check_generation(c);  // before the checks below, which a mix of two saves would fail
    if (on_read) on_read(c.shards);
    checkpoints::order_index_json(parsed, index_path);  // weight_map: sorted by tensor, each once
    collect_tensors(c);

    // The index and the headers must agree on every tensor's shard. The shards were read in
    // the order of their sorted names, so shard i is names[i]. Both lists are sorted by name:
    // one walk along them both.
    std::size_t w = 0;
    for (const auto& t : c.tensors) {
        while (w < weight_map.size() && weight_map[w].tensor < t.name) ++w;
        const std::string& shard = c.shards[t.shard].path;
        if (w == weight_map.size() || weight_map[w].tensor != t.name)
            throw checkpoint_error(shard, t.name, "is in this shard but not in the index " + shown_index);
        if (shard_of_file[weight_map[w].file] != t.shard)
            throw checkpoint_error(shard, t.name, "is in this shard but the index " + shown_index +
                                                      " places it in " + parsed.files[weight_map[w].file]);
    }
    // Every tensor of the shards is in the index, each once: the index has more only when it
    // names a tensor that no shard holds.
    if (weight_map.size() != c.tensors.size())
        for (const auto& e : weight_map)
            if (!c.find(std::string(e.tensor)))
                throw checkpoint_error(place(parsed.files[e.file]), std::string(e.tensor),
                                       "the index " + shown_index + " places it here but no shard holds it");
    return c;
}

checkpoint open_files(std::vector<std::string> files, const std::string& source,
                      const checkpoints::shards_read& on_read) {
    if (files.empty()) throw checkpoint_error(source, "", "no safetensors files found");
    checkpoint c;
    c.source = source;
    c.shards = read_headers(files);
    if (on_read) on_read(c.shards);
    collect_tensors(c);
    return c;
}

bool ends_with(const std::string& s, const char* tail) { return s.ends_with(tail); }

// A prefix (ending in '/'): its index, else, where the store lists (s3), its *.safetensors
// objects, else (http(s)) its model.safetensors (an HTTP prefix cannot be listed).
checkpoint open_prefix(const std::string& prefix, const std::string& query, const std::string& source,
                       const checkpoints::shards_read& on_read) {
    const detail::location where(prefix);
    if (const auto list = detail::scheme_for(where).operations.list) {
        std::vector<detail::listed_object> entries;
        try {
            entries = list(where, settings::global());
        } catch (const remote_error& e) {
            // Reading without s3:ListBucket is common (GetObject only): then the index is the way in.
            if (e.status() != 403) throw;
            return open_index(prefix + index_name, source, on_read);
        }
        std::vector<std::string> indexes, files;
        bool has_default_index = false;
        for (const auto& e : entries) {
            const std::string& name = e.name;
            if (name == index_name) has_default_index = true;
            if (ends_with(name, ".safetensors.index.json")) indexes.push_back(prefix + name);
            else if (ends_with(name, ".safetensors")) files.push_back(prefix + name);
        }
        if (has_default_index) return open_index(prefix + index_name, source, on_read);
        if (indexes.size() == 1) return open_index(indexes[0], source, on_read);
        if (indexes.size() > 1)
            throw checkpoint_error(source, "", "holds " + std::to_string(indexes.size()) +
                                                   " index files: name the one to load");
        if (files.empty())
            throw checkpoint_error(source, "", "no " + std::string(index_name) +
                                                   " and no *.safetensors object under this prefix");
        std::sort(files.begin(), files.end());
        return open_files(std::move(files), source, on_read);
    }
    const std::string index = prefix + index_name + query;
    try {
        return open_index(index, source, on_read);
    } catch (const remote_error& e) {
        if (e.status() != 404 || e.url() != shown(index)) throw;
    }
    const std::string single = prefix + "model.safetensors" + query;
    try {
        return open_files({single}, source, on_read);
    } catch (const remote_error& e) {
        if (e.status() != 404 || e.url() != shown(single)) throw;
    }
    throw checkpoint_error(source, "", "neither " + std::string(index_name) +
                                           " nor model.safetensors is under this prefix (HTTP 404), and an "
                                           "HTTP prefix cannot be listed: name the index or the files");
}

// A URL: an index ("*.json"), a prefix ("/" at the end, a bucket, or a last segment without a
// dot), or one safetensors object.
checkpoint open_remote(const std::string& source, const checkpoints::shards_read& on_read) {
    const detail::location where(source);
    const bool keys = detail::scheme_for(where).naming == detail::object_naming::literal_key;
    // (An s3:// URL without a bucket is refused where it is parsed.)
    if (!keys && where.host().empty()) throw usage_error("the URL has no host: " + where.shown());
    std::string base = source, query;
    if (!keys) {  // a key may hold '?'; a URL's query is no part of its path
        auto q = base.find('?');
        if (q != std::string::npos) query = base.substr(q), base = base.substr(0, q);
    }
    const std::size_t path_start = base.find('/', source.size() - where.rest().size());  // after "scheme://"
    if (path_start == std::string::npos) return open_prefix(base + "/", query, source, on_read);  // a host or a bucket
    if (ends_with(base, ".json")) return open_index(source, source, on_read);
    if (base.back() == '/') return open_prefix(base, query, source, on_read);
    const std::string last = base.substr(base.rfind('/') + 1);
    if (last.find('.') == std::string::npos) return open_prefix(base + "/", query, source, on_read);
    return open_files({source}, source, on_read);
}

// The index a local folder holds: its model.safetensors.index.json, else its one
// *.safetensors.index.json; "" where it has none, `many` set where it has several.
std::string folder_index(const fs::path& dir, std::size_t* many = nullptr) {
    std::error_code ec;
    if (fs::is_regular_file(dir / index_name, ec)) return (dir / index_name).string();
    std::vector<std::string> indexes = expand_glob((dir / "*.safetensors.index.json").string());
    if (many) *many = indexes.size();
    return indexes.size() == 1 ? indexes[0] : std::string();
}

}  // namespace

checkpoint checkpoints::open_checkpoint(const std::string& source, const shards_read& on_read) {
    if (is_url(source)) return open_remote(source, on_read);
    std::error_code ec;
    if (fs::is_directory(source, ec)) {
        std::size_t indexes = 0;
        if (std::string index = folder_index(source, &indexes); !index.empty()) return open_index(index, source, on_read);
        if (indexes > 1)
            throw checkpoint_error(source, "", "holds " + std::to_string(indexes) + " index files: name the one to load");
        return open_files(expand_glob((fs::path(source) / "*.safetensors").string()), source, on_read);
    }
    if (source.size() > 5 && source.ends_with(".json")) return open_index(source, source, on_read);
    if (has_glob_chars(source) && !fs::exists(source, ec)) {
        std::vector<std::string> files = expand_glob(source);
        if (files.empty()) throw checkpoint_error(source, "", "the pattern matches no file");
        return open_files(std::move(files), source, on_read);
    }
    return open_files({source}, source, on_read);
}

std::vector<std::string> checkpoints::likely_shards(const std::string& source) {
    if (is_url(source)) return {};
    std::error_code ec;
    std::string index;
    if (fs::is_directory(source, ec)) index = folder_index(source);
    else if (source.size() > 5 && source.ends_with(".safetensors.index.json")) index = source;
    if (index.empty()) return {};
    const fs::path dir = fs::path(index).parent_path();
    const std::string name = fs::path(index).filename().string();
    const std::string stem = name.substr(0, name.size() - std::strlen(".safetensors.index.json"));
    // stem-[tag-]<k>-of-<count>.safetensors (a save beside an earlier one tags its names), one
    // tag and count for all, each k of 1..count once.
    std::vector<std::pair<std::uint64_t, std::string>> found;
    std::optional<std::pair<std::string, std::uint64_t>> kind;  // the tag and the count
    std::uint64_t count = 0;
    auto number = [](std::string_view digits, std::uint64_t& v) {
        if (digits.empty() || digits.size() > 9) return false;
        v = 0;
        for (char c : digits) {
            if (c < '0' || c > '9') return false;
            v = v * 10 + static_cast<std::uint64_t>(c - '0');
        }
        return true;
    };
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string f = it->path().filename().string();
        constexpr std::string_view tail = ".safetensors";
        if (f.size() <= stem.size() + 1 + tail.size() || !f.starts_with(stem + "-") || !f.ends_with(tail)) continue;
        const std::string_view mid(f.data() + stem.size() + 1, f.size() - stem.size() - 1 - tail.size());
        const std::size_t of = mid.rfind("-of-");
        if (of == std::string_view::npos) continue;
        const std::string_view left = mid.substr(0, of);
        const std::size_t dash = left.rfind('-');
        const std::string_view tag = dash == std::string_view::npos ? std::string_view() : left.substr(0, dash);
        std::uint64_t k = 0, n = 0;
        if (!number(left.substr(dash == std::string_view::npos ? 0 : dash + 1), k) || !number(mid.substr(of + 4), n))
            continue;
        if (k == 0 || k > n) return {};
        if (!kind) kind.emplace(std::string(tag), n);
        else if (kind->first != tag || kind->second != n) return {};  // two saves' shards, or two counts
        count = n;
        found.emplace_back(k, f);
    }
    if (ec || found.empty() || found.size() != count) return {};
    std::sort(found.begin(), found.end());
    for (std::size_t i = 0; i < found.size(); ++i)
        if (found[i].first != i + 1) return {};
    // The open reads an index's shards in the order of their names.
    std::vector<std::string> names;
    for (auto& [k, f] : found) names.push_back(std::move(f));
    std::sort(names.begin(), names.end());
    std::vector<std::string> paths;
    for (const auto& f : names) paths.push_back((dir / f).string());
    return paths;
}

checkpoint checkpoints::open_checkpoint(const std::vector<std::string>& files, const shards_read& on_read) {
    std::string source = files.empty() ? std::string("(no files)") : files.front();
    return open_files(files, source, on_read);
}

checkpoint open_checkpoint(const std::string& source) { return checkpoints::open_checkpoint(source, {}); }

checkpoint open_checkpoint(const std::vector<std::string>& files) { return checkpoints::open_checkpoint(files, {}); }

}  // namespace ferry
