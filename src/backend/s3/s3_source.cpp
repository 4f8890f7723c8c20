// The S3 source and the s3:// opener.
#include "backend/s3/s3_source.hpp"

#include "backend/s3/s3_object_writer.hpp"

namespace ferry::detail {
namespace {

http_target target_of(const s3_location& l) {
    http_target t;
    t.url = l.object_url;
    t.location = l.location;
    t.auth = l.auth;
    t.signer = l.signer;
    t.follow_redirects = false;  // a signed request must not wander to another host
    t.kind = "s3";
    t.object_checksums = true;
    return t;
}

}  // namespace

s3_source::s3_source(s3_location where, const settings& s) : http_source(target_of(where), s), where_(std::move(where)) {}

std::unique_ptr<source> open_s3_object(const location& where, open_mode mode, const settings& s,
                                       const s3_options& o, const env_lookup& env) {
    s3_location l = resolve_s3_location(where, o, env, s);
    if (l.key.empty() || l.key.back() == '/') throw usage_error("an s3:// location needs an object key: " + l.location);
    switch (mode) {
        case open_mode::read: return std::make_unique<s3_source>(std::move(l), s);
        case open_mode::write: return std::make_unique<s3_object_writer>(std::move(l), s);
        default: throw usage_error("s3:// objects open for reading or (whole-object) writing only: " + l.location);
    }
}

std::unique_ptr<source> open_s3_source(const location& where, open_mode mode, const settings& s) {
    return open_s3_object(where, mode, s, {}, process_environment());
}

}  // namespace ferry::detail
