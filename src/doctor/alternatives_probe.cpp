#include "doctor/alternatives_probe.hpp"

#include "backend/alternatives.hpp"
#include "ferry/reason.hpp"

namespace ferry::doctor {
namespace {

const char* role_name(detail::alternative_role r) {
    switch (r) {
        case detail::alternative_role::page_cache_bypass: return "page_cache_bypass";
        case detail::alternative_role::device_dma: return "device_dma";
        case detail::alternative_role::registered_pages: return "registered_pages";
        case detail::alternative_role::batched_reads: return "batched_reads";
    }
    return "?";
}

}  // namespace

json probe_alternatives(const settings& s) {
    json out = json::array();
    for (const detail::local_alternative& a : detail::local_alternatives()) {
        auto no = a.probe ? a.probe(s) : std::nullopt;
        out.push_back({{"kind", a.kind},
                       {"role", role_name(a.role)},
                       {"serves",
                        {{"host_memory", a.traits.host_memory},
                         {"device_memory", a.traits.device_memory},
                         {"writes", a.traits.writes}}},
                       {"aligned", a.traits.aligned},
                       {"runtime_library", a.traits.runtime_library},
                       {"usable", !no},
                       {"cause", no ? json(std::string(to_string(no->cause))) : json(nullptr)},
                       {"reason", no ? json(no->text) : json(nullptr)}});
    }
    return out;
}

}  // namespace ferry::doctor
