// Raw files: the element bytes and nothing else, so the caller supplies dtype, count and offset.
#include "ferry/raw.hpp"

#include <string>

#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "formats/atomic_write.hpp"
#include "formats/deserialize.hpp"
#include "os/sys.hpp"

namespace ferry {
namespace {

void check_offset(const std::string& path, std::uint64_t offset, std::uint64_t size) {
    if (offset > size)
        throw format_error(path, "offset",
                           "offset " + std::to_string(offset) + " is beyond the end of the " +
                               std::to_string(size) + "-byte file");
}

// `n` items of `item` bytes must fit in the `rest` bytes after `offset`.
void check_count(const std::string& path, std::uint64_t n, std::uint64_t item, std::uint64_t offset,
                 std::uint64_t rest) {
    if (n > rest / item)
        throw format_error(path, "count",
                           std::to_string(n) + " items of " + std::to_string(item) +
                               " bytes run past the end of the file (" + std::to_string(rest) +
                               " bytes after offset " + std::to_string(offset) + ")");
}

// Whether the local file at `path` gives a byte when read. ferry::file reads no further than
// the size it was told, so this is a read of its own; a path that does not open as a local
// file (a URL) gives none. Non-blocking: a FIFO must not wait here for a writer.
bool yields_a_byte(const std::string& path) {
    int fd = sys::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return false;
    unsigned char byte = 0;
    const bool yields = sys::pread(fd, &byte, 1, 0) > 0;
    sys::close(fd);
    return yields;
}

// The file's size, by which its items are counted. A file of /proc or /sys says 0 bytes and
// makes its text as it is read (/proc/self/status): counted by that size it would load as 0
// items, silently, so a file that says 0 but yields a byte is refused.
std::uint64_t size_of_file(const file& f, const std::string& path) {
    const std::uint64_t size = f.size();
    if (size == 0 && yields_a_byte(path))
        throw format_error(path, "size",
                           "the file says it holds 0 bytes but has content (a /proc or /sys file, made as it "
                           "is read); ferry reads a file by its size: copy it to a regular file first");
    return size;
}

}  // namespace

array fromfile(const std::string& path, typed_order type, std::int64_t count, std::uint64_t offset,
               const std::vector<std::int64_t>& shape, const load_options& options) {
    if (count < -1) throw usage_error("count must be -1 (the rest of the file) or >= 0");
    file f(path, open_mode::read);
    const std::uint64_t size = size_of_file(f, path);
    const std::uint64_t item = size_of(type.type);
    check_offset(path, offset, size);
    const std::uint64_t rest = size - offset;
    std::uint64_t n = 0;
    if (!shape.empty() && count == -1) count = static_cast<std::int64_t>(element_count(shape, item));
    if (count == -1) {
        if (rest % item != 0)
            throw format_error(path, "size",
                               "the " + std::to_string(rest) + " bytes after offset " +
                                   std::to_string(offset) + " are not a whole number of " +
                                   std::string(to_string(type.type)) + " items (" +
                                   std::to_string(item) + " bytes each)");
        n = rest / item;
    } else {
        n = static_cast<std::uint64_t>(count);
        check_count(path, n, item, offset, rest);
    }
    std::vector<std::int64_t> dims = shape;
    if (dims.empty()) {
        dims = {static_cast<std::int64_t>(n)};
    } else if (element_count(dims, item) != n) {
        throw usage_error("shape " + shape_to_string(dims) + " holds " +
                          std::to_string(element_count(dims, item)) + " items, not " +
                          std::to_string(n));
    }
    formats::check_conversion(type.type, options, path);
    array raw(type.type, dims, options.where, storage_order::c, type.order);
    if (raw.nbytes() > 0) f.read(raw.data(), raw.nbytes(), offset);
    return formats::deserialize(std::move(raw), options);
}

array fromfile_into(const std::string& path, typed_order type, const array& out, std::int64_t count,
                    std::uint64_t offset, const load_options& options) {
    if (count < -1) throw usage_error("count must be -1 (out's size) or >= 0");
    if (options.as) throw usage_error(path + ": out= receives the file's items as they are; a dtype conversion needs other storage");
    if (options.c_order) throw usage_error(path + ": out= receives the file's items in C order already");
    if (out.read_only())
        throw usage_error(path + ": out= is read-only (its memory was lent read-only); pass writable memory");
    if (out.type() != type.type)
        throw usage_error(path + ": out= has dtype " + std::string(to_string(out.type())) + ", the items are " +
                          std::string(to_string(type.type)));
    if (out.layout() != storage_order::c && !out.is_c_and_fortran())
        throw usage_error(path + ": out= must be C-contiguous");
    const std::uint64_t items = out.size();
    if (count != -1 && static_cast<std::uint64_t>(count) != items)
        throw usage_error(path + ": count " + std::to_string(count) + " does not match out='s " + std::to_string(items) +
                          " items");
    file f(path, open_mode::read);
    const std::uint64_t size = size_of_file(f, path);
    const std::uint64_t item = size_of(type.type);
    check_offset(path, offset, size);
    check_count(path, items, item, offset, size - offset);
    if (out.nbytes() > 0) f.read(out.data(), out.nbytes(), offset);
    array view(out.owner(), out.data(), type.type, out.shape(), out.where(), storage_order::c, type.order);
    if (options.keep_byte_order) return view;
    return to_native_in_place(view, options.stream);
}

void tofile(const array& a, const std::string& path) {
    array c = to_c_order(a);
    formats::save_atomically(path, [&](formats::atomic_write& out) { out.write({{c.data(), c.nbytes(), 0}}); });
}

}  // namespace ferry
