// The integrity check of a finished checkpoint load (checkpoint_load_options::verify).
#pragma once

#include <functional>

#include "checkpoint/plan.hpp"
#include "ferry/checkpoint.hpp"

namespace ferry::checkpoints {

/// Checks every loaded tensor against the CRC-32C record of its shard: a whole, unconverted
/// tensor where it landed (`dst_of(i)`, host threads or one GPU launch per device), a sliced
/// or converted one by reading the chunks its slice covers from the shard again. Throws
/// integrity_error naming the shard (redacted), tensor, byte range and both checksums, and the
/// into= destinations the load already wrote.
void verify_load(const checkpoint& c, const detailed_plan& d, const std::function<unsigned char*(std::size_t)>& dst_of,
                 const checkpoint_load_options& o);

}  // namespace ferry::checkpoints
