// `ferry verify` and ferry.verify(): every chunk of every tensor of a file, folder or checkpoint
// checked against the CRC-32C record written with it, or a whole file against its sidecar
// manifest (`FILE.ferry-checksums.json`, which --record writes for files of other tools). The
// chunks are read and hashed on a pool of threads (one per core), each with its own buffer, so
// a hot checkpoint is checked at the speed of reading and hashing on every core at once.
// A torch.distributed.checkpoint folder is checked against the manifest ferry's DCP writer
// records beside its .metadata (`.ferry-checksums.json`, python/ferry/dcp/_checksums.py).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "backend/location.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/file.hpp"
#include "ferry/formats.hpp"
#include "ferry/integrity.hpp"
#include "formats/atomic_write.hpp"
#include "formats/checksum_record.hpp"
#include "integrity/crc32c.hpp"

namespace ferry {
namespace {

constexpr std::uint64_t sidecar_chunk = formats::checksum_chunk;

std::string sidecar_of(const std::string& path) { return path + ".ferry-checksums.json"; }

// One chunk to read and hash; `expected` unset when recording.
struct job {
    std::size_t file = 0;
    std::uint64_t offset = 0, bytes = 0;
    std::optional<std::uint32_t> expected;
    std::string tensor;
};

struct sidecar {
    std::uint64_t size = 0;
    std::vector<std::uint32_t> crcs;
};

std::optional<sidecar> read_sidecar(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(sidecar_of(path), ec)) return std::nullopt;
    file f(sidecar_of(path), open_mode::read);
    std::string text(static_cast<std::size_t>(std::min<std::uint64_t>(f.size(), 64ull << 20)), '\0');
    f.read(text.data(), text.size(), 0);
    auto bad = [&](const std::string& why) -> format_error { return format_error(sidecar_of(path), "sidecar", why); };
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw bad("not a JSON object");
    if (j.value("v", 0) != 1 || j.value("alg", "") != "crc32c" || j.value("chunk", 0ull) != sidecar_chunk)
        throw bad("not a version 1 crc32c manifest of 64 MiB chunks");
    if (!j.contains("size") || !j["size"].is_number_unsigned() || !j.contains("crcs") || !j["crcs"].is_string())
        throw bad("no \"size\" or \"crcs\"");
    sidecar s;
    s.size = j["size"].get<std::uint64_t>();
    // The digits are parsed by the record's parser: one hex reader, one set of messages.
    formats::checksum_record r = formats::parse_checksum_record(
        nlohmann::json{{"v", 1}, {"alg", "crc32c"}, {"chunk", sidecar_chunk}, {"header", "00000000"},
                       {"tensors", {{"file", j["crcs"]}}}}.dump(),
        sidecar_of(path));
    s.crcs = r.tensors.begin()->second;
    if (s.crcs.size() != (s.size + sidecar_chunk - 1) / sidecar_chunk) throw bad("crcs do not cover size bytes");
    return s;
}

void write_sidecar(const std::string& path, std::uint64_t size, const std::vector<std::uint32_t>& crcs) {
    std::string hex;
    char h[8];
    for (std::uint32_t c : crcs) {
        integrity::crc32c_hex(c, h);
        hex.append(h, 8);
    }
    nlohmann::ordered_json j;
    j["v"] = 1;
    j["alg"] = "crc32c";
    j["chunk"] = sidecar_chunk;
    j["size"] = size;
    j["crcs"] = hex;
    std::string text = j.dump() + "\n";
    formats::save_atomically(sidecar_of(path), [&](formats::atomic_write& w) {
        w.write({{text.data(), text.size(), 0}});
    });
}

// A torch.distributed.checkpoint folder: a folder with a .metadata.
bool is_dcp_folder(const std::string& path) {
    std::error_code ec;
    return std::filesystem::is_directory(path, ec) &&
           std::filesystem::is_regular_file(std::filesystem::path(path) / ".metadata", ec);
}

// One tensor's storage in a DCP data file, as the manifest records it.
struct dcp_entry {
    std::uint64_t begin = 0, length = 0;
    std::string tensor;
    std::vector<std::uint32_t> crcs;
};

struct dcp_manifest {
    std::uint64_t chunk = 0;
    std::map<std::string, std::vector<dcp_entry>> files;  ///< by data file name
};

std::string read_small_file(const std::string& path) {
    file f(path, open_mode::read);
    std::string text(static_cast<std::size_t>(std::min<std::uint64_t>(f.size(), 1ull << 30)), '\0');
    if (!text.empty()) f.read(text.data(), text.size(), 0);
    return text;
}

// The folder's manifest; nullopt with `why` when there is none or it describes another save
// (its "metadata" is not the CRC-32C of the .metadata there now). Throws format_error naming
// the manifest, the field and the reason when it does not parse.
std::optional<dcp_manifest> read_dcp_manifest(const std::string& folder, std::string& why) {
    const std::string path = (std::filesystem::path(folder) / ".ferry-checksums.json").string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
        why = "no checksum manifest (.ferry-checksums.json)";
        return std::nullopt;
    }
    auto bad = [&](const std::string& reason) { return format_error(path, "manifest", reason); };
    nlohmann::json j = nlohmann::json::parse(read_small_file(path), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("metadata") || !j["metadata"].is_string() ||
        !j.contains("files") || !j["files"].is_object() || !j.contains("chunk"))
        throw bad("not a JSON object with \"chunk\", \"metadata\" and \"files\"");
    // The digits and the version, algorithm and chunk are checked by the record's parser: one
    // hex reader, one set of messages.
    nlohmann::json rec{{"v", j.value("v", 0)}, {"alg", j.value("alg", "")}, {"chunk", j["chunk"]},
                       {"header", j["metadata"]}, {"tensors", nlohmann::json::object()}};
    std::vector<std::pair<std::string, std::size_t>> where;  // (file, entry) of each "tensor" below
    for (const auto& [name, entries] : j["files"].items()) {
        if (!entries.is_array()) throw bad("files['" + name + "'] is not a list");
        for (const auto& e : entries) {
            if (!e.is_array() || e.size() != 4 || !e[0].is_number_unsigned() || !e[1].is_number_unsigned() ||
                !e[2].is_string() || !e[3].is_string())
                throw bad("an entry of files['" + name + "'] is not [begin, length, tensor, crcs]");
            rec["tensors"][std::to_string(where.size())] = e[3];
            where.emplace_back(name, where.size());
        }
    }
    formats::checksum_record r = formats::parse_checksum_record(rec.dump(), path);
    const std::string meta = read_small_file((std::filesystem::path(folder) / ".metadata").string());
    if (integrity::crc32c(meta.data(), meta.size()) != r.header) {
        why = "the checksum manifest describes another save (.metadata changed after it was written)";
        return std::nullopt;
    }
    dcp_manifest m;
    m.chunk = r.chunk;
    std::size_t i = 0;
    for (const auto& [name, entries] : j["files"].items())
        for (const auto& e : entries) {
            dcp_entry d{e[0].get<std::uint64_t>(), e[1].get<std::uint64_t>(), e[2].get<std::string>(),
                        r.tensors.at(std::to_string(i++))};
            if (d.crcs.size() != (d.length + m.chunk - 1) / m.chunk)
                throw bad("tensor '" + d.tensor + "': " + std::to_string(d.crcs.size()) + " checksums for " +
                          std::to_string(d.length) + " bytes");
            m.files[name].push_back(std::move(d));
        }
    return m;
}

// The data files of a DCP folder, sorted.
std::vector<std::string> dcp_files(const std::string& folder) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(folder))
        if (e.is_regular_file() && e.path().extension() == ".distcp") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

// The files `path` names: a checkpoint's shards (a folder, an index, a prefix, a glob), else
// the file itself.
std::vector<std::string> files_of(const std::string& path) {
    std::error_code ec;
    const bool dir = std::filesystem::is_directory(path, ec);
    const bool index = path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0;
    const bool prefix = !path.empty() && path.back() == '/';  // an S3 or HTTP prefix
    const bool glob = path.find_first_of("*?[") != std::string::npos && !detail::location(path).is_url();
    if (dir && is_dcp_folder(path)) return dcp_files(path);
    if (!dir && !index && !prefix && !glob) return {path};
    std::vector<std::string> out;
    for (const auto& s : open_checkpoint(path).shards) out.push_back(s.path);
    return out;
}

// Reads and hashes every job on `threads` threads; returns each job's CRC.
std::vector<std::uint32_t> run_jobs(const std::vector<std::unique_ptr<file>>& files, const std::vector<job>& jobs,
                                    unsigned threads, std::exception_ptr& error) {
    std::vector<std::uint32_t> got(jobs.size(), 0);
    std::atomic<std::size_t> next{0};
    std::mutex m;
    auto work = [&] {
        std::vector<unsigned char> buf;
        try {
            for (std::size_t i; (i = next.fetch_add(1)) < jobs.size();) {
                const job& j = jobs[i];
                buf.resize(static_cast<std::size_t>(std::max<std::uint64_t>(buf.size(), j.bytes)));
                files[j.file]->read(buf.data(), j.bytes, j.offset);
                got[i] = integrity::crc32c(buf.data(), j.bytes);
            }
        } catch (...) {
            std::lock_guard lock(m);
            if (!error) error = std::current_exception();
            next = jobs.size();
        }
    };
    unsigned n = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
    n = static_cast<unsigned>(std::min<std::size_t>(n, std::max<std::size_t>(1, jobs.size())));
    std::vector<std::thread> pool;
    for (unsigned k = 1; k < n; ++k) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    return got;
}

// Adds the jobs of one file: its embedded record, else its sidecar, else (record) a new one.
// Returns false when the file has nothing to check.
bool plan_file(std::size_t fi, const std::string& path, const file& f, bool record, verify_report& r,
               std::vector<job>& jobs, std::vector<std::size_t>& to_record) {
    const std::string shown = redact_location(path);
    if (detect_format(path) == file_format::safetensors) {
        safetensors_info info = read_safetensors_info(path);
        if (auto rec = formats::find_record(info, shown)) {
            if (std::uint32_t h = formats::header_digest(info.tensors, info.metadata); h != rec->header)
                r.mismatches.push_back({shown, "", 0, info.data_offset, formats::crc_text(rec->header),
                                        formats::crc_text(h), "the header does not match its checksum"});
            for (const auto& t : info.tensors) {
                auto it = rec->tensors.find(t.name);
                const std::uint64_t n = t.end - t.begin;
                if (it == rec->tensors.end() || it->second.size() != (n + rec->chunk - 1) / rec->chunk) {
                    r.mismatches.push_back({shown, t.name, info.data_offset + t.begin, info.data_offset + t.end, "", "",
                                            "no checksum recorded for this tensor (the header changed?)"});
                    continue;
                }
                for (std::size_t k = 0; k < it->second.size(); ++k) {
                    const std::uint64_t at = k * rec->chunk;
                    jobs.push_back({fi, info.data_offset + t.begin + at, std::min(rec->chunk, n - at), it->second[k], t.name});
                }
                ++r.tensors;
            }
            return true;
        }
    }
    const bool local = !detail::location(path).is_url();
    std::optional<sidecar> side = local ? read_sidecar(path) : std::nullopt;
    const std::uint64_t size = f.size();
    if (side) {
        if (side->size != size) {
            r.mismatches.push_back({shown, "", std::min(side->size, size), std::max(side->size, size), "", "",
                                    "the file has " + std::to_string(size) + " bytes, its sidecar recorded " +
                                        std::to_string(side->size)});
            return true;
        }
        for (std::size_t k = 0; k < side->crcs.size(); ++k)
            jobs.push_back({fi, k * sidecar_chunk, std::min(sidecar_chunk, size - k * sidecar_chunk), side->crcs[k], ""});
        return true;
    }
    if (!record || !local) return false;
    to_record.push_back(fi);
    for (std::uint64_t at = 0; at < size; at += sidecar_chunk)
        jobs.push_back({fi, at, std::min(sidecar_chunk, size - at), std::nullopt, ""});
    return true;
}

// Adds the jobs of a DCP data file from the folder's manifest; false when it lists none of it.
bool plan_dcp_file(std::size_t fi, const std::string& path, const file& f, const dcp_manifest& m, verify_report& r,
                   std::vector<job>& jobs) {
    auto it = m.files.find(std::filesystem::path(path).filename().string());
    if (it == m.files.end()) return false;
    const std::uint64_t size = f.size();
    for (const dcp_entry& e : it->second) {
        if (e.begin + e.length > size) {
            r.mismatches.push_back({path, e.tensor, e.begin, e.begin + e.length, "", "",
                                    "the file has " + std::to_string(size) + " bytes: it is truncated"});
            continue;
        }
        for (std::size_t k = 0; k < e.crcs.size(); ++k) {
            const std::uint64_t at = k * m.chunk;
            jobs.push_back({fi, e.begin + at, std::min(m.chunk, e.length - at), e.crcs[k], e.tensor});
        }
        ++r.tensors;
    }
    return true;
}

}  // namespace

verify_report verify_path(const std::string& path, bool record, unsigned threads) {
    const auto t0 = std::chrono::steady_clock::now();
    verify_report r;
    std::vector<std::string> paths = files_of(path);
    std::vector<std::unique_ptr<file>> files;
    std::vector<job> jobs;
    std::vector<std::size_t> to_record;
    std::string why;
    std::optional<dcp_manifest> dcp = is_dcp_folder(path) ? read_dcp_manifest(path, why) : std::nullopt;
    for (std::size_t i = 0; i < paths.size(); ++i) {
        files.push_back(std::make_unique<file>(paths[i], open_mode::read));
        if (dcp && plan_dcp_file(i, paths[i], *files.back(), *dcp, r, jobs))
            r.files.push_back(redact_location(paths[i]));
        else if (plan_file(i, paths[i], *files.back(), record, r, jobs, to_record))
            r.files.push_back(redact_location(paths[i]));
        else
            r.unverifiable.push_back(redact_location(paths[i]));
    }
    std::exception_ptr error;
    std::vector<std::uint32_t> got = run_jobs(files, jobs, threads, error);
    if (error) std::rethrow_exception(error);
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        r.bytes += jobs[i].bytes;
        if (jobs[i].expected && *jobs[i].expected != got[i])
            r.mismatches.push_back({redact_location(paths[jobs[i].file]), jobs[i].tensor, jobs[i].offset,
                                    jobs[i].offset + jobs[i].bytes, formats::crc_text(*jobs[i].expected),
                                    formats::crc_text(got[i]), "checksum mismatch"});
    }
    for (std::size_t fi : to_record) {
        std::vector<std::uint32_t> crcs;
        for (std::size_t i = 0; i < jobs.size(); ++i)
            if (jobs[i].file == fi) crcs.push_back(got[i]);
        write_sidecar(paths[fi], files[fi]->size(), crcs);
        r.recorded.push_back(sidecar_of(paths[fi]));
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

std::string to_json(const verify_report& r) {
    nlohmann::ordered_json j;
    j["status"] = r.status();
    j["files"] = r.files;
    j["unverifiable"] = r.unverifiable;
    j["recorded"] = r.recorded;
    nlohmann::ordered_json m = nlohmann::ordered_json::array();
    for (const auto& x : r.mismatches)
        m.push_back({{"file", x.file}, {"tensor", x.tensor}, {"begin", x.begin}, {"end", x.end},
                     {"expected", x.expected}, {"actual", x.actual}, {"reason", x.reason}});
    j["mismatches"] = std::move(m);
    j["tensors"] = r.tensors;
    j["bytes"] = r.bytes;
    j["seconds"] = r.seconds;
    j["gb_per_s"] = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ferry
