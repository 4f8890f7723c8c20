// ferry doctor: whether GPUDirect Storage works on this machine, which path a read of each given
// file or directory into GPU memory takes, and why. The `ferry doctor` command and the Python
// package print what run_doctor returns; docs/gds.md documents every key of the JSON report.
#pragma once

#include "ferry/export.hpp"
#include "ferry/reason.hpp"

#include <optional>
#include <string>
#include <vector>

#include "ferry/settings.hpp"
#include "ferry/stats.hpp"

namespace ferry {

/// What to examine.
struct FERRY_EXPORT doctor_options {
    /// Files or directories. For a directory, the verdict is for a file created in it.
    std::vector<std::string> paths;
    /// Settings the verdicts assume. Unset: the FERRY_* environment variables, where a bad value
    /// is reported in the report (`settings.error`) and the defaults are used instead of throwing.
    std::optional<settings> config;
};

/// The verdict for one path.
struct FERRY_EXPORT doctor_path_verdict {
    std::string path;
    /// The route a large read of it into GPU memory takes; nullopt when it cannot be read at all
    /// (missing, unreadable, a directory where no file can be created).
    std::optional<io_path> route;
    std::vector<std::string> reasons;  ///< every decision that led there, in plain words
    /// The engine's decisions among them as stable codes (include/ferry/reason.hpp), in order;
    /// what the doctor adds from its own probes has no code.
    std::vector<plan_reason> codes;
};

/// A finished report. Thread safety: a plain value.
struct FERRY_EXPORT doctor_report {
    std::string json;     ///< every fact as one JSON object (keys: docs/gds.md)
    std::string text;     ///< the same for people; ends with `summary`
    std::string summary;  ///< a short verdict a person can act on
    bool cuda_available = false;
    bool gds_available = false;  ///< cuFile with direct DMA is usable (system-wide)
    std::vector<doctor_path_verdict> paths;

    /// True when GPUDirect Storage would serve every path (with no paths: gds_available).
    /// `ferry doctor --require-gds` exits non-zero when this is false.
    bool gds_used() const;
};

/// Examines the machine and each path. Never throws for the machine's sake (no GPU, no driver, a
/// missing or broken cuFile, an unreadable cufile.json, a path that does not exist): those are
/// reported. Leaves fds 0-2 as it found them, even if opening the cuFile driver disturbs them.
///
/// Side effects: loads cuFile (settings' cufile_library) into the process and opens its driver,
/// once per process as every ferry transfer does; creates and removes a small temporary file in
/// each directory given. Reads no file data, apart from one O_DIRECT block per path to check
/// that the file system accepts O_DIRECT I/O (it bypasses the page cache).
/// Thread safe; probes run one after another.
FERRY_EXPORT doctor_report run_doctor(const doctor_options& options = {});

}  // namespace ferry
