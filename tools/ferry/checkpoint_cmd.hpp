// The checkpoint side of `ferry info` and `ferry load`: a folder, an index file or a glob is a
// checkpoint (sharded safetensors); a plain file keeps the single-file commands.
#pragma once

#include <string>
#include <vector>

namespace ferry::cli {

/// True for a folder, a *.index.json file, or a glob that is not an existing file's name.
bool is_checkpoint_source(const std::string& path);

int run_checkpoint_info(const std::string& source, bool json);

struct checkpoint_load_args {
    std::string source;
    std::string device;
    std::vector<std::string> tensors;  ///< exact names, or globs when any has * ? [
    std::vector<std::string> slices;   ///< NAME:DIM:START:STOP or PATTERN:DIM:K/N
    std::string as;
    std::string route;                 ///< auto, segments or span
    bool json = false;
    bool checksum = false;             ///< xxh64 of each tensor's logical contents
    std::string verify = "auto";       ///< the recorded CRC-32C checksums: auto, always or never
};
int run_checkpoint_load(const checkpoint_load_args& a);

}  // namespace ferry::cli
