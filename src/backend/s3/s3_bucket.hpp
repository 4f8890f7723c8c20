// Operations on an S3 bucket rather than on one object: listing the keys under a prefix
// (ListObjectsV2, page by page) and deleting an object (DeleteObject). Checkpoints use them: a
// prefix without an index is its *.safetensors objects, and a save removes the previous
// generation's shards once its new index is uploaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/location.hpp"
#include "backend/s3/credential_chain.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

struct s3_entry {
    std::string key;   ///< the whole key
    std::uint64_t size = 0;
    std::string etag;
};

/// The objects whose keys start with the key of `prefix` ("s3://bucket/a/b/"), in key order.
/// With `direct_only`, only those directly under it (no further '/'). Throws remote_error
/// naming s3://bucket/prefix, the status and the credentials used.
std::vector<s3_entry> list_s3_prefix(const location& prefix, const settings& s, bool direct_only = true,
                                     const s3_options& o = {}, const env_lookup& env = process_environment());

/// Deletes the object `location`; an object that is not there is no error (S3 answers 204 then
/// too). Throws remote_error otherwise.
void delete_s3_object(const location& where, const settings& s, const s3_options& o = {},
                      const env_lookup& env = process_environment());

}  // namespace ferry::detail
