// NVTX ranges in the "ferry" domain, so a profiler timeline shows each request and task and
// the path that served it. NVTX costs nothing when no tool is attached.
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace ferry::detail {

// Made at load, not on first use: a fork inside a first-use initialization would leave its
// guard taken in the child.
inline const nvtxDomainHandle_t trace_domain_handle = nvtxDomainCreateA("ferry");
inline nvtxDomainHandle_t trace_domain() { return trace_domain_handle; }

/// A scoped range; `name` must outlive the range (use string literals or stable strings).
class trace_range {
public:
    explicit trace_range(const char* name) {
        nvtxEventAttributes_t a{};
        a.version = NVTX_VERSION;
        a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        a.messageType = NVTX_MESSAGE_TYPE_ASCII;
        a.message.ascii = name;
        nvtxDomainRangePushEx(trace_domain(), &a);
    }
    ~trace_range() { nvtxDomainRangePop(trace_domain()); }
    trace_range(const trace_range&) = delete;
    trace_range& operator=(const trace_range&) = delete;
};

}  // namespace ferry::detail
