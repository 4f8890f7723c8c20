// ferry.File and ferry.Future: reads and writes between a file and any memory Python holds,
// synchronous or as futures. The GIL is released while I/O runs.
#include <Python.h>

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <future>
#include <memory>
#include <string>

#include "bind.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/integrity.hpp"
#include "ferry/registered_file.hpp"

namespace ferry::python {

namespace {

using namespace nb::literals;

open_mode parse_mode(std::string mode) {
    std::erase(mode, 'b');
    if (mode == "r") return open_mode::read;
    if (mode == "w") return open_mode::write;
    if (mode == "r+" || mode == "w+") return open_mode::read_write;
    if (mode == "a") return open_mode::append_write;
    throw usage_error("ferry.File mode must be 'r', 'w', 'r+' or 'a', got '" + mode + "'");
}

struct py_file {
    std::unique_ptr<file> f;
    std::string path;
    std::string mode;

    const file& get() const {
        if (!f) throw usage_error("I/O operation on a closed ferry.File (" + path + ")");
        return *f;
    }
};

// A request in flight. It holds the memory's producer until the request completes; dropping an
// unfinished future waits for it, so the memory can never be released under the I/O.
struct py_future {
    std::future<std::size_t> fut;
    std::shared_ptr<const void> hold;
    bool finished = false;
    std::size_t value = 0;
    std::exception_ptr error;

    py_future() = default;
    py_future(py_future&&) = default;
    ~py_future() {
        if (!finished && fut.valid()) {
            nb::gil_scoped_release nogil;
            fut.wait();
        }
    }

    void collect() {
        try {
            value = fut.get();
        } catch (...) {
            error = std::current_exception();
        }
        finished = true;
        hold.reset();
    }

    bool done() {
        if (finished) return true;
        if (fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
        collect();
        return true;
    }

    std::size_t result(std::optional<double> timeout) {
        if (!finished) {
            bool ready = true;
            {
                nb::gil_scoped_release nogil;
                if (timeout) {
                    auto d = std::chrono::duration<double>(*timeout < 0 ? 0 : *timeout);
                    ready = fut.wait_for(d) == std::future_status::ready;
                } else {
                    fut.wait();
                }
            }
            if (!ready) {
                PyErr_SetString(PyExc_TimeoutError, "the ferry request did not complete in time");
                throw nb::python_error();
            }
            collect();
        }
        if (error) std::rethrow_exception(error);
        return value;
    }
};

struct request_memory {
    foreign_memory mem;
    std::size_t n = 0;
};

// `what` names the argument in errors ("File.read: buf"): read-only memory is refused there.
request_memory memory_for(nb::handle buf, bool writable, std::optional<std::size_t> size, const std::string& what) {
    request_memory r;
    try {
        r.mem = import_memory(buf, writable);
    } catch (const usage_error& e) {
        throw usage_error(what + ": " + e.what());
    }
    r.n = size ? *size : r.mem.nbytes;
    if (r.n > r.mem.nbytes)
        throw usage_error("size " + std::to_string(r.n) + " is larger than the buffer (" +
                          std::to_string(r.mem.nbytes) + " bytes)");
    return r;
}

std::future<std::size_t> start(const file& f, const request_memory& r, bool read,
                               std::uint64_t offset) {
    if (r.mem.stream && r.n > 0) {
        return read ? f.read_async(r.mem.data, r.n, offset, *r.mem.stream)
                    : f.write_async(r.mem.data, r.n, offset, *r.mem.stream);
    }
    return read ? f.read_async(r.mem.data, r.n, offset) : f.write_async(r.mem.data, r.n, offset);
}

std::size_t transfer(const py_file& self, nb::handle buf, std::uint64_t offset,
                     std::optional<std::size_t> size, bool read) {
    const file& f = self.get();
    request_memory r = memory_for(buf, read, size, read ? "File.read: buf" : "File.write: buf");
    return interruptible([&] {
        // The call returns only when the bytes have moved, so whatever the caller queues on the
        // producer's stream afterwards is ordered after it already: waiting for the work queued
        // before is all that stream order asks. The transfer then takes the path the engine
        // plans, GPUDirect Storage included, which the stream lanes never use.
        if (r.mem.stream && r.n > 0) synchronize(*r.mem.stream);
        return read ? f.read(r.mem.data, r.n, offset) : f.write(r.mem.data, r.n, offset);
    });
}

py_future transfer_async(const py_file& self, nb::handle buf, std::uint64_t offset,
                         std::optional<std::size_t> size, bool read) {
    const file& f = self.get();
    request_memory r = memory_for(buf, read, size, read ? "File.pread: buf" : "File.pwrite: buf");
    py_future out;
    out.hold = r.mem.owner;
    {
        nb::gil_scoped_release nogil;
        out.fut = start(f, r, read, offset);
    }
    return out;
}

nb::dict counters_dict(const path_counters& c) {
    nb::dict d;
    d["bytes"] = c.bytes;
    d["requests"] = c.requests;
    d["seconds"] = static_cast<double>(c.nanoseconds) * 1e-9;
    return d;
}

}  // namespace

nb::dict stats_dict(const io_stats& s) {
    nb::dict read, write;
    for (int i = 0; i < io_path_count; ++i) {
        auto p = static_cast<io_path>(i);
        std::string name(to_string(p));
        if (s.read[i].requests) read[name.c_str()] = counters_dict(s.read[i]);
        if (s.write[i].requests) write[name.c_str()] = counters_dict(s.write[i]);
    }
    nb::dict fallbacks;
    for (const auto& [reason, times] : s.fallbacks) fallbacks[reason.c_str()] = times;
    nb::dict d;
    d["bytes_read"] = s.bytes_read();
    d["bytes_written"] = s.bytes_written();
    d["read"] = read;
    d["write"] = write;
    d["fallbacks"] = fallbacks;
    // The same bytes by source and mover ("posix"/"lanes", "http"/"staged", ...).
    nb::list routes;
    for (const auto& r : s.routes) {
        nb::dict e;
        e["source"] = r.source;
        e["mover"] = r.mover;
        e["read"] = counters_dict(r.read);
        e["write"] = counters_dict(r.write);
        routes.append(e);
    }
    d["routes"] = routes;
    return d;
}

void bind_file(nb::module_& m) {
    nb::class_<py_future>(m, "Future",
                          "A read or write in flight. ``result()`` waits (without the GIL) and\n"
                          "returns the byte count or raises the request's error; ``await`` works\n"
                          "from asyncio.")
        .def("result", &py_future::result, "timeout"_a = nb::none(),
             "Waits for the request and returns the number of bytes moved. Raises\n"
             "TimeoutError when `timeout` seconds pass first, or the request's error.")
        .def("done", &py_future::done, "Whether the request has completed.")
        .def("__await__", [](nb::handle self) {
            return nb::module_::import_("ferry._aio").attr("await_future")(self);
        });

    nb::class_<py_file>(m, "File",
                        "An open file that reads into and writes from any memory: numpy arrays,\n"
                        "buffers, and GPU arrays (CuPy, PyTorch, JAX, through DLPack or the CUDA\n"
                        "array interface). Offsets are explicit; the file has no position.")
        .def(
            "__init__",
            [](py_file* self, const std::filesystem::path& path, const std::string& mode) {
                open_mode om = parse_mode(mode);
                std::string p = path.string();
                // Opening a URL is a round trip, retried against a server that is down: Ctrl-C
                // stops it, through a thread of its own. A local open is one system call that no
                // stop request cuts short, so it runs here, without the GIL: a thread an open
                // cost more than the open (a store of 16,384 Zarr chunks opens each of them).
                std::unique_ptr<file> f;
                if (p.find("://") != std::string::npos) {
                    f = interruptible([&] { return std::make_unique<file>(p, om); });
                } else {
                    nb::gil_scoped_release nogil;
                    f = std::make_unique<file>(p, om);
                }
                new (self) py_file{std::move(f), p, mode};
            },
            "path"_a, "mode"_a = "r")
        .def_prop_ro("path", [](const py_file& f) { return f.path; })
        .def_prop_ro("name", [](const py_file& f) { return f.path; })
        .def_prop_ro("mode", [](const py_file& f) { return f.mode; })
        .def_prop_ro("closed", [](const py_file& f) { return !f.f; })
        .def("size", [](const py_file& f) { return f.get().size(); }, "The file's size in bytes.")
        .def(
            "read",
            [](const py_file& f, nb::handle buf, std::uint64_t offset, std::optional<std::size_t> size) {
                return transfer(f, buf, offset, size, true);
            },
            "buf"_a, "offset"_a = 0, nb::kw_only(), "size"_a = nb::none(),
            "Reads `size` bytes (default: the buffer's size) at file `offset` into `buf`;\n"
            "returns the count. Raises ferry.EndOfFileError when the file ends first.")
        .def(
            "write",
            [](const py_file& f, nb::handle buf, std::uint64_t offset, std::optional<std::size_t> size) {
                return transfer(f, buf, offset, size, false);
            },
            "buf"_a, "offset"_a = 0, nb::kw_only(), "size"_a = nb::none(),
            "Writes `size` bytes (default: all) of `buf` at file `offset`; returns the count.")
        .def(
            "pread",
            [](const py_file& f, nb::handle buf, std::uint64_t offset, std::optional<std::size_t> size) {
                return transfer_async(f, buf, offset, size, true);
            },
            "buf"_a, "offset"_a = 0, nb::kw_only(), "size"_a = nb::none(),
            "Starts a read like read() and returns a ferry.Future at once.")
        .def(
            "pwrite",
            [](const py_file& f, nb::handle buf, std::uint64_t offset, std::optional<std::size_t> size) {
                return transfer_async(f, buf, offset, size, false);
            },
            "buf"_a, "offset"_a = 0, nb::kw_only(), "size"_a = nb::none(),
            "Starts a write like write() and returns a ferry.Future at once.")
        .def(
            "sync",
            [](const py_file& f) {
                const file& x = f.get();
                nb::gil_scoped_release nogil;
                x.sync();
            },
            "Flushes data and metadata to storage (fsync).")
        .def(
            "truncate",
            [](const py_file& f, std::uint64_t size) { f.get().truncate(size); }, "size"_a,
            "Sets the file's size.")
        .def(
            "plan",
            [](const py_file& f) {
                path_plan p = f.get().plan();
                nb::dict d;
                d["path"] = std::string(to_string(p.path));
                nb::list reasons;
                for (const auto& r : p.reasons) reasons.append(r);
                d["reasons"] = reasons;
                nb::list codes;
                for (const auto& c : p.codes) {
                    nb::dict one;
                    one["code"] = std::string(to_string(c.code));
                    one["cause"] = c.cause == reason_code::none ? nb::object(nb::none())
                                                                 : nb::object(nb::str(std::string(to_string(c.cause)).c_str()));
                    codes.append(one);
                }
                d["codes"] = codes;
                return d;
            },
            "How a large read of this file into GPU memory is served, and why.")
        .def("stats", [](const py_file& f) { return stats_dict(f.get().stats()); },
             "What this file moved, by I/O path.")
        .def(
            "close",
            [](py_file& f) {
                if (!f.f) return;
                std::unique_ptr<file> x = std::move(f.f);
                nb::gil_scoped_release nogil;
                x->close();
            },
            "Closes the file (waits for requests in flight) and reports errors.")
        .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
        .def(
            "__exit__",
            [](py_file& f, nb::handle, nb::handle, nb::handle) {
                if (!f.f) return;
                std::unique_ptr<file> x = std::move(f.f);
                nb::gil_scoped_release nogil;
                x->close();
            },
            "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none())
        .def("__repr__", [](const py_file& f) {
            return "ferry.File('" + f.path + "', '" + f.mode + "'" + (f.f ? "" : ", closed") + ")";
        });

    m.def(
        "read_batch",
        [](nb::list pieces) {
            std::vector<read_piece> batch;
            // The memories (their owners) stay held until the batch is done.
            auto memories = std::make_shared<std::vector<foreign_memory>>();
            batch.reserve(nb::len(pieces));
            std::size_t index = 0;
            for (nb::handle item : pieces) {
                const std::string which = "read_batch: piece " + std::to_string(index++);
                if (!(nb::isinstance<nb::tuple>(item) || nb::isinstance<nb::list>(item)) || nb::len(item) != 3 || !nb::isinstance<py_file>(item[0]) ||
                    !PyLong_Check(nb::handle(item[1]).ptr()))
                    throw nb::type_error((which + " is not (ferry.File, offset, buffer)").c_str());
                const py_file& f = nb::cast<const py_file&>(item[0]);
                long long offset = PyLong_AsLongLong(nb::handle(item[1]).ptr());
                if (offset == -1 && PyErr_Occurred()) throw nb::python_error();
                if (offset < 0) throw usage_error(which + ": offset " + std::to_string(offset) + " is negative");
                request_memory r = memory_for(item[2], true, std::nullopt, which + " buffer");
                batch.push_back({&f.get(), static_cast<std::uint64_t>(offset), r.n, r.mem.data});
                memories->push_back(std::move(r.mem));
            }
            py_future out;
            out.hold = memories;
            nb::gil_scoped_release nogil;
            wait_for_producers(*memories);  // work a producer still has queued on its memory ends first
            out.fut = read_batch(batch);
            return out;
        },
        "pieces"_a,
        "Reads every piece (ferry.File, offset, buffer: the buffer's size in bytes at `offset`)\n"
        "as one batch and returns a ferry.Future of the bytes read. Into GPU memory, pieces of\n"
        "many files share the stream lanes' buffers, so many small pieces cost about what one\n"
        "large read does. All buffers host memory, or GPU memory of one device. Work queued on\n"
        "a buffer's producer stream is waited for first.");

    m.def(
        "crc32c_chunks",
        [](nb::list buffers, std::uint64_t chunk) {
            std::vector<foreign_memory> memories;
            std::vector<crc_input> inputs;
            memories.reserve(nb::len(buffers));
            std::size_t index = 0;
            for (nb::handle b : buffers) {
                request_memory r = memory_for(b, false, std::nullopt, "crc32c_chunks: buffer " + std::to_string(index++));
                inputs.push_back({r.mem.data, r.n, r.mem.where});
                memories.push_back(std::move(r.mem));
            }
            std::vector<std::vector<std::uint32_t>> out;
            {
                nb::gil_scoped_release nogil;
                wait_for_producers(memories);
                out = crc32c_chunks(inputs, chunk);
            }
            return out;
        },
        "buffers"_a, "chunk"_a,
        "The CRC-32C of each `chunk`-byte piece of each buffer (host or GPU memory), as the\n"
        "checksum records hold them: host buffers on the host's cores, GPU buffers in one\n"
        "launch per device. Work queued on a buffer's producer stream is waited for first.");
}

}  // namespace ferry::python

namespace ferry::python {

void bind_registration(nb::module_& m) {
    nb::class_<registered_file>(m, "RegisteredFile",
                                "A local file kept registered with CUDA: while it lives, reads of\n"
                                "the file into GPU memory, by any ferry call of the process, are a\n"
                                "DMA straight from its pinned page-cache pages. See\n"
                                "ferry.register_file.")
        .def(
            "__init__",
            [](registered_file* self, const std::filesystem::path& path) {
                std::string p = path.string();
                nb::gil_scoped_release nogil;
                new (self) registered_file(p);
            },
            "path"_a)
        .def_prop_ro("path", [](const registered_file& r) { return r.path(); })
        .def_prop_ro("size", [](const registered_file& r) { return r.size(); }, "The bytes registered.")
        .def_prop_ro("seconds", [](const registered_file& r) { return r.seconds(); },
                     "How long registering the file took.")
        .def_prop_ro("closed", [](const registered_file& r) { return r.size() == 0; })
        .def("close", &registered_file::close,
             "Gives the registration up (files open on it keep it until they close).")
        .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
        .def("__exit__", [](registered_file& r, nb::args) { r.close(); })
        .def("__repr__", [](const registered_file& r) {
            return r.size() ? "<ferry.RegisteredFile " + r.path() + ", " + std::to_string(r.size()) + " bytes>"
                            : std::string("<ferry.RegisteredFile closed>");
        });
    m.def("set_registration_limit", &set_registration_limit, "bytes"_a);
    m.def("registration_limit", &registration_limit);
    m.def("registered_bytes", &registered_bytes);
}

}  // namespace ferry::python
