// Element types of ferry's arrays, their numpy and safetensors names, and byte order.
#pragma once

#include "ferry/export.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ferry {

/// The element types ferry moves. Names (to_string) follow numpy: "float32", "bfloat16", ...
enum class dtype : std::uint8_t {
    bool_,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
    float16,
    bfloat16,
    float32,
    float64,
    complex64,
    complex128,
    float8_e4m3fn,
    float8_e5m2,
};

inline constexpr int dtype_count = 17;

/// Byte order of the elements as stored. Single-byte types are always `native`-equivalent.
enum class byte_order : std::uint8_t { little, big };

/// The byte order of this machine.
inline constexpr byte_order native_byte_order =
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    byte_order::big;
#else
    byte_order::little;
#endif

/// Bytes per element.
FERRY_EXPORT std::size_t size_of(dtype t) noexcept;
/// Bytes swapped as one unit when changing byte order: the element size, except for complex
/// types, whose real and imaginary halves are swapped separately; 1 means nothing to swap.
FERRY_EXPORT std::size_t swap_unit_of(dtype t) noexcept;
FERRY_EXPORT bool is_floating(dtype t) noexcept;  ///< float16, bfloat16, float32, float64, float8_*
FERRY_EXPORT bool is_complex(dtype t) noexcept;

/// numpy's name: "bool", "int8", ..., "float8_e4m3fn".
FERRY_EXPORT std::string_view to_string(dtype t) noexcept;
FERRY_EXPORT std::string_view to_string(byte_order o) noexcept;  ///< "little" or "big"

/// Parses a numpy name exactly as to_string writes it ("float32", "bool"); nullopt when unknown.
FERRY_EXPORT std::optional<dtype> dtype_from_name(std::string_view name) noexcept;

/// A dtype and the byte order its bytes are stored in.
struct FERRY_EXPORT typed_order {
    dtype type = dtype::uint8;
    byte_order order = native_byte_order;
    friend bool operator==(const typed_order&, const typed_order&) = default;
};

/// Parses a numpy array-protocol type string: an order character (`<` little, `>` big, `|` not
/// applicable, `=` native; optional, native when absent), a kind (b i u f c) and the item size in
/// bytes: "<f4", ">i8", "|b1", "<c8", "f2". Types numpy has no code for (bfloat16, float8_*) and
/// structured or object descriptors are refused: nullopt.
FERRY_EXPORT std::optional<typed_order> parse_numpy_descr(std::string_view descr) noexcept;

/// Parses what a user may type for a dtype: a numpy name ("float32", native order) or a type
/// string (">f4"). Throws usage_error naming `what` and the text when it parses as neither.
FERRY_EXPORT typed_order parse_dtype(std::string_view text, std::string_view what = "dtype");

/// numpy's type string for `t` stored in `order`: "<f4", ">i8", "|u1", "|b1". Throws
/// usage_error for types .npy cannot describe (bfloat16, float8_*).
FERRY_EXPORT std::string numpy_descr(dtype t, byte_order order);
/// Whether numpy_descr can describe `t`.
FERRY_EXPORT bool has_numpy_descr(dtype t) noexcept;

/// safetensors' name: "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
/// "I32", "U32", "F32", "F64", "I64", "U64", "C64". nullopt for complex128, which safetensors
/// cannot store.
FERRY_EXPORT std::optional<std::string_view> safetensors_name(dtype t) noexcept;
/// Parses a safetensors dtype name; nullopt for unknown ones (including F8_E8M0, F4, F6_*).
FERRY_EXPORT std::optional<dtype> dtype_from_safetensors_name(std::string_view name) noexcept;

}  // namespace ferry
