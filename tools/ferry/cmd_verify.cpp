// ferry verify PATH: checks every tensor of a file, folder or checkpoint against the CRC-32C
// checksums written with it (or a sidecar manifest); --record writes sidecars for files that have
// neither (checkpoints of other tools), to be checked later. Exit 0: all match; 1: mismatches,
// listed; 2: nothing verifiable.
#include <cstdio>
#include <iostream>

#include "cli_util.hpp"
#include "commands.hpp"
#include "ferry/integrity.hpp"

namespace ferry::cli {
namespace {

struct verify_args {
    std::string path;
    bool record = false;
    bool json = false;
    unsigned threads = 0;
};

int run_verify(const verify_args& a) {
    verify_report r = verify_path(a.path, a.record, a.threads);
    if (a.json) {
        std::cout << to_json(r) << "\n";
        return r.status();
    }
    for (const auto& m : r.mismatches) {
        std::printf("MISMATCH %s", m.file.c_str());
        if (!m.tensor.empty()) std::printf(" tensor '%s'", m.tensor.c_str());
        std::printf(" bytes [%llu, %llu): %s", static_cast<unsigned long long>(m.begin),
                    static_cast<unsigned long long>(m.end), m.reason.c_str());
        if (!m.expected.empty()) std::printf(" (recorded %s, read %s)", m.expected.c_str(), m.actual.c_str());
        std::printf("\n");
    }
    for (const auto& f : r.unverifiable)
        std::printf("unverifiable %s: no checksums and no sidecar (ferry verify --record writes one)\n", f.c_str());
    for (const auto& f : r.recorded) std::printf("recorded %s\n", f.c_str());
    const double gbs = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0;
    std::printf("%s: %zu file%s, %zu tensor%s, %s checked in %.3f s (%.2f GB/s): %s\n", a.path.c_str(),
                r.files.size(), r.files.size() == 1 ? "" : "s", r.tensors, r.tensors == 1 ? "" : "s",
                human_bytes(r.bytes).c_str(), r.seconds, gbs,
                r.status() == 0 ? "all match" : r.status() == 1 ? "MISMATCHES" : "nothing verifiable");
    return r.status();
}

}  // namespace

void add_verify_command(CLI::App& app) {
    auto a = std::make_shared<verify_args>();
    CLI::App* c = app.add_subcommand("verify", "Check a file or checkpoint against its recorded checksums "
                                               "(exit 0: all match, 1: mismatches, 2: nothing verifiable)");
    c->add_option("path", a->path, "A safetensors, .npy or raw file, a checkpoint folder or index, or a URL")
        ->required();
    c->add_flag("--record", a->record,
                "write a sidecar (FILE.ferry-checksums.json) for files with no checksums, checked by later runs");
    c->add_flag("--json", a->json, "print one JSON object");
    c->add_option("--threads", a->threads, "reading and hashing threads (default: one per core)");
    c->callback([a] {
        int rc = run_verify(*a);
        if (rc != exit_ok) throw CLI::RuntimeError(rc);
    });
}

}  // namespace ferry::cli
