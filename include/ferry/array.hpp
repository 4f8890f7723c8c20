// ferry::array: an n-dimensional array in host, pinned-host or GPU memory, with its dtype, byte
// order, shape and layout (C or Fortran order), exportable through DLPack without a copy.
#pragma once

#include "ferry/export.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/dlpack.hpp"
#include "ferry/dtype.hpp"
#include "ferry/memory.hpp"

namespace ferry {

/// Where an array's memory lives: pageable host memory, pinned host memory, or a GPU.
struct FERRY_EXPORT placement {
    memory_kind kind = memory_kind::host;
    int device = 0;  ///< the GPU, for memory_kind::device and managed

    static placement host() noexcept { return {memory_kind::host, 0}; }
    static placement pinned() noexcept { return {memory_kind::pinned, 0}; }
    static placement cuda(int device = 0) noexcept { return {memory_kind::device, device}; }
    bool on_gpu() const noexcept {
        return kind == memory_kind::device || kind == memory_kind::managed;
    }
    friend bool operator==(const placement&, const placement&) = default;
};

/// "host", "pinned", "cuda:N" (device) or "managed:N".
FERRY_EXPORT std::string to_string(const placement& p);
/// Parses "host", "pinned", "cuda", "cuda:N". Throws usage_error on anything else.
FERRY_EXPORT placement parse_placement(std::string_view text);

/// Element order in memory: C (row-major, last index fastest) or Fortran (first index fastest).
enum class storage_order : std::uint8_t { c, fortran };
FERRY_EXPORT std::string_view to_string(storage_order o) noexcept;

/// A dense array. The elements are contiguous in C or Fortran order (no other strides).
///
/// Ownership: an array holds shared ownership of its storage. Copying an array copies the
/// handle, not the elements (both refer to the same memory); `clone()` copies the elements.
/// Arrays loaded from one safetensors file share one allocation; it is freed when the last of
/// them (and the last DLPack export of them) is gone.
///
/// Read-only arrays: a view of memory its producer lent read-only (a read-only numpy array, a
/// DLPack export flagged read-only, a CUDA array interface marked so) is marked `read_only()`.
/// Views of it (with_endian, reshaped, a copy of the handle) keep the mark; copies of the
/// elements (copy_to, clone) are writable. Every ferry call that writes into an array (fromfile_into,
/// to_native_in_place, checkpoint destinations) refuses a read-only one with usage_error or
/// checkpoint_error before any byte moves. ferry's DLPack export of it carries the read-only
/// flag (the versioned export; the legacy one has no flag).
///
/// Thread safety: const member functions may be called from many threads; writing the
/// elements while another thread reads them is a data race, as for any memory.
class FERRY_EXPORT array {
public:
    /// An empty array: no storage, dtype uint8, shape (0,).
    array();
    /// Allocates uninitialised storage for `shape` (each dimension >= 0) at `where`.
    /// Throws usage_error for a negative dimension or a size that overflows, cuda_error when
    /// GPU or pinned memory cannot be allocated.
    array(dtype type, std::vector<std::int64_t> shape, placement where = {},
          storage_order layout = storage_order::c, byte_order order = native_byte_order);
    /// A view of memory kept alive by `owner` (which may own a larger buffer): the elements
    /// start at `data`. No allocation.
    array(std::shared_ptr<const void> owner, void* data, dtype type,
          std::vector<std::int64_t> shape, placement where,
          storage_order layout = storage_order::c, byte_order order = native_byte_order);

    ferry::dtype type() const noexcept { return type_; }
    ferry::byte_order endian() const noexcept { return order_; }
    /// True when the elements are in this machine's byte order (always for 1-byte types).
    bool is_native() const noexcept;
    storage_order layout() const noexcept { return layout_; }
    const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
    std::size_t ndim() const noexcept { return shape_.size(); }
    /// Strides in elements (DLPack's unit), from the shape and the layout.
    std::vector<std::int64_t> strides() const;
    /// Number of elements (1 for a 0-d array, 0 when any dimension is 0).
    std::size_t size() const noexcept { return size_; }
    std::size_t nbytes() const noexcept { return size_ * size_of(type_); }
    std::size_t itemsize() const noexcept { return size_of(type_); }
    /// True when C order and Fortran order describe the same memory (ndim <= 1, or at most one
    /// dimension larger than 1).
    bool is_c_and_fortran() const noexcept;

    void* data() const noexcept { return data_; }
    const placement& where() const noexcept { return where_; }
    /// The shared owner of the storage (for views that must keep it alive).
    const std::shared_ptr<const void>& owner() const noexcept { return owner_; }
    /// True when the elements may not be written through this array (see above).
    bool read_only() const noexcept { return read_only_; }

    /// The same elements, marked read-only. No copy.
    array as_read_only() const;

    /// The same elements, relabelled: the caller asserts the bytes now are in `order` / the
    /// array now has `layout` (used after an in-place byte swap). No copy.
    array with_endian(ferry::byte_order order) const;
    /// A view with a new shape of the same element count (C-order arrays only).
    array reshaped(std::vector<std::int64_t> shape) const;

    /// A copy of the elements at `where` (same dtype, byte order and layout). Synchronous.
    array copy_to(placement where) const;
    array clone() const { return copy_to(where_); }

    /// Exports through DLPack without a copy; the export shares ownership of the storage and
    /// keeps it alive until the consumer calls the deleter. Throws usage_error when the
    /// elements are not in native byte order (DLPack has no byte order).
    dlpack::DLManagedTensor* to_dlpack() const;
    /// The versioned export (DLPack 1.1). `flags`: read-only when the array is, else none
    /// (writable, not a copy).
    dlpack::DLManagedTensorVersioned* to_dlpack_versioned() const;

private:
    std::shared_ptr<const void> owner_;
    void* data_ = nullptr;
    ferry::dtype type_ = ferry::dtype::uint8;
    ferry::byte_order order_ = native_byte_order;
    storage_order layout_ = storage_order::c;
    std::vector<std::int64_t> shape_{0};
    std::size_t size_ = 0;
    placement where_{};
    bool read_only_ = false;
};

/// An array with a name (a safetensors tensor; "" for a .npy or raw file).
struct FERRY_EXPORT named_array {
    std::string name;
    array value;
};

/// Number of elements of `shape`; throws usage_error on a negative dimension or overflow of
/// the byte count for elements of `itemsize` bytes.
FERRY_EXPORT std::size_t element_count(const std::vector<std::int64_t>& shape, std::size_t itemsize = 1);

/// "(2, 3)" style, as numpy prints shapes.
FERRY_EXPORT std::string shape_to_string(const std::vector<std::int64_t>& shape);

}  // namespace ferry
