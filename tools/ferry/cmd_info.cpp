// ferry info FILE: what a file holds (format, version, arrays with dtype, shape and byte range,
// metadata), from its header alone. An invalid file is reported plainly, exit status 1.
#include <cstdio>
#include <iostream>

#include "checkpoint_cmd.hpp"
#include "cli_util.hpp"
#include "commands.hpp"
#include "ferry/error.hpp"
#include "ferry/formats.hpp"

namespace ferry::cli {
namespace {

struct info_args {
    std::string path;
    std::string format;
    bool json = false;
};

std::string type_text(const typed_order& t) {
    std::string s(to_string(t.type));
    if (size_of(t.type) > 1 && t.order != native_byte_order) s += " (" + std::string(to_string(t.order)) + "-endian)";
    return s;
}

int run_info(const info_args& a) {
    if (is_checkpoint_source(a.path)) return run_checkpoint_info(a.path, a.json);
    std::optional<file_format> forced;
    if (!a.format.empty()) forced = parse_file_format(a.format);
    file_description d = describe_file(a.path, forced);
    if (a.json) {
        nlohmann::json j = nlohmann::json::parse(to_json(d, a.path));
        std::cout << j.dump(2) << "\n";
        return exit_ok;
    }
    std::printf("%s: %s%s%s, %s\n", a.path.c_str(), std::string(to_string(d.format)).c_str(),
                d.version.empty() ? "" : " ", d.version.c_str(), human_bytes(d.file_size).c_str());
    if (d.format == file_format::raw) {
        std::printf("  raw bytes: no header, so no dtype or shape (give them to ferry load)\n");
        return exit_ok;
    }
    std::printf("  header: %llu bytes; %zu array%s\n", static_cast<unsigned long long>(d.header_size),
                d.arrays.size(), d.arrays.size() == 1 ? "" : "s");
    for (const auto& e : d.arrays) {
        std::printf("  %-24s %-24s %-18s %s  [%llu, %llu)\n", e.name.empty() ? "(array)" : e.name.c_str(),
                    type_text(e.type).c_str(), shape_to_string(e.shape).c_str(),
                    e.layout == storage_order::fortran ? "F" : "C",
                    static_cast<unsigned long long>(e.begin), static_cast<unsigned long long>(e.end));
    }
    for (const auto& [k, v] : d.metadata) std::printf("  metadata %s = %s\n", k.c_str(), v.c_str());
    return exit_ok;
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto a = std::make_shared<info_args>();
    CLI::App* c = app.add_subcommand("info", "Describe a .npy, safetensors or raw file from its header");
    c->add_option("file", a->path, "The file, or a checkpoint: folder, index or glob")->required();
    c->add_option("--format", a->format, "npy, safetensors or raw (default: from the content)");
    c->add_flag("--json", a->json, "print one JSON object");
    c->callback([a] {
        int rc = run_info(*a);
        if (rc != exit_ok) throw CLI::RuntimeError(rc);
    });
}

}  // namespace ferry::cli
