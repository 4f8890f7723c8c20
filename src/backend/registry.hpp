// The registry of sources: which source opens a location (by URI scheme; plain paths are local
// files), and for each kind of source why it cannot be used here, if it cannot. The built-in
// table is in registry.cpp, one line per scheme; a program (a test binary, say) may add its own
// scheme at run time with register_scheme().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/source.hpp"
#include "ferry/file.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

/// Opens a source at a location; throws the error of what failed, naming the location.
using source_opener = std::function<std::unique_ptr<source>(const std::string& location, open_mode mode,
                                                            const settings& s)>;
/// Why a kind of source cannot be used in this process with these settings; "" when it can.
using source_availability = std::function<std::string(const settings& s)>;

struct scheme_entry {
    std::string scheme;  ///< "file", "http", "s3"... (a location "scheme://...")
    std::string kind;    ///< the kind() of the sources it opens
    source_opener open;
    source_availability unavailable;  ///< may be empty: always available
};

/// Adds or replaces the opener of `entry.scheme`. Thread safe.
void register_scheme(scheme_entry entry);

/// `location` fit for a message: user information and query strings (credentials, signatures)
/// replaced by "<redacted>".
std::string redact_location(std::string_view location);

/// The scheme of a location: what precedes "://", or "file" for a plain path.
std::string scheme_of(std::string_view location);

/// Opens `location` through the opener of its scheme. Throws usage_error for an unknown scheme,
/// and an unavailable kind's reason as usage_error too.
std::unique_ptr<source> open_source(const std::string& location, open_mode mode, const settings& s);

/// Why sources of `kind` cannot be used ("" when they can, or when the kind is unknown). The
/// planner and the doctor both ask here. Kinds: every registered scheme's, plus the local
/// file's alternatives (backend/alternatives.hpp).
std::string source_unavailable(std::string_view kind, const settings& s);

/// The registered schemes, in registration order (for messages and `ferry doctor`).
std::vector<std::string> registered_schemes();

}  // namespace ferry::detail
