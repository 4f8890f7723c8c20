// The stable names of the reason codes (include/ferry/reason.hpp): each the enumerator's name.
#include "ferry/reason.hpp"

namespace ferry {

std::string_view to_string(reason_code c) noexcept {
    switch (c) {
        case reason_code::none: return "none";
        case reason_code::host_memory: return "host_memory";
        case reason_code::direct_io_on: return "direct_io_on";
        case reason_code::residency_unknown: return "residency_unknown";
        case reason_code::residency: return "residency";
        case reason_code::direct_unusable: return "direct_unusable";
        case reason_code::managed_memory: return "managed_memory";
        case reason_code::gds_off: return "gds_off";
        case reason_code::below_gds_threshold: return "below_gds_threshold";
        case reason_code::no_nvidia_fs: return "no_nvidia_fs";
        case reason_code::cufile_unusable: return "cufile_unusable";
        case reason_code::gds_direct_dma: return "gds_direct_dma";
        case reason_code::cufile_compat_forced: return "cufile_compat_forced";
        case reason_code::cufile_compat_slower: return "cufile_compat_slower";
        case reason_code::no_device_dma: return "no_device_dma";
        case reason_code::staging: return "staging";
        case reason_code::stream_lanes: return "stream_lanes";
        case reason_code::no_gpu: return "no_gpu";
        case reason_code::registered: return "registered";
        case reason_code::no_ranges: return "no_ranges";
        case reason_code::io_uring_on: return "io_uring_on";
        case reason_code::io_uring_not_faster: return "io_uring_not_faster";
        case reason_code::opened_write_only: return "opened_write_only";
        case reason_code::direct_io_unsupported_fs: return "direct_io_unsupported_fs";
        case reason_code::direct_io_open_failed: return "direct_io_open_failed";
        case reason_code::direct_io_refused_at_read: return "direct_io_refused_at_read";
        case reason_code::not_aligned: return "not_aligned";
        case reason_code::cufile_library_missing: return "cufile_library_missing";
        case reason_code::cufile_driver_failed: return "cufile_driver_failed";
        case reason_code::cufile_register_failed: return "cufile_register_failed";
        case reason_code::registration_changed: return "registration_changed";
        case reason_code::io_uring_not_built: return "io_uring_not_built";
        case reason_code::io_uring_disabled: return "io_uring_disabled";
        case reason_code::io_uring_not_permitted: return "io_uring_not_permitted";
        case reason_code::io_uring_not_supported: return "io_uring_not_supported";
        case reason_code::io_uring_setup_failed: return "io_uring_setup_failed";
        case reason_code::io_uring_off: return "io_uring_off";
        case reason_code::whole_tensor: return "whole_tensor";
        case reason_code::slice_covers_dimension: return "slice_covers_dimension";
        case reason_code::outermost_slice: return "outermost_slice";
        case reason_code::segments_cheaper: return "segments_cheaper";
        case reason_code::span_cheaper: return "span_cheaper";
        case reason_code::route_forced: return "route_forced";
    }
    return "?";
}

}  // namespace ferry
