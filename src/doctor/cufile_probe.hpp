// cuFile as this process sees it (library, version, driver, properties) and the cufile.json
// that configures it.
#pragma once

#include <string>

#include "doctor/probe_util.hpp"

namespace ferry::doctor {

/// `cufile`: available, library, path, error, version, driver, properties, parameters,
/// std_fds_disturbed. Loads `library` through the process-wide shim (first caller wins).
json probe_cufile(const std::string& library);

/// `cufile.config`: the cufile.json in effect: $CUFILE_ENV_PATH_JSON, else /etc/cufile.json.
/// Parsed allowing comments, as cuFile does; a missing or corrupt file is reported, not thrown.
json probe_cufile_config();

/// The same for an explicit file (the work behind probe_cufile_config; separate for tests).
json read_cufile_config(const std::string& path, const std::string& source);

/// CUFILE_* environment variables and their values.
json cufile_environment();

}  // namespace ferry::doctor
