// Runs the ferry command as a user would, through the shell, for the CLI tests
// (FERRY_CLI is the built program's path, set by tests/CMakeLists.txt).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "test_util.hpp"

namespace ferry::test {

struct cli_result {
    int status = -1;   // the exit status; -1 when the command did not exit normally
    std::string out;   // standard output (and standard error, where merged)
    std::string err;   // standard error, where kept apart
};

/// Runs `command` through sh and collects its standard output.
inline cli_result run_shell(const std::string& command) {
    cli_result r;
    FILE* p = ::popen(command.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
    int status = ::pclose(p);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

/// `ferry ARGS`, standard error merged into `out`.
inline cli_result run_cli(const std::string& args) {
    return run_shell(std::string("'") + FERRY_CLI + "' " + args + " 2>&1");
}

/// `ferry ARGS` in `cwd` (when given), after `prefix` (shell words such as variables), standard
/// error kept apart in `err` through a file in `dir`.
inline cli_result run_cli(const std::string& args, const temp_dir& dir, const std::string& cwd = "",
                          const std::string& prefix = "") {
    std::string err_file = dir / "stderr.txt";
    cli_result r = run_shell((cwd.empty() ? "" : "cd '" + cwd + "' && ") + prefix + "'" + FERRY_CLI + "' " + args +
                             " 2>'" + err_file + "'");
    auto e = read_whole(err_file);
    r.err.assign(e.begin(), e.end());
    std::filesystem::remove(err_file);
    return r;
}

}  // namespace ferry::test
