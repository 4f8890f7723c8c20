// Saving a checkpoint in the Hugging Face layout, one generation at a time. A save draws a
// generation id and writes it into every shard's __metadata__ and the index's metadata
// ("ferry.generation"), so that a reader can tell a shard of another save from its own
// (checkpoint.cpp). The order of operations keeps the previous generation loadable at every
// moment: the new shards are written beside the old ones (under other names where a name is
// taken, each file through a temporary and a rename), the index is replaced last by a rename
// (never removed first), and only then are the old shards that the new index does not name
// removed. A save that fails (a full disk, an I/O error) removes what it wrote and leaves the
// previous generation as it was. Under a prefix of an object store (s3://) the same order
// holds with objects: one object published whole per shard (a multipart upload: it appears
// whole when it completes, or not at all), the index uploaded over the old one, and the old
// shards removed (the registry's remove operation: DeleteObject) after it.
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <span>
#include <string_view>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "backend/registry.hpp"
#include "checkpoint/index_json.hpp"
#include "checkpoint/side_by_side.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/safetensors.hpp"
#include "formats/atomic_write.hpp"
#include "formats/safetensors_header.hpp"

namespace ferry {

namespace {

constexpr const char* saved_index_name = "model.safetensors.index.json";
// Shards written at once: their writes share the engine's workers, and their ends wait on the
// disk (or, for an object store, on the upload's completion) side by side.
constexpr std::size_t max_parallel_shards = 8;

// 128 random bits as 32 hex digits: two saves never share one.
std::string new_generation() {
    std::random_device rd;
    std::string out;
    for (int i = 0; i < 4; ++i) {
        char part[9];
        std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(rd()));
        out += part;
    }
    return out;
}

// The shard names of the index at `index` (the generation this save replaces); none when there
// is no index or it cannot be read: its shards are then left alone.
std::set<std::string> shards_of(const std::string& index) {
    try {
        file f(index, open_mode::read);
        std::string text(f.size(), '\0');
        if (!text.empty()) f.read(text.data(), text.size(), 0);
        const auto files = checkpoints::parse_index_json(text, index, index).files;
        return {files.begin(), files.end()};
    } catch (const error&) {
        return {};
    }
}

}  // namespace

std::vector<std::string> save_checkpoint(const std::string& folder, const std::vector<named_array>& tensors,
                                         std::uint64_t max_shard_size,
                                         const std::map<std::string, std::string>& metadata, bool checksums) {
    namespace fs = std::filesystem;
    if (max_shard_size == 0) throw usage_error("save_checkpoint: max_shard_size must be above 0");
    const detail::location where(folder);
    const bool remote = where.is_url();
    const detail::scheme_entry store = detail::scheme_for(where);
    if (remote && !(store.writes == detail::write_publication::whole_at_sync && store.operations.remove))
        throw usage_error("save_checkpoint: " + where.scheme() + ":// is read only; a checkpoint is saved to a folder or "
                          "an s3:// prefix: " + where.shown());
    std::error_code ec;
    if (!remote) {
        fs::create_directories(folder, ec);
        if (ec) throw system_error(ec.value(), "create_directories", {folder, 0, 0});
    }
    // Objects under the prefix: "s3://b/ckpt" and "s3://b/ckpt/" are the same place.
    auto under = [&](const std::string& name) {
        if (!remote) return (fs::path(folder) / name).string();
        return folder + (folder.ends_with("/") ? "" : "/") + name;
    };

    std::unordered_set<std::string_view> names;
    names.reserve(tensors.size());
    for (const auto& t : tensors)
        if (!names.insert(t.name).second)
            throw usage_error("save_checkpoint: duplicate tensor name '" + t.name + "'");
    // Greedy in the given order, as huggingface_hub splits a state dict: each shard a run of
    // the tensors, not a copy of them.
    std::vector<std::span<const named_array>> shards;
    std::uint64_t in_shard = 0;
    std::size_t first = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        std::uint64_t b = tensors[i].value.nbytes();
        if (in_shard > 0 && in_shard + b > max_shard_size) {
            shards.emplace_back(tensors.data() + first, i - first);
            first = i;
            in_shard = 0;
        }
        in_shard += b;
    }
    shards.emplace_back(tensors.data() + first, tensors.size() - first);

    const std::string generation = new_generation();
    std::map<std::string, std::string> shard_meta = metadata;
    shard_meta.emplace("format", "pt");
    shard_meta["ferry.generation"] = generation;
    const std::string index = under(saved_index_name);
    const std::set<std::string> old_shards = shards_of(index);
    auto remove_quietly = [&](const std::string& path) noexcept {
        try {
            if (remote) store.operations.remove(detail::location(path), settings::global());
            else fs::remove(path, ec);
        } catch (...) {  // what is left is named by no index: never loaded, only space
        }
    };

    std::vector<std::string> written;  // what this save created, removed again if it fails
    std::set<std::string> new_shards;
    try {
        if (shards.size() == 1) {
            // One file is the whole checkpoint: replaced by a rename, it is never a mix.
            std::string p = under("model.safetensors");
            formats::save_safetensors_part(p, shards[0], shard_meta, checksums);
            new_shards.insert("model.safetensors");
            written.push_back(p);
        } else {
            // The index as text, entry by entry (names are unique, checked above): through
            // nlohmann::ordered_json it was an object per tensor, and slower than the shards.
            std::string weight_map;
            std::vector<std::string> shard_names;
            for (std::size_t k = 0; k < shards.size(); ++k) {
                char plain[64];
                std::snprintf(plain, sizeof plain, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
                std::string name = plain;
                // A name the previous generation (or anything else) holds is left to it: a
                // reader of that generation must not find this one's bytes under it.
                if (old_shards.count(name) || (!remote && fs::exists(under(name), ec))) {
                    char tagged[96];
                    std::snprintf(tagged, sizeof tagged, "model-%.12s-%05zu-of-%05zu.safetensors",
                                  generation.c_str(), k + 1, shards.size());
                    name = tagged;
                }
                shard_names.push_back(name);
                written.push_back(under(name));  // removed if the save fails, written or not
                new_shards.insert(name);
            }
            // Side by side: each shard's durable end (fsync, rename, the folder's fsync) waits
            // for the disk, which one after the other made most of a save of many small
            // shards; and its header and small pieces are CPU work of their own.
            checkpoints::side_by_side(shards.size(), max_parallel_shards, [&](std::size_t k) {
                formats::save_safetensors_part(under(shard_names[k]), shards[k], shard_meta, checksums);
            });
            std::uint64_t total = 0;
            for (std::size_t k = 0; k < shards.size(); ++k) {
                std::string shard_json;
                formats::append_json_string(shard_json, shard_names[k]);
                for (const auto& t : shards[k]) {
                    weight_map += weight_map.empty() ? "\n    " : ",\n    ";
                    formats::append_json_string(weight_map, t.name);
                    weight_map += ": ";
                    weight_map += shard_json;
                    total += t.value.nbytes();
                }
            }
            nlohmann::ordered_json meta = nlohmann::ordered_json::object();
            for (const auto& [k, v] : metadata) meta[k] = v;
            meta["total_size"] = total;
            meta["ferry.generation"] = generation;
            std::string text = "{\n  \"metadata\": " + meta.dump() + ",\n  \"weight_map\": {" + weight_map +
                               (weight_map.empty() ? "}\n}\n" : "\n  }\n}\n");
            // The publication: a rename over the old index (an upload over the old object).
            formats::atomic_write w(index);
            w.file().write(text.data(), text.size(), 0);
            w.commit();
        }
    } catch (...) {
        for (const auto& p : written) remove_quietly(p);
        throw;
    }
    if (shards.size() == 1) {
        // The folder's index would still win over model.safetensors: it goes now, after the
        // file it gives way to is whole.
        if (remote) store.operations.remove(detail::location(index), settings::global());
        else if (!fs::remove(index, ec) && ec)
            throw system_error(ec.value(), "remove", {index, 0, 0});
    } else {
        written.push_back(index);
    }
    // The previous generation's shards, once no index names them.
    for (const auto& name : old_shards)
        if (!new_shards.count(name)) remove_quietly(under(name));
    return written;
}

}  // namespace ferry
