// The open of a checkpoint with a say in its middle: a load of every tensor whole starts its
// reads from the folder's listing before the index is parsed (likely_shards), or else once the
// shards' headers are read, while the open still merges their tensors and checks them against
// the index (load.cpp, open_and_load_checkpoint).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ferry/checkpoint.hpp"

namespace ferry::checkpoints {

/// Called by the open, on its own thread, once every shard's header is read (and the shards
/// are of one generation), before their tensors are merged and checked: the shards in the
/// order of the checkpoint's `shards`. Whatever it starts must stay valid if the open then
/// throws.
using shards_read = std::function<void(const std::vector<checkpoint_shard>&)>;

/// The shard files a local checkpoint's folder most likely holds, found without parsing its
/// index: where `source` is a folder with an index (or a local *.safetensors.index.json), the
/// files beside the index named <stem>-[<tag>-]<k>-of-<count>.safetensors, all of one tag and
/// count and every k of 1..count present, as paths in the order the open will list the index's
/// shards (by name). Empty where there is no such set (a remote source, no index, a shard of
/// the count missing, two tags or two counts). Only a guess: the index, once parsed, decides.
std::vector<std::string> likely_shards(const std::string& source);

/// open_checkpoint(source) and open_checkpoint(files), calling `on_read` (when set) as above.
checkpoint open_checkpoint(const std::string& source, const shards_read& on_read);
checkpoint open_checkpoint(const std::vector<std::string>& files, const shards_read& on_read);

}  // namespace ferry::checkpoints
