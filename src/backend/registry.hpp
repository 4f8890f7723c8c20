// The registry of sources: which source opens a location (by URI scheme; plain paths are local
// files), what else a scheme's store can do (list a prefix, remove an object, publish a written
// object whole, describe itself to the doctor), and for each kind of source why it cannot be
// used here, if it cannot. It is the only door to a backend: checkpoints, saves and the doctor
// ask here, never a backend's folder. The built-in table is in registry.cpp, one line per
// scheme; a program (a test binary, say) may add its own scheme at run time with
// register_scheme().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/location.hpp"
#include "backend/source.hpp"
#include "backend/store.hpp"
#include "ferry/file.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

/// Opens a source at a location; throws the error of what failed, naming the location.
using source_opener = std::function<std::unique_ptr<source>(const location& where, open_mode mode,
                                                            const settings& s)>;
/// Why a kind of source cannot be used in this process with these settings; "" when it can.
using source_availability = std::function<std::string(const settings& s)>;

struct scheme_entry {
    std::string scheme;  ///< "file", "http", "s3"... (a location "scheme://...")
    std::string kind;    ///< the kind() of the sources it opens
    source_opener open;
    source_availability unavailable;  ///< may be empty: always available
    store_operations operations = {};
    object_naming naming = object_naming::url_path;
    /// Checkpoint saves to a prefix need whole_at_sync (and `remove`).
    write_publication writes = write_publication::in_place;
};

/// Adds or replaces the opener of `entry.scheme`. Thread safe.
void register_scheme(scheme_entry entry);

/// Opens `where` through the opener of its scheme (location::registry_scheme()). Throws
/// usage_error for an unknown scheme, and an unavailable kind's reason as usage_error too.
std::unique_ptr<source> open_source(const location& where, open_mode mode, const settings& s);

/// The entry of `where`'s scheme (a copy: the table may change meanwhile); an entry without an
/// opener when no source is registered for it.
scheme_entry scheme_for(const location& where);

/// Why sources of `kind` cannot be used ("" when they can, or when the kind is unknown). The
/// planner and the doctor both ask here. Kinds: every registered scheme's, plus the local
/// file's alternatives (backend/alternatives.hpp).
std::string source_unavailable(std::string_view kind, const settings& s);

/// For the doctor: registers the open descriptor `fd` with the local file's alternative `kind`
/// as that source would (cufile: cuFileHandleRegister) and releases it at once. The status code
/// of the registration: 0 when it registered (and for kinds that register nothing).
int register_probe(std::string_view kind, int fd);

/// The registered schemes, in registration order (for messages and `ferry doctor`).
std::vector<std::string> registered_schemes();

}  // namespace ferry::detail
