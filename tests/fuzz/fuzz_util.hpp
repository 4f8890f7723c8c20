// Shared by the fuzz targets: a scratch file per process, for the targets that go on from a
// parsed header to loading the whole file through the library's real read path.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace ferry::fuzz {

/// Writes `data` to this process's scratch file (created on first use under $TMPDIR, removed
/// at exit) and returns its path. Aborts when the file cannot be written: that is the harness
/// failing, not the code under test.
inline const std::string& scratch_file(const std::uint8_t* data, std::size_t size) {
    static const std::string path = [] {
        const char* tmp = std::getenv("TMPDIR");
        std::string p = std::string(tmp && *tmp ? tmp : "/tmp") + "/ferry-fuzz-" +
                        std::to_string(::getpid()) + ".bin";
        static std::string removed_at_exit = p;
        std::atexit([] { ::unlink(removed_at_exit.c_str()); });
        return p;
    }();
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) std::abort();
    std::size_t done = 0;
    while (done < size) {
        ssize_t n = ::write(fd, data + done, size - done);
        if (n <= 0) std::abort();
        done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    return path;
}

/// Splits `text` at `sep` into at most `max` fields (the last one keeps the rest).
template <class Out>
void split(std::string_view text, char sep, std::size_t max, Out&& out) {
    for (std::size_t i = 1; i < max; ++i) {
        auto at = text.find(sep);
        if (at == std::string_view::npos) break;
        out(text.substr(0, at));
        text.remove_prefix(at + 1);
    }
    out(text);
}

}  // namespace ferry::fuzz
