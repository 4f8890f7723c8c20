// ferry::load_many: a list of files, several in flight at once. Each file is one load_any (its
// own header read and one plan for its payload); the gain over a loop is that the headers and
// payloads of up to 16 files are read at the same time.
#include "ferry/many.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "ferry/file.hpp"
#include "stop.hpp"

namespace ferry {

namespace {

constexpr unsigned default_files_in_flight = 16;

std::string message_of(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "an unknown error";
    }
}

// The raw options (type, shape) describe the list's raw files; the others' headers say theirs.
any_load_options for_file(const std::string& path, const any_load_options& each) {
    if ((!each.raw_type && each.shape.empty()) || each.format) return each;
    if (detect_format(path) == file_format::raw) return each;
    any_load_options mine = each;
    mine.raw_type.reset();
    mine.shape.clear();
    return mine;
}

}  // namespace

file_in_list_error::file_in_list_error(const file_failure& f)
    : error(f.message), index_(f.index), path_(f.path), cause_(f.error) {}

many_files load_many(const std::vector<std::string>& paths, const load_many_options& options) {
    const std::size_t n = paths.size();
    many_files out;
    out.files.resize(n);
    std::vector<std::exception_ptr> errors(n);
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    const bool stop_at_failure = options.failures == on_file_failure::raise;
    const detail::stop_flag stop = detail::current_stop();

    auto work = [&] {
        detail::stop_binding bound(stop);
        for (std::size_t i; (i = next.fetch_add(1)) < n;) {
            if (stop_at_failure && failed.load(std::memory_order_relaxed)) return;
            try {
                detail::throw_if_stopped("load_many");
                out.files[i] = load_any(paths[i], for_file(paths[i], options.each));
            } catch (...) {
                errors[i] = std::current_exception();
                failed.store(true, std::memory_order_relaxed);
            }
        }
    };
    unsigned want = options.files_in_flight ? options.files_in_flight : default_files_in_flight;
    const auto threads = static_cast<unsigned>(std::min<std::size_t>(want, n));
    {
        std::vector<std::jthread> pool;
        for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
        if (threads) work();
    }
    for (std::size_t i = 0; i < n; ++i) {
        if (!errors[i]) {
            if (out.files[i]) out.payload_bytes += out.files[i]->payload_bytes;
            continue;
        }
        const std::string shown = redact_location(paths[i]);
        std::string why = message_of(errors[i]);
        // The file's own error names it most of the time; its place in the list is what it lacks.
        std::string where = "paths[" + std::to_string(i) + "]" + (why.find(shown) == std::string::npos ? " (" + shown + ")" : "");
        out.failures.push_back({i, shown, where + ": " + why, errors[i]});
    }
    if (stop_at_failure && !out.failures.empty()) {
        // An interrupt is the call's own answer, not one file's failure.
        try {
            std::rethrow_exception(out.failures.front().error);
        } catch (const interrupted_error&) {
            throw;
        } catch (...) {
        }
        throw file_in_list_error(out.failures.front());
    }
    return out;
}

}  // namespace ferry
