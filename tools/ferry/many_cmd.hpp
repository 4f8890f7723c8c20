// `ferry load` of many files: several paths, a glob of .npy or raw files, or @LIST (a file that
// names one path a line), loaded by ferry::load_many.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::cli {

/// The files of `ferry load`'s arguments when they are a list rather than one file or one
/// checkpoint: two or more arguments, "@LIST", or a glob none of whose matches is a
/// .safetensors file (those stay a checkpoint). Globs among several arguments are expanded.
/// nullopt for one plain file, folder, index, URL or checkpoint glob. Throws usage_error for a
/// list file that cannot be read, or that names no file, and for a glob that matches nothing.
std::optional<std::vector<std::string>> file_list(const std::vector<std::string>& given);

struct many_load_args {
    std::vector<std::string> paths;
    std::string device;
    std::vector<std::string> tensors;
    std::string as;
    std::string dtype;
    std::vector<std::int64_t> shape;
    bool keep_going = false;  ///< load the others and list the failures (exit 1), not stop at the first
    bool checksum = false;
    bool json = false;
};
int run_many_load(const many_load_args& a);

}  // namespace ferry::cli
