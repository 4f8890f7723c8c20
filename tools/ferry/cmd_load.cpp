// ferry load FILE: read a file's arrays into GPU (or host) memory and report how it went.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "checkpoint_cmd.hpp"
#include "cli_util.hpp"
#include "commands.hpp"
#include "many_cmd.hpp"
#include "ferry/checksum.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/formats.hpp"
#include "ferry/memory.hpp"

namespace ferry::cli {
namespace {

struct load_args {
    std::vector<std::string> paths;  ///< one file or checkpoint, or a list (many_cmd.hpp)
    std::string path;
    bool keep_going = false;
    std::string device;
    std::vector<std::string> tensors;
    std::string as;
    std::string format;
    std::string dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t offset = 0;
    std::int64_t count = -1;
    bool checksum = false;
    bool json = false;
    std::vector<std::string> slices;
    std::string route;
    std::string verify = "auto";
};

int run_load(const load_args& a) {
    // Slices and routes are the checkpoint loader's: a single safetensors file (or object) with
    // them is a checkpoint of one shard.
    const bool checkpoint = is_checkpoint_source(a.path);
    if (!checkpoint && (!a.slices.empty() || !a.route.empty())) {
        // Read as a shard anyway, a .npy or raw file's first bytes would pass for a safetensors
        // header length and be reported as a nonsense header.
        file_format f = a.format.empty() ? detect_format(a.path) : parse_file_format(a.format);
        if (f != file_format::safetensors)
            throw usage_error(std::string(a.slices.empty() ? "--route" : "--slice") +
                              ": slices need a safetensors file or a checkpoint; " + redact_location(a.path) +
                              " is in " + std::string(to_string(f)) + " format");
    }
    if (checkpoint || !a.slices.empty() || !a.route.empty())
        return run_checkpoint_load({a.path, a.device, a.tensors, a.slices, a.as, a.route, a.json, a.checksum, a.verify});
    any_load_options o;
    o.load.where = a.device.empty() ? (cuda_device_count() > 0 ? placement::cuda(0) : placement::host())
                                    : parse_placement(a.device);
    if (!a.as.empty()) o.load.as = parse_dtype(a.as, "--as").type;
    o.load.verify = parse_verify_mode(a.verify);
    if (!a.format.empty()) o.format = parse_file_format(a.format);
    o.tensors = a.tensors;
    // --dtype describes a raw file (uint8 when not given); for a .npy or safetensors file it is
    // an error, as --tensor is for a raw one (--as converts).
    if (!a.dtype.empty()) o.raw_type = parse_dtype(a.dtype, "--dtype");
    else if ((o.format ? *o.format : detect_format(a.path)) == file_format::raw)
        o.raw_type = parse_dtype("uint8", "--dtype");
    o.shape = a.shape;
    o.offset = a.offset;
    o.count = a.count;

    // One-time set-up stays out of the timing: the CUDA context, and the engine's workers, its
    // pinned staging buffers and its stream lanes (a one-page read through the same settings,
    // plain and stream-ordered, makes them).
    if (o.load.where.on_gpu()) {
        device_buffer warm(4096, o.load.where.device);
        ferry::file f(a.path);
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(4096, f.size()));
        f.read(warm.data(), n, 0);
        if (f.config().gds != gds_mode::on) {  // which allows cuFile only, never the lanes
            ferry::stream s(o.load.where.device);
            f.read_async(warm.data(), n, 0, s.get()).get();
        }
    }
    io_stats before = process_stats();
    auto t0 = std::chrono::steady_clock::now();
    loaded_file lf = load_any(a.path, o);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    io_stats io = process_stats() - before;

    std::vector<std::string> sums;
    if (a.checksum)
        for (const auto& na : lf.arrays) sums.push_back(ferry::checksum(na.value));

    if (a.json) {
        nlohmann::json j;
        j["format"] = std::string(to_string(lf.format));
        j["device"] = to_string(o.load.where);
        j["bytes"] = lf.payload_bytes;
        j["seconds"] = seconds;
        j["gbps"] = gbps(lf.payload_bytes, seconds);
        j["io"] = io_json(io);
        nlohmann::json arrays = nlohmann::json::array();
        for (std::size_t i = 0; i < lf.arrays.size(); ++i) {
            const auto& na = lf.arrays[i];
            nlohmann::json e;
            e["name"] = na.name;
            e["dtype"] = std::string(to_string(na.value.type()));
            e["shape"] = na.value.shape();
            e["checksum"] = a.checksum ? nlohmann::json(sums[i]) : nlohmann::json(nullptr);
            arrays.push_back(e);
        }
        j["arrays"] = arrays;
        std::cout << j.dump(2) << "\n";
        return exit_ok;
    }
    std::printf("%s: %s, %zu array%s, %s into %s in %.3f s: %s\n", a.path.c_str(),
                std::string(to_string(lf.format)).c_str(), lf.arrays.size(), lf.arrays.size() == 1 ? "" : "s",
                human_bytes(lf.payload_bytes).c_str(), to_string(o.load.where).c_str(), seconds,
                rate_text(lf.payload_bytes, seconds).c_str());
    std::printf("  path: %s\n", io_text(io).c_str());
    for (const auto& [reason, n] : io.fallbacks) std::printf("  fallback: %s\n", reason.c_str());
    std::size_t shown = 0;
    for (std::size_t i = 0; i < lf.arrays.size(); ++i) {
        if (++shown > 20 && !a.checksum) {
            std::printf("  ... %zu more\n", lf.arrays.size() - 20);
            break;
        }
        const auto& na = lf.arrays[i];
        std::printf("  %-24s %-10s %-18s%s%s\n", na.name.empty() ? "(array)" : na.name.c_str(),
                    std::string(to_string(na.value.type())).c_str(), shape_to_string(na.value.shape()).c_str(),
                    a.checksum ? "  " : "", a.checksum ? sums[i].c_str() : "");
    }
    return exit_ok;
}

int run_paths(load_args& a) {
    if (auto many = file_list(a.paths)) {
        if (!a.slices.empty() || !a.route.empty() || !a.format.empty() || a.offset || a.count != -1)
            throw usage_error("--slice, --route, --format, --offset and --count load one file or checkpoint, "
                              "not a list of " + std::to_string(many->size()) + " files");
        return run_many_load({*many, a.device, a.tensors, a.as, a.dtype, a.shape, a.keep_going, a.checksum, a.json});
    }
    if (a.paths.size() != 1) throw usage_error("ferry load: expected one file, checkpoint or list of files");
    if (a.keep_going) throw usage_error("--keep-going: only for a list of files");
    a.path = a.paths.front();
    return run_load(a);
}

}  // namespace

void add_load_command(CLI::App& app) {
    auto a = std::make_shared<load_args>();
    CLI::App* c = app.add_subcommand("load", "Read a file's arrays into GPU memory (host memory without a GPU)");
    c->add_option("file", a->paths,
                  "The file (.npy, safetensors or raw), or a checkpoint: folder, index or glob; or many files: "
                  "several paths, a glob of .npy or raw files, or @LIST (a file naming one path a line)")
        ->required();
    c->add_option("--device", a->device, device_help);
    c->add_option("--tensor", a->tensors, "safetensors: load only these tensors; checkpoints: names or globs (repeatable)");
    c->add_option("--as", a->as, "convert floating-point arrays: float16, bfloat16, float64 to float32 or back (other conversions are refused)");
    c->add_option("--format", a->format, "npy, safetensors or raw (default: from the content)");
    c->add_option("--dtype", a->dtype, "raw files only: element type, e.g. float32 or >f4 (default uint8)");
    c->add_option("--shape", a->shape, "raw files: the array's shape")->delimiter(',');
    c->add_option("--offset", a->offset, "raw files: bytes to skip")->check(non_negative);
    c->add_option("--count", a->count, "raw files: items to read (-1: the rest)");
    c->add_option("--slice", a->slices,
                  "checkpoints: NAME:DIM:START:STOP, or PATTERN:DIM:K/N for part K of N (repeatable)");
    c->add_option("--route", a->route, "checkpoints: auto, segments or span for sliced tensors");
    c->add_flag("--checksum", a->checksum, "print xxh64 checksums of the arrays' logical contents");
    c->add_option("--verify", a->verify,
                  "safetensors and checkpoints: check the recorded CRC-32C checksums: auto (where recorded), "
                  "always (refuse files without), never")
        ->check(CLI::IsMember({"auto", "always", "never"}));
    c->add_flag("--json", a->json, "print one JSON object");
    c->add_flag("--keep-going", a->keep_going,
                "many files: load the others when one fails, list the failures and exit 1 (default: stop at the first)");
    c->callback([a] {
        int rc = run_paths(*a);
        if (rc != exit_ok) throw CLI::RuntimeError(rc);
    });
}

}  // namespace ferry::cli
