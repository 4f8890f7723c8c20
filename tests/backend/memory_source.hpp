// A test-only source that keeps a file's bytes in memory: it loads the file named by its
// location when opened for reading, and writes its bytes back to that file on sync() and
// close(). Registered from the test binary with one line (register_memory_source), it shows
// that a source needs one folder and one registry line, and lets the conformance suite run
// over a source that is not a POSIX descriptor.
#pragma once

#include <string>

namespace ferry::test {

/// Registers the memory source for `scheme` ("mem", or "file" to serve plain paths).
void register_memory_source(const std::string& scheme);
/// Gives plain paths back to the local file source.
void restore_local_files();

}  // namespace ferry::test
