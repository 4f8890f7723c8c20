// An S3 object (s3://bucket/key) read with SigV4-signed ranged GETs: an http_source pointed at
// the resolved endpoint. Messages name s3://bucket/key, the HTTP status, S3's error code and the
// credential link used (never a secret).
#pragma once

#include <memory>
#include <string>

#include "backend/http/http_source.hpp"
#include "backend/s3/s3_location.hpp"

namespace ferry::detail {

class s3_source : public http_source {
public:
    explicit s3_source(s3_location where, const settings& s);
    const s3_location& where() const noexcept { return where_; }

private:
    s3_location where_;
};

/// The registry's opener for s3:// locations: open_mode::read gives an s3_source,
/// open_mode::write an s3_object_writer (multipart upload). Options come from the environment.
std::unique_ptr<source> open_s3_source(const location& where, open_mode mode, const settings& s);
/// The same with explicit options (credentials, endpoint, region) and environment.
std::unique_ptr<source> open_s3_object(const location& where, open_mode mode, const settings& s,
                                       const s3_options& o, const env_lookup& env);

}  // namespace ferry::detail
