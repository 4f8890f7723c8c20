// The table of sources. A new source is one folder under backend/ and one line here.
#include "backend/registry.hpp"

#include <mutex>

#include "backend/alternatives.hpp"
#include "backend/http/http_source.hpp"
#include "backend/http/http_store.hpp"
#include "backend/posix/posix_source.hpp"
#include "backend/s3/s3_source.hpp"
#include "backend/s3/s3_store.hpp"
#include "os/fork_safe_mutex.hpp"

namespace ferry::detail {
namespace {

// The sources a location can name, one line per URI scheme.
std::vector<scheme_entry> built_in() {
    return {
        {"file", "posix", open_local_file, {}},
        {"http", "http", open_http_source, {}, http_store()},
        {"https", "http", open_http_source, {}, http_store()},
        {"s3", "s3", open_s3_source, {}, s3_store(), object_naming::literal_key,
         write_publication::whole_at_sync},
    };
}

struct table {
    fork_safe_mutex& mutex;
    std::vector<scheme_entry> schemes = built_in();
};

fork_safe_mutex table_mutex;  // never left taken in a forked child
// Made on first use, which the line below makes happen at load (no fork can catch it half
// made), and never destroyed: files may be opened from static destructors.
table& schemes() {
    static table* t = new table{table_mutex};
    return *t;
}
[[maybe_unused]] table& made_at_load = schemes();

}  // namespace

void register_scheme(scheme_entry entry) {
    table& t = schemes();
    std::lock_guard lock(t.mutex);
    for (auto& e : t.schemes)
        if (e.scheme == entry.scheme) {
            e = std::move(entry);
            return;
        }
    t.schemes.push_back(std::move(entry));
}

scheme_entry scheme_for(const location& where) {
    std::string_view scheme = where.registry_scheme();
    table& t = schemes();
    std::lock_guard lock(t.mutex);
    for (const auto& e : t.schemes)
        if (e.scheme == scheme) return e;
    return {};
}

std::unique_ptr<source> open_source(const location& where, open_mode mode, const settings& s) {
    std::string_view scheme = where.registry_scheme();
    scheme_entry entry = scheme_for(where);
    if (!entry.open) {
        std::string known;
        for (const auto& k : registered_schemes()) known += (known.empty() ? "" : ", ") + k;
        throw usage_error("no source is registered for scheme \"" + std::string(scheme) + "\" (known: " + known +
                          "): " + where.shown());
    }
    if (entry.unavailable) {
        std::string no = entry.unavailable(s);
        if (!no.empty()) throw usage_error(entry.kind + " source unavailable: " + no + ": " + where.shown());
    }
    return entry.open(where, mode, s);
}

std::string source_unavailable(std::string_view kind, const settings& s) {
    // The kinds no location names: the local file's alternatives (backend/alternatives.cpp).
    if (const local_alternative* a = find_alternative(kind)) {
        auto no = a->probe ? a->probe(s) : std::nullopt;
        return no ? no->text : std::string();
    }
    source_availability check;
    {
        table& t = schemes();
        std::lock_guard lock(t.mutex);
        for (const auto& e : t.schemes)
            if (e.kind == kind && e.unavailable) check = e.unavailable;
    }
    return check ? check(s) : std::string();
}

int register_probe(std::string_view kind, int fd) {
    const local_alternative* a = find_alternative(kind);
    return a && a->register_fd ? a->register_fd(fd) : 0;
}

std::vector<std::string> registered_schemes() {
    table& t = schemes();
    std::lock_guard lock(t.mutex);
    std::vector<std::string> v;
    for (const auto& e : t.schemes) v.push_back(e.scheme);
    return v;
}

}  // namespace ferry::detail
