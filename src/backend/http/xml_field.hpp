// Reading the few fields ferry needs from the small XML documents S3 and STS answer with
// (ListObjectsV2 pages, error bodies, CreateMultipartUpload, AssumeRole credentials). The
// answers are flat and machine-written; a field is the text between its first open and close
// tags, decoded. No XML library for this: no document ferry reads needs more.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry::detail {

/// The decoded character data of the first <tag>...</tag> that lies wholly inside
/// body[from, to); "" when there is none. Decoding turns the five named entities and numeric
/// character references into their characters (UTF-8): S3 escapes '&' and '<' in keys.
std::string xml_field(std::string_view body, std::string_view tag, std::size_t from = 0,
                      std::size_t to = std::string_view::npos);

/// XML character data decoded (see xml_field).
std::string xml_text(std::string_view s);

}  // namespace ferry::detail
