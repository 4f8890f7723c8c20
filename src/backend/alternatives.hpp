// The local file's alternatives: other ways to move the bytes of a file the posix source has
// open (O_DIRECT reads, cuFile DMA, a registration's pinned pages...). Each is described once,
// in the table of alternatives.cpp, by facts the planner reads (its role, what memory it serves,
// what it needs) and a probe that says why it cannot be used here, with a stable reason code.
// The posix source opens them by this table, the planner and the doctor read it: none of them
// names an alternative. A new alternative is one folder under backend/ and one line there.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "backend/source.hpp"
#include "ferry/file.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

/// The part an alternative plays in the planner's rules (io/planner.cpp), each its own rules.
enum class alternative_role {
    page_cache_bypass,  ///< reads around the page cache (FERRY_DIRECT_IO, the residency rule)
    device_dma,         ///< moves bytes to and from GPU memory itself (FERRY_GDS)
    registered_pages,   ///< DMA from a registration's pinned pages (ferry::registered_file)
    batched_reads,      ///< reads into host memory in batched submissions
};

/// What an alternative serves and needs: facts, not behaviour switches.
struct alternative_traits {
    bool host_memory = false;      ///< reads land in host memory (the host and staged movers)
    bool device_memory = false;    ///< moves bytes to GPU memory itself (the device-dma mover)
    bool writes = false;           ///< serves writes too
    bool aligned = false;          ///< requests widened to the device's alignment (O_DIRECT)
    bool runtime_library = false;  ///< needs a library loaded at run time
    bool opened_per_file = true;   ///< the posix source opens one per file (else found elsewhere)
};

/// What an opener gets: the open file, and a way to its siblings (cuFile wants the O_DIRECT
/// descriptor when there is one).
struct alternative_base {
    const std::string& path;
    int fd;
    open_mode mode;
    const settings& config;
    /// The file's alternative of that role, opened on first ask; null with the reason.
    source* (*sibling)(void* owner, alternative_role role, unavailable_reason& why);
    void* owner;
};

struct local_alternative {
    const char* kind;  ///< the source's kind() and route name: "direct", "cufile"...
    alternative_role role;
    alternative_traits traits;
    /// Why it cannot be used in this process with these settings, whatever the file (a missing
    /// library, a kernel without support); nullopt when usable. Null: always usable.
    std::optional<unavailable_reason> (*probe)(const settings& s);
    /// Opens it over one file; null with the reason (and its code) when it cannot serve it.
    /// Null when !traits.opened_per_file.
    std::unique_ptr<source> (*open)(const alternative_base& base, unavailable_reason& why);
    /// For the doctor: registers `fd` as this alternative would and returns the library's status
    /// (0 when it took the file). Null: the alternative registers nothing.
    int (*register_fd)(int fd) = nullptr;
    /// For a role found by the file's registration rather than opened over it: the registration
    /// that covers the open file `fd`, or null; `changed` says why an older one no longer does.
    std::shared_ptr<source> (*find_registered)(int fd, std::string& changed) = nullptr;
};

/// The table, in the order the posix source opens them (and closes them, reversed).
std::span<const local_alternative> local_alternatives();
/// The entry of `kind`, or null.
const local_alternative* find_alternative(std::string_view kind);
/// The entry that plays `role`, or null (this build has none).
const local_alternative* alternative_for(alternative_role role);

}  // namespace ferry::detail
