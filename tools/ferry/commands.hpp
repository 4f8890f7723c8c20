// The ferry command line: each subcommand lives in its own file and registers itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace ferry::cli {

/// Exit statuses: 0 success, 1 invalid or unreadable input, 2 usage error.
inline constexpr int exit_ok = 0;
inline constexpr int exit_input = 1;
/// Stopped by SIGINT or SIGTERM (128 + SIGINT, as shells report a Ctrl-C).
inline constexpr int exit_interrupted = 130;
inline constexpr int exit_usage = 2;

void add_load_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_doctor_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_verify_command(CLI::App& app);

}  // namespace ferry::cli
