// The hook between ferry::read_whole_files and its GPU form (whole_files_device.cpp): what a
// reading thread does with a block once it is complete, before the caller's on_block.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ferry/many.hpp"

namespace ferry::whole_file_reading {

/// Runs on the reading thread once `block` holds every file it placed there (`files`; the
/// block's bytes are [0, used)), outside on_block's lock, so on several threads at once; it
/// may change those files' descriptions and returns what whole_files::blocks holds for the
/// block from then on (a GPU load: its place in device memory). A throw fails those files.
using block_stage = std::function<array(const array& block, std::uint64_t used, const std::vector<std::size_t>& files,
                                        std::vector<whole_file>& all)>;

/// read_whole_files with `stage` run on each complete block.
whole_files read_whole_files_staged(const std::vector<std::string>& paths, const whole_files_options& options,
                                    const block_stage& stage);

}  // namespace ferry::whole_file_reading
