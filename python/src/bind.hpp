// Shared pieces of the ferry._ferry extension: how Python objects become memory ferry can read
// into or write from, and how ferry arrays leave for Python.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/dtype.hpp"
#include "ferry/memory.hpp"
#include "ferry/stats.hpp"

namespace ferry::python {

namespace nb = nanobind;

/// The memory behind a Python object (buffer protocol, __cuda_array_interface__, DLPack or a
/// ferry.Array), and what the object says about its elements.
struct foreign_memory {
    void* data = nullptr;
    std::size_t nbytes = 0;
    bool readonly = false;
    placement where{};
    std::optional<typed_order> type;  ///< nullopt: the producer's element type has no ferry dtype
    std::vector<std::int64_t> shape;
    storage_order layout = storage_order::c;
    /// The CUDA stream the producer wants the access ordered on (CUDA array interface v3 and
    /// DLPack): I/O on this memory runs stream-ordered on it. Unset: no ordering needed.
    std::optional<stream_t> stream;
    /// Keeps the producer's memory alive; releasing it takes the GIL itself, so the last
    /// reference may be dropped anywhere.
    std::shared_ptr<const void> owner;
};

/// Reads the memory description of `obj`. `writable`: the memory will be written (a read from
/// a file lands in it), so read-only memory is refused. Throws usage_error for memory that is
/// not contiguous, TypeError (nb::type_error) for objects that expose no memory.
/// `producer_synced`: the caller waited for the producer's GPU work (see from_dlpack).
foreign_memory import_memory(nb::handle obj, bool writable, bool producer_synced = false);

/// A ferry::array view of `m` (which must have a known type and be contiguous); `type`
/// overrides the element type. Read-only memory gives a read-only array.
array as_array(const foreign_memory& m, std::optional<typed_order> type = std::nullopt);

/// Waits until `m`'s producer's pending work on its memory is done (for writers without a
/// stream-ordered call, such as save). GIL released by the caller's choice.
void wait_for_producer(const foreign_memory& m);
/// The same for many: one wait per device covers them all (each producer made its pending work
/// visible on the legacy default stream, which one synchronous copy there waits for).
void wait_for_producers(const std::vector<foreign_memory>& ms);

/// Shared ownership of a Python object that is safe to drop without the GIL.
std::shared_ptr<const void> hold_python(nb::object o);

/// "cpu", "pinned" or "cuda:N": the device string the Python layer uses.
std::string device_string(const placement& p);

/// A DLPack capsule ("dltensor", the form every consumer takes) sharing `a`'s memory, which
/// must be in native byte order (array.cpp).
nb::object dlpack_capsule(const array& a);

/// A shape as a Python tuple of ints (array.cpp).
nb::object shape_tuple(const std::vector<std::int64_t>& shape);

/// Counters as a dict: bytes_read, bytes_written, read/write by path, fallbacks.
nb::dict stats_dict(const io_stats& s);

/// Runs `work` (which must not touch Python objects) so that Ctrl-C stops it: on a thread of its
/// own under a ferry::stop_scope, the caller waiting without the GIL and letting Python's signal
/// handlers run every 20 ms. A handler's exception (KeyboardInterrupt) stops the work, waits for
/// its end and is raised; the work's own exception is rethrown. Called with the GIL held.
void run_interruptible(const std::function<void()>& work);

/// run_interruptible where the caller also runs `step` (with the GIL) each time the work calls
/// the `wake` it is handed (from any thread), and once more after the work ended: the work's
/// results become Python objects while it goes on. A step that throws stops the work, waits
/// for its end and is rethrown.
void run_interruptible_stepping(const std::function<void(const std::function<void()>& wake)>& work,
                                const std::function<void()>& step);

/// run_interruptible for work with a result.
template <class F>
auto interruptible(F&& f) -> decltype(f()) {
    std::optional<decltype(f())> out;
    run_interruptible([&] { out.emplace(f()); });
    return std::move(*out);
}

void bind_errors(nb::module_& m);
void bind_array(nb::module_& m);
void bind_file(nb::module_& m);
void bind_formats(nb::module_& m);
void bind_checkpoint(nb::module_& m);
void bind_runtime(nb::module_& m);

}  // namespace ferry::python
