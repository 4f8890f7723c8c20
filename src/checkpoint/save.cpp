// Saving a checkpoint in the Hugging Face layout. Order of operations is what keeps the folder
// valid at every moment: an older index goes first (the folder then holds no checkpoint, or
// the older single file), each shard is replaced atomically, and the new index comes last.
// Under a prefix of an object store (s3://) the same order holds with objects: the older index
// removed (the registry's remove operation: DeleteObject), one object published whole per shard
// (a multipart upload: it appears whole when it completes, or not at all), and the index
// uploaded last.
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "backend/registry.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"
#include "ferry/safetensors.hpp"
#include "formats/atomic_write.hpp"

namespace ferry {

std::vector<std::string> save_checkpoint(const std::string& folder, const std::vector<named_array>& tensors,
                                         std::uint64_t max_shard_size,
                                         const std::map<std::string, std::string>& metadata) {
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

    std::set<std::string> names;
    for (const auto& t : tensors)
        if (!names.insert(t.name).second)
            throw usage_error("save_checkpoint: duplicate tensor name '" + t.name + "'");
    // Greedy in the given order, as huggingface_hub splits a state dict.
    std::vector<std::vector<named_array>> shards;
    std::uint64_t in_shard = 0;
    for (const auto& t : tensors) {
        std::uint64_t b = t.value.nbytes();
        if (shards.empty() || (in_shard > 0 && in_shard + b > max_shard_size)) {
            shards.emplace_back();
            in_shard = 0;
        }
        shards.back().push_back(t);
        in_shard += b;
    }
    if (shards.empty()) shards.emplace_back();

    std::map<std::string, std::string> shard_meta = metadata;
    shard_meta.emplace("format", "pt");
    const std::string index = under("model.safetensors.index.json");
    if (remote) store.operations.remove(detail::location(index), settings::global());
    else if (fs::exists(index, ec) && !fs::remove(index, ec) && ec)
        throw system_error(ec.value(), "remove", {index, 0, 0});

    std::vector<std::string> written;
    if (shards.size() == 1) {
        std::string p = under("model.safetensors");
        save_safetensors(p, shards[0], shard_meta);
        written.push_back(p);
        return written;
    }
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    // Appended, not looked up (names are unique, checked above): an ordered object finds a key
    // by walking its entries, quadratic in the tensors of a checkpoint.
    auto& map_entries = weight_map.get_ref<nlohmann::ordered_json::object_t&>();
    std::uint64_t total = 0;
    for (std::size_t k = 0; k < shards.size(); ++k) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
        std::string p = under(name);
        save_safetensors(p, shards[k], shard_meta);
        written.push_back(p);
        for (const auto& t : shards[k]) {
            map_entries.emplace_back(t.name, name);
            total += t.value.nbytes();
        }
    }
    nlohmann::ordered_json j;
    j["metadata"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) j["metadata"][k] = v;
    j["metadata"]["total_size"] = total;
    j["weight_map"] = weight_map;
    std::string text = j.dump(2) + "\n";
    formats::atomic_write w(index);
    w.file().write(text.data(), text.size(), 0);
    w.commit();
    written.push_back(index);
    return written;
}

}  // namespace ferry
