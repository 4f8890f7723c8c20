// What a remote scheme's store offers beside opening a source (list a prefix, remove an
// object, describe itself to the doctor) and how its objects are named and published. A backend
// folder fills these in (backend/<name>/<name>_store.cpp) without seeing the registry, which
// holds them in its table (registry.hpp) and is the only door checkpoints, saves and the doctor use.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/location.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

/// An object found under a prefix: its name below the prefix, and its size.
struct listed_object {
    std::string name;
    std::uint64_t size = 0;
};

/// How the rest of a location names an object, a fact checkpoint code reads to place shard
/// names beside an index.
enum class object_naming {
    url_path,     ///< a URL path: percent-encoded, a '?' starts the query (http, https)
    literal_key,  ///< everything after the bucket is the key as stored, encoded per request (s3)
};

/// How a source opened with open_mode::write makes its bytes visible.
enum class write_publication {
    in_place,       ///< bytes land where written (a local file; saves write a temporary, rename)
    whole_at_sync,  ///< the object appears whole at sync(), nothing without it (an S3 multipart upload)
};

/// What a scheme's store can do beyond opening a source. Each operation may be empty: the store
/// does not offer it (a plain HTTP server cannot list or remove). Every one may be called from
/// many threads at once and throws the error of what failed, naming the location redacted.
struct store_operations {
    /// The objects directly under `prefix` (a location ending in '/', or a bare bucket), by name
    /// in name order. Throws remote_error (403 where listing is refused).
    std::function<std::vector<listed_object>(const location& prefix, const settings& s)> list;
    /// Removes the object; one that is not there is no error.
    std::function<void(const location& object, const settings& s)> remove;
    /// Facts for `ferry doctor` about a remote location before any read (endpoint, region,
    /// credentials used, for a prefix what it holds). The facts may name "probed_object", the
    /// object to time (a prefix's first); an "error" or a "note" among them ends the probe.
    /// Throws remote_error when the location cannot be resolved (no credentials...).
    std::function<nlohmann::json(const location& where, const settings& s)> probe;
};

}  // namespace ferry::detail
