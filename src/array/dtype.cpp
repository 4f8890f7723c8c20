#include "ferry/dtype.hpp"

#include <array>

#include "ferry/error.hpp"

namespace ferry {
namespace {

struct dtype_row {
    dtype type;
    std::string_view name;
    std::size_t size;
    char numpy_kind;  // 0: no numpy type code
    std::string_view safetensors;  // empty: none
};

constexpr std::array<dtype_row, dtype_count> rows{{
    {dtype::bool_, "bool", 1, 'b', "BOOL"},
    {dtype::int8, "int8", 1, 'i', "I8"},
    {dtype::int16, "int16", 2, 'i', "I16"},
    {dtype::int32, "int32", 4, 'i', "I32"},
    {dtype::int64, "int64", 8, 'i', "I64"},
    {dtype::uint8, "uint8", 1, 'u', "U8"},
    {dtype::uint16, "uint16", 2, 'u', "U16"},
    {dtype::uint32, "uint32", 4, 'u', "U32"},
    {dtype::uint64, "uint64", 8, 'u', "U64"},
    {dtype::float16, "float16", 2, 'f', "F16"},
    {dtype::bfloat16, "bfloat16", 2, 0, "BF16"},
    {dtype::float32, "float32", 4, 'f', "F32"},
    {dtype::float64, "float64", 8, 'f', "F64"},
    {dtype::complex64, "complex64", 8, 'c', "C64"},
    {dtype::complex128, "complex128", 16, 'c', ""},
    {dtype::float8_e4m3fn, "float8_e4m3fn", 1, 0, "F8_E4M3"},
    {dtype::float8_e5m2, "float8_e5m2", 1, 0, "F8_E5M2"},
}};

const dtype_row& row(dtype t) noexcept { return rows[static_cast<std::size_t>(t)]; }

}  // namespace

std::size_t size_of(dtype t) noexcept { return row(t).size; }

std::size_t swap_unit_of(dtype t) noexcept { return is_complex(t) ? size_of(t) / 2 : size_of(t); }

bool is_floating(dtype t) noexcept {
    switch (t) {
    case dtype::float16:
    case dtype::bfloat16:
    case dtype::float32:
    case dtype::float64:
    case dtype::float8_e4m3fn:
    case dtype::float8_e5m2:
        return true;
    default:
        return false;
    }
}

bool is_complex(dtype t) noexcept { return t == dtype::complex64 || t == dtype::complex128; }

std::string_view to_string(dtype t) noexcept { return row(t).name; }

std::string_view to_string(byte_order o) noexcept {
    return o == byte_order::little ? "little" : "big";
}

std::optional<dtype> dtype_from_name(std::string_view name) noexcept {
    for (const auto& r : rows)
        if (r.name == name) return r.type;
    return std::nullopt;
}

std::optional<typed_order> parse_numpy_descr(std::string_view descr) noexcept {
    if (descr.empty()) return std::nullopt;
    byte_order order = native_byte_order;
    bool explicit_order = true;
    switch (descr.front()) {
    case '<': order = byte_order::little; break;
    case '>': order = byte_order::big; break;
    case '|':
    case '=': break;
    default: explicit_order = false;
    }
    if (explicit_order) descr.remove_prefix(1);
    if (descr.size() < 2) return std::nullopt;
    char kind = descr.front();
    std::string_view digits = descr.substr(1);
    if (digits.size() > 2) return std::nullopt;
    std::size_t size = 0;
    for (char c : digits) {
        if (c < '0' || c > '9') return std::nullopt;
        size = size * 10 + static_cast<std::size_t>(c - '0');
    }
    for (const auto& r : rows) {
        if (r.numpy_kind == kind && r.size == size) {
            // One-byte types have no byte order: normalise so equal types compare equal.
            return typed_order{r.type, size == 1 ? native_byte_order : order};
        }
    }
    return std::nullopt;
}

typed_order parse_dtype(std::string_view text, std::string_view what) {
    if (auto t = dtype_from_name(text)) return {*t, native_byte_order};
    if (auto t = parse_numpy_descr(text)) return *t;
    throw usage_error(std::string(what) + ": unknown dtype '" + std::string(text) +
                      "' (expected a numpy name such as float32 or a type string such as >f4)");
}

bool has_numpy_descr(dtype t) noexcept { return row(t).numpy_kind != 0; }

std::string numpy_descr(dtype t, byte_order order) {
    const dtype_row& r = row(t);
    if (r.numpy_kind == 0)
        throw usage_error("dtype " + std::string(r.name) +
                          " has no numpy type string (.npy cannot store it; use safetensors)");
    std::string s;
    s += r.size == 1 ? '|' : (order == byte_order::little ? '<' : '>');
    s += r.numpy_kind;
    s += std::to_string(r.size);
    return s;
}

std::optional<std::string_view> safetensors_name(dtype t) noexcept {
    if (row(t).safetensors.empty()) return std::nullopt;
    return row(t).safetensors;
}

std::optional<dtype> dtype_from_safetensors_name(std::string_view name) noexcept {
    if (name.empty()) return std::nullopt;
    for (const auto& r : rows)
        if (r.safetensors == name) return r.type;
    return std::nullopt;
}

}  // namespace ferry
