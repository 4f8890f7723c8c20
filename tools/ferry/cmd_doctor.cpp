// ferry doctor [PATH ...] [--json] [--require-gds]: whether GPUDirect Storage works here, which
// path a read of each PATH into GPU memory takes, and why.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "ferry/doctor.hpp"

namespace {

// --require-gds found a PATH (or, without PATHs, a machine) that GPUDirect Storage would not serve.
constexpr int exit_no_gds = 3;

struct doctor_args {
    std::vector<std::string> paths;
    bool json = false;
    bool require_gds = false;
};

}  // namespace

void ferry::cli::add_doctor_command(CLI::App& app) {
    auto args = std::make_shared<doctor_args>();
    CLI::App* cmd = app.add_subcommand(
        "doctor", "Check whether GPUDirect Storage works here, and which path each file takes and why");
    cmd->add_option("paths", args->paths, "Files or directories to examine");
    cmd->add_flag("--json", args->json, "Print the report as one JSON object (keys: docs/gds.md)");
    cmd->add_flag("--require-gds", args->require_gds,
                  "Exit non-zero when GPUDirect Storage would not be used for a PATH "
                  "(without PATHs: when it is not available)");
    cmd->callback([args] {
        ferry::doctor_options options;
        options.paths = args->paths;
        ferry::doctor_report report = ferry::run_doctor(options);
        const std::string& out = args->json ? report.json + "\n" : report.text;
        std::fwrite(out.data(), 1, out.size(), stdout);
        std::fflush(stdout);
        if (args->require_gds && !report.gds_used()) {
            std::string which;
            for (const auto& p : report.paths)
                if (p.route != ferry::io_path::gds) which += (which.empty() ? "" : ", ") + p.path;
            std::fprintf(stderr, "ferry doctor: GPUDirect Storage would not be used%s%s\n",
                         which.empty() ? "" : " for ", which.c_str());
            throw CLI::RuntimeError(exit_no_gds);
        }
    });
}
