// Everything about one PATH (a file or a directory) that decides how ferry reads it: file
// system and mount options, block device and its udev record, O_DIRECT, page-cache residency,
// and whether cuFile accepts a file there.
#pragma once

#include <string>

#include "doctor/probe_util.hpp"

namespace ferry::doctor {

/// `paths[]` entry without the verdict: path, exists, type, size_bytes, error, filesystem,
/// block_device, udev, direct_io, page_cache, cufile_register. Never throws for the path's
/// sake; `cufile_library` is only used when cuFile already loaded and opened its driver.
json probe_path(const std::string& path, const std::string& cufile_library);

/// File-system name for a statfs f_type, or "" when unknown.
std::string filesystem_name(unsigned long magic);

/// The O_DIRECT probe alone (for a file, or a temporary file in a directory).
json probe_direct_io(const std::string& path, bool is_directory);

/// Page-cache residency of a file, or of the regular files directly inside a directory.
json probe_page_cache(const std::string& path, bool is_directory);

/// The udev record of block device major:minor: record, exists, id_fs_usage, id_fs_type.
json probe_udev_record(unsigned major, unsigned minor);

}  // namespace ferry::doctor
