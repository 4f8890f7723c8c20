// The checkpoint planner: a pure function from (checkpoint, options, budget cap) to what each
// selected tensor reads, where it lands, and through which route and why. Nothing is read or
// allocated here, so every error about the request surfaces before any byte moves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/checkpoint.hpp"

namespace ferry::checkpoints {

/// One selected tensor's bytes seen as `rows` equal row segments: row r's segment is
/// [offset + r*row_bytes, + seg_bytes) in the file, and lands packed at dst + r*seg_bytes_out.
/// A whole tensor (or a dim-0 slice) is one row.
struct geometry {
    std::size_t plan = 0;          ///< index into checkpoint_plan::tensors
    std::size_t file = 0;          ///< shard
    std::uint64_t offset = 0;      ///< file offset of row 0's segment
    std::uint64_t rows = 1;
    std::uint64_t row_bytes = 0;   ///< file pitch
    std::uint64_t seg_bytes = 0;   ///< bytes of one segment in the file
    std::uint64_t out_seg_bytes = 0;  ///< the same after conversion
    std::uint64_t rows_per_piece = 0; ///< for routes through temporaries
    dtype from = dtype::uint8;
    dtype to = dtype::uint8;
    bool staged = false;           ///< goes through a temporary (gather, conversion, GPU segments)
    const array* into = nullptr;   ///< the caller's destination, or null for the fresh block
    placement where;
};

struct detailed_plan {
    checkpoint_plan plan;
    std::vector<geometry> tensors;      ///< in plan order
    std::uint64_t staging_piece = 0;    ///< largest host temporary of one piece
    std::uint64_t device_piece = 0;     ///< largest device temporary of one piece
};

/// Target size of one piece through temporaries: large enough that a piece's reads keep the
/// engine's workers busy, small enough that two in flight stay far under the default budget.
inline constexpr std::uint64_t piece_target = 32ull << 20;

/// Whether `name` matches the fnmatch glob `pattern` (the slice rules' and selection's globs).
bool glob_match(const std::string& pattern, const std::string& name);

/// The tensors `s` selects, as indices into c.tensors in name order. Throws checkpoint_error for
/// a named tensor the checkpoint lacks, usage_error for an invalid regex.
std::vector<std::size_t> select(const checkpoint& c, const tensor_selection& s);

detailed_plan make_plan(const checkpoint& c, const checkpoint_load_options& o, std::uint64_t budget_cap);

}  // namespace ferry::checkpoints
