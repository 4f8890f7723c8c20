// Text from a file (or the environment) made safe to put in a message: error messages go to
// terminals, logs and tools that read standard error as UTF-8, and a malformed file must not
// make them invalid. The one helper every message built from such text goes through.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry::detail {

/// `text` with every byte that is not part of printable UTF-8 written as \xHH: control
/// characters (C0, DEL, C1; \n, \r and \t as such) and bytes of invalid or overlong sequences.
/// Printable ASCII and valid multi-byte characters stay. With `limit`, at most that many
/// input bytes are kept and "..." marks the cut.
std::string escape_text(std::string_view text, std::size_t limit = std::string_view::npos);

/// Whether `text` is valid UTF-8 (RFC 3629: no overlong forms, no surrogates): what a name
/// must be to go into a JSON header.
bool is_utf8(std::string_view text);

}  // namespace ferry::detail
