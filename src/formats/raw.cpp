// Raw files: the element bytes and nothing else, so the caller supplies dtype, count and offset.
#include "ferry/raw.hpp"

#include <string>

#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "formats/atomic_write.hpp"
#include "formats/deserialize.hpp"

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

}  // namespace

array fromfile(const std::string& path, typed_order type, std::int64_t count, std::uint64_t offset,
               const std::vector<std::int64_t>& shape, const load_options& options) {
    if (count < -1) throw usage_error("count must be -1 (the rest of the file) or >= 0");
    file f(path, open_mode::read);
    const std::uint64_t size = f.size();
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
    const std::uint64_t size = f.size();
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
