// .npy load and save. The path of the payload: one file::read straight into the destination
// (host, pinned or device memory), then formats::deserialize on the same side.
#include "ferry/npy.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "formats/atomic_write.hpp"
#include "formats/deserialize.hpp"
#include "formats/npy_header.hpp"

namespace ferry {
namespace {

npy_info read_info(const file& f) {
    const std::string& path = f.path();
    std::uint64_t size = f.size();
    char pre_bytes[formats::npy_preamble_max];
    std::size_t got = f.read_some(pre_bytes, sizeof pre_bytes, 0);
    formats::npy_preamble pre =
        formats::parse_npy_preamble(std::string_view(pre_bytes, got), path);
    if (pre.size + pre.header_size > size)
        throw format_error(path, "header",
                           "file ends inside the header (" + std::to_string(pre.header_size) +
                               " bytes announced, " + std::to_string(size - pre.size) +
                               " present)");
    // The preamble read may have taken the header's first bytes: each byte is read once (the
    // counters then add up to the file).
    std::string header(pre.header_size, '\0');
    std::size_t have = std::min<std::size_t>(got > pre.size ? got - pre.size : 0, header.size());
    std::copy(pre_bytes + pre.size, pre_bytes + pre.size + have, header.begin());
    if (have < header.size()) f.read(header.data() + have, header.size() - have, pre.size + have);
    npy_info info = formats::parse_npy_header(header, pre, path);
    if (info.data_bytes > size - info.data_offset)
        throw format_error(path, "data",
                           "file is truncated: " + std::to_string(info.data_bytes) +
                               " bytes of data expected, " +
                               std::to_string(size - info.data_offset) + " present");
    return info;
}

}  // namespace

npy_info read_npy_info(const std::string& path) {
    file f(path, open_mode::read);
    return read_info(f);
}

array load_npy(const std::string& path, const load_options& options, npy_info* header) {
    file f(path, open_mode::read);
    npy_info info = read_info(f);
    if (header) *header = info;
    formats::check_conversion(info.type.type, options, path);
    array raw(info.type.type, info.shape, options.where, info.layout, info.type.order);
    if (info.data_bytes > 0) f.read(raw.data(), info.data_bytes, info.data_offset);
    return formats::deserialize(std::move(raw), options);
}

void save_npy(const std::string& path, const array& a) {
    typed_order type{a.type(), a.is_native() ? native_byte_order : a.endian()};
    // As numpy.save: Fortran order is kept where it differs from C order (fortran_order: True
    // and the bytes as they are); an array that is both is written as C order.
    const bool fortran = a.layout() == storage_order::fortran && !a.is_c_and_fortran();
    std::string header = formats::format_npy_header(  // refuses bfloat16 etc.
        type, a.shape(), fortran ? storage_order::fortran : storage_order::c);
    std::optional<array> c;
    if (!fortran) c = to_c_order(a);
    const array& data = fortran ? a : *c;
    formats::save_atomically(path, [&](formats::atomic_write& out) {
        out.write({{header.data(), header.size(), 0}, {data.data(), data.nbytes(), header.size()}});
    });
}

}  // namespace ferry
