// Distributed checkpoint loads: the N ranks of a job load one checkpoint, reading every byte
// once across the group. Each rank reads only its tensor-parallel slices; the tensors every rank
// needs whole (norms, biases, unsplit embeddings, or everything in a data-parallel job) are read
// once, byte-partitioned between the ranks, and completed on every rank by broadcasts.
//
// This header is the planner: open_checkpoint (headers) -> plan_group (a pure function: who
// reads what, which rank broadcasts which byte range, in chunks). The plan is carried out by the
// Python package over torch.distributed (ferry.load_checkpoint(..., group=...), gloo or NCCL):
// each rank reads its pieces through load_checkpoint and the broadcasts run on the caller's
// process group. Design: docs/design/distributed.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"
#include "ferry/export.hpp"

namespace ferry {

/// Where the ranks of a group run and where the checkpoint's files are stored.
struct FERRY_EXPORT group_layout {
    /// The node of each rank (any non-negative ids; one entry per rank).
    std::vector<int> node_of_rank;
    /// Shard path (as the checkpoint names it) or its base name -> the node whose local storage
    /// holds it. Replicated bytes of such a file are read by that node's ranks; files without
    /// an owner (shared storage) are read by every rank.
    std::map<std::string, int> file_node;
    /// `world` ranks, `ranks_per_node` consecutive ones on each node (torchrun's numbering).
    /// Throws usage_error unless ranks_per_node >= 1.
    static group_layout uniform(int world, int ranks_per_node);
};

/// Who reads the replicated bytes when a layout puts the ranks on several nodes.
enum class replicated_reads : std::uint8_t {
    /// Once across the whole group. Every byte then crosses the network once per other node:
    /// first from its reader to the ranks of the same local index on the other nodes (one
    /// "rail" per local index, so every NIC of a node carries a share), then within each node.
    once_per_group,
    /// Once per node: the ranks of each node read every replicated byte between them and
    /// broadcast only within their node (no traffic between nodes; every node needs its own
    /// copy of the files, and file_node is not used).
    once_per_node,
};
FERRY_EXPORT std::string_view to_string(replicated_reads r) noexcept;

/// A tensor-parallel rule: the tensors whose name equals `pattern` or matches it as an
/// fnmatch glob are *sliced*: split along `dim` (negative counts from the end) into `world`
/// equal parts, rank r reading part r ([r*n/world, (r+1)*n/world)). Every other selected tensor
/// is *replicated*. An exact name wins over globs, then the first matching glob.
struct tp_rule {
    std::string pattern;
    int dim = 0;
};

struct group_plan_options {
    int world = 1;
    std::vector<tp_rule> tp;
    std::optional<group_layout> layout;
    replicated_reads reads = replicated_reads::once_per_group;
    /// The unit of read/broadcast overlap: replicated tensors are taken per file in file order
    /// and cut into chunks of about this many bytes (a larger tensor at row boundaries).
    std::uint64_t chunk_bytes = 64ull << 20;
    tensor_selection select;
};

/// Rows [start, stop) along `dim` of one replicated tensor, read by `reader`: one byte range of
/// its file, [offset, offset + bytes). A row is one index of the tensor's first dimension
/// longer than 1, so every piece is contiguous in the file and in the tensor. `dim` is -1 for
/// a tensor that is not cut (a scalar or all dimensions 1; start 0, stop 1).
struct group_piece {
    std::size_t tensor = 0;  ///< index into checkpoint::tensors
    int dim = -1;
    std::int64_t start = 0;
    std::int64_t stop = 0;
    std::uint64_t offset = 0;
    std::uint64_t bytes = 0;
    int reader = 0;
};

/// One collective: `root` broadcasts piece `piece` of its chunk to the ranks of subgroup
/// `subgroup` (an index into group_plan::subgroups). The broadcasts of stage 1 of a chunk start
/// when those of stage 0 have finished (stage 1 relays what stage 0 brought to a node).
struct group_broadcast {
    std::size_t piece = 0;
    int root = 0;
    std::size_t subgroup = 0;
    int stage = 0;
};

struct group_chunk {
    std::size_t shard = 0;              ///< index into checkpoint::shards
    std::uint64_t bytes = 0;            ///< replicated bytes the chunk holds (counted once)
    std::vector<int> readers;           ///< ranks allowed to read it
    std::vector<group_piece> pieces;    ///< in file order (with once_per_node, each node's in turn)
    std::vector<group_broadcast> broadcasts;  ///< stage 0 first; pieces of 0 bytes have none
};

/// One tensor-parallel slice a rank reads.
struct group_slice_read {
    std::size_t tensor = 0;   ///< index into checkpoint::tensors
    tensor_slice slice;       ///< a range: dim (non-negative), start, stop
    std::uint64_t bytes = 0;  ///< the slice's bytes (the file bytes of its elements)
};

/// What one rank does in a plan.
struct group_rank_plan {
    std::vector<group_slice_read> slices;  ///< its tensor-parallel slices, by tensor name
    std::uint64_t slice_bytes = 0;
    std::uint64_t replicated_bytes = 0;    ///< its share of the replicated bytes
    std::uint64_t bytes_received = 0;      ///< by broadcast
    std::uint64_t bytes_sent = 0;          ///< by broadcast (a relay sends what it received)
    std::uint64_t bytes_from_other_nodes = 0;  ///< of bytes_received, from a rank on another node
};

/// Who reads which bytes of a checkpoint and which collectives complete the replicated tensors.
/// Every rank computes the same plan from the same inputs.
struct group_plan {
    int world = 1;
    std::vector<std::size_t> sliced;      ///< tensor indices, sorted by name
    std::vector<std::size_t> replicated;  ///< tensor indices, sorted by name
    /// The rank sets broadcasts run in. Subgroup 0 is the whole group; with a layout of several
    /// nodes come one per node, then (once_per_group, nodes of equal size) one per local index.
    std::vector<std::vector<int>> subgroups;
    std::string collectives;   ///< how the broadcasts are arranged and why, in plain words
    std::vector<group_chunk> chunks;       ///< in the order they are read and broadcast
    std::uint64_t replicated_bytes = 0;    ///< bytes of the replicated tensors (counted once)
    std::vector<group_rank_plan> ranks;    ///< one per rank
};

/// Plans a group load without moving a byte. Deterministic: the same checkpoint headers and
/// options give the same plan on every rank. Bytes per rank (its slices plus its share of the
/// replicated bytes) are balanced: each chunk is water-filled over its readers, the least loaded
/// first, at row granularity. Throws usage_error (world < 1, chunk_bytes 0, a layout that does
/// not list every rank) and checkpoint_error (a rule's dim outside a tensor it matches; the
/// selection's errors).
FERRY_EXPORT group_plan plan_group(const checkpoint& c, const group_plan_options& options);

/// The dimension a replicated tensor of this shape is cut along: the first one longer than 1,
/// so that every run of its indices is one byte range of its file. -1 when there is none
/// (scalars, all dimensions 1). Thread-safe.
FERRY_EXPORT int group_split_dim(const std::vector<std::int64_t>& shape) noexcept;

}  // namespace ferry
