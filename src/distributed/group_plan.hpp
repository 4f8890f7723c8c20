// The group planner's private helpers (the plan itself is ferry::plan_group in
// include/ferry/distributed.hpp), shared with the plan's table tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/distributed.hpp"

namespace ferry::distributed {

/// The rule that makes `name` sliced: an exact pattern first, then the first matching glob;
/// nullptr when the tensor is replicated.
const tp_rule* rule_for(const std::vector<tp_rule>& rules, const std::string& name);

/// Bytes of one row along `dim` of a tensor of `bytes` bytes (the whole tensor for dim -1).
std::uint64_t row_bytes(const checkpoint_tensor& t, int dim) noexcept;

}  // namespace ferry::distributed
