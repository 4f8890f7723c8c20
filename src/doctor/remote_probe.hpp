// `ferry doctor https://…` and `ferry doctor s3://bucket/prefix`: whether the endpoint answers,
// which link of the credential chain answered (never the secret), the region and endpoint, the
// round-trip latency, a short throughput probe (one connection against the planned number), and
// the planned concurrency and range size with why.
#pragma once

#include <string>

#include "doctor/probe_util.hpp"
#include "ferry/settings.hpp"

namespace ferry::doctor {

/// True for the locations probe_remote handles (http, https, s3).
bool is_remote_location(const std::string& location);

/// `paths[]` entry for a remote location: path (redacted), remote, exists, type, size_bytes,
/// error, endpoint, region, credentials, credentials_expire and credentials_renew_at (temporary
/// credentials), credential_chain, checkpoint (an s3 prefix), latency_ms, throughput, plan.
/// Never throws for the location's sake. Reads at most 64 MiB of the object.
json probe_remote(const std::string& location, const settings& s);

}  // namespace ferry::doctor
