#include "ferry/convert.hpp"

#include <algorithm>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "array/host_kernels.hpp"
#include "cuda/deserialize_kernels.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace {

void swap_storage(const array& src, void* dst, stream_t s) {
    std::size_t unit = swap_unit_of(src.type());
    std::size_t groups = src.nbytes() / unit;
    if (src.where().on_gpu()) {
        if (dst != src.data()) kernels::copy(dst, src.data(), src.nbytes(), src.where().device, s);
        kernels::byte_swap(dst, groups, unit, src.where().device, s);
    } else {
        host_kernels::byte_swap_copy(src.data(), dst, groups, unit);
    }
}

}  // namespace

bool can_astype(dtype from, dtype to) noexcept { return kernels::can_convert(from, to); }

array to_native(const array& a, stream_t s) {
    if (a.is_native()) return a;
    array out(a.type(), a.shape(), a.where(), a.layout(), native_byte_order);
    swap_storage(a, out.data(), s);
    if (a.where().on_gpu()) kernels::synchronize(s, a.where().device);
    return out;
}

array to_native_in_place(const array& a, stream_t s) {
    if (a.is_native()) return a;
    if (a.read_only())
        throw usage_error("to_native_in_place: the array is read-only (its memory was lent read-only); "
                          "to_native makes a native copy");
    swap_storage(a, a.data(), s);
    if (a.where().on_gpu()) kernels::synchronize(s, a.where().device);
    return a.with_endian(native_byte_order);
}

array to_c_order(const array& a, stream_t s) {
    if (a.layout() == storage_order::c) return a;
    if (a.is_c_and_fortran()) return a.reshaped(a.shape());
    array out(a.type(), a.shape(), a.where(), storage_order::c, a.endian());
    if (a.where().on_gpu()) {
        kernels::fortran_to_c(a.data(), out.data(), a.itemsize(), a.shape(), a.where().device, s);
        kernels::synchronize(s, a.where().device);
    } else {
        host_kernels::fortran_to_c(a.data(), out.data(), a.itemsize(), a.shape());
    }
    return out;
}

array astype(const array& a, dtype to, stream_t s) {
    if (!can_astype(a.type(), to))
        throw usage_error("cannot convert " + std::string(to_string(a.type())) + " to " +
                          std::string(to_string(to)) +
                          " (supported: float16, bfloat16, float64 to and from float32)");
    if (a.type() == to) return to_native(a, s);
    array src = to_native(a, s);
    array out(to, a.shape(), a.where(), a.layout(), native_byte_order);
    if (a.where().on_gpu()) {
        kernels::convert(src.data(), src.type(), out.data(), to, src.size(), a.where().device, s);
        kernels::synchronize(s, a.where().device);
    } else {
        host_kernels::convert(src.data(), src.type(), out.data(), to, src.size());
    }
    return out;
}

array to_native_c(const array& a, stream_t s) { return to_c_order(to_native(a, s), s); }

std::vector<array> to_native_c_many(const std::vector<array>& arrays, stream_t s) {
    // The transposes' destinations: one allocation per placement, each array at a multiple of 256.
    std::map<std::pair<memory_kind, int>, std::pair<std::uint64_t, array>> room;
    auto key = [](const array& a) { return std::make_pair(a.where().kind, a.where().device); };
    auto needs_transpose = [](const array& a) { return a.layout() == storage_order::fortran && !a.is_c_and_fortran(); };
    for (const array& a : arrays) {
        if (!a.is_native() && a.read_only())
            throw usage_error("to_native_c_many: an array is read-only (its memory was lent read-only)");
        if (needs_transpose(a)) room[key(a)].first += (a.nbytes() + 255) / 256 * 256;
    }
    for (auto& [k, r] : room)
        r.second = array(dtype::uint8, {static_cast<std::int64_t>(r.first)}, placement{k.first, k.second});
    std::map<std::pair<memory_kind, int>, std::uint64_t> used;
    std::vector<array> out;
    out.reserve(arrays.size());
    std::vector<int> devices;
    for (const array& a : arrays) {
        array native = a;
        if (!a.is_native()) {
            swap_storage(a, a.data(), s);
            native = a.with_endian(native_byte_order);
        }
        if (needs_transpose(a)) {
            const array& block = room[key(a)].second;
            std::uint64_t& at = used[key(a)];
            void* dst = static_cast<unsigned char*>(block.data()) + at;
            at += (a.nbytes() + 255) / 256 * 256;
            if (a.where().on_gpu())
                kernels::fortran_to_c(native.data(), dst, a.itemsize(), a.shape(), a.where().device, s);
            else
                host_kernels::fortran_to_c(native.data(), dst, a.itemsize(), a.shape());
            native = array(block.owner(), dst, a.type(), a.shape(), a.where(), storage_order::c, native_byte_order);
        }
        if (a.where().on_gpu() && std::find(devices.begin(), devices.end(), a.where().device) == devices.end())
            devices.push_back(a.where().device);
        out.push_back(std::move(native));
    }
    for (int d : devices) kernels::synchronize(s, d);
    return out;
}

}  // namespace ferry
