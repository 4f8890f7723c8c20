// Distributed checkpoint loads: the N ranks of a job load one checkpoint, reading every byte
// once across the group. Each rank reads only its tensor-parallel slices; the tensors every rank
// needs whole (norms, biases, unsplit embeddings, or everything in a data-parallel job) are read
// once, byte-partitioned between the ranks, and completed on every rank by NCCL broadcasts on a
// communicator the caller made.
//
// The path of a byte: open_checkpoint (headers) -> plan_group (a pure function: who reads what,
// which rank broadcasts which byte range, in chunks) -> load_checkpoint_group (each rank reads
// its pieces through load_checkpoint into the final tensors; chunk i is broadcast while chunk
// i+1 is read; an agreement all_reduce before each chunk turns one rank's failure into the same
// error on every rank). NCCL is loaded at run time: libferry does not link it, and this header
// needs neither CUDA nor NCCL headers. Design: docs/design/distributed.md.
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

/// A group load failed on some rank; thrown on every rank of the group, with the same rank,
/// file and step. rank() is the failing rank (-1 when unknown), file() the file it was reading
/// ("" when none), step() where ("open", "chunk 3 of 9 (file)", "slices"), reason() what that
/// rank's error said, failed_ranks() every rank that reported a failure.
class FERRY_EXPORT group_load_error : public error {
public:
    group_load_error(std::string what, int rank, std::string file, std::string step,
                     std::string reason, std::vector<int> failed_ranks);
    int rank() const noexcept { return rank_; }
    const std::string& file() const noexcept { return file_; }
    const std::string& step() const noexcept { return step_; }
    const std::string& reason() const noexcept { return reason_; }
    const std::vector<int>& failed_ranks() const noexcept { return failed_; }

private:
    int rank_;
    std::string file_;
    std::string step_;
    std::string reason_;
    std::vector<int> failed_;
};

/// A collective of a group load did not finish within the timeout (a rank stalled or died), or
/// NCCL reported an asynchronous error. The load aborted the communicator (ncclCommAbort): the
/// caller must not use or destroy it afterwards, and makes a new one.
class FERRY_EXPORT group_timeout_error : public group_load_error {
public:
    using group_load_error::group_load_error;
};

struct group_load_options {
    /// The caller's NCCL communicator (an ncclComm_t), one rank of the group: the world size
    /// and this rank come from it. Every rank of it calls load_checkpoint_group with the same
    /// checkpoint and options. The load issues collectives on it from the calling thread only.
    void* communicator = nullptr;
    std::vector<tp_rule> tp;
    std::optional<group_layout> layout;
    replicated_reads reads = replicated_reads::once_per_group;
    /// 0: 64 MiB per rank of the group.
    std::uint64_t chunk_bytes = 0;
    tensor_selection select;
    /// The GPU the tensors go to; -1: the communicator's device (ncclCommCuDevice).
    int device = -1;
    /// Convert floating-point tensors to this dtype (as checkpoint_load_options::as).
    std::optional<dtype> as;
    /// Caller-owned device destinations by tensor name (full shape for replicated tensors,
    /// this rank's slice shape for sliced ones), as checkpoint_load_options::into.
    std::map<std::string, array> into;
    bool only_into = false;
    bool strict_into = false;
    route_choice route = route_choice::automatic;
    /// Seconds any one collective may take before the load aborts the communicator and throws
    /// group_timeout_error.
    double timeout_seconds = 300;
    /// The NCCL library to use (a soname or a path); "" is "libnccl.so.2" on the loader's
    /// search path. It must be the library the communicator was made with.
    std::string nccl_library;
    /// Called on the calling thread after each chunk: replicated bytes done and in all.
    progress_fn progress;
};

/// What one rank did.
struct group_load_stats {
    int rank = 0;
    int world = 1;
    std::uint64_t bytes_read = 0;             ///< file bytes this rank read
    std::uint64_t replicated_bytes_read = 0;
    std::uint64_t sliced_bytes_read = 0;
    std::uint64_t bytes_received = 0;         ///< by broadcast
    std::uint64_t bytes_sent = 0;
    std::uint64_t bytes_from_other_nodes = 0;
    std::size_t chunks = 0;
    std::size_t requests = 0;                 ///< file reads issued
    double seconds = 0;                       ///< the whole load
    double read_seconds = 0;                  ///< in reads (on the reader thread)
    double collective_seconds = 0;            ///< waiting for collectives
};

struct group_load {
    std::vector<named_array> tensors;     ///< sorted by name; into= tensors are views of the caller's
    group_plan plan;
    group_load_stats stats;
    std::vector<std::string> missing;     ///< only_into: destinations with no selected tensor
    std::vector<std::string> unexpected;  ///< only_into: selected tensors with no destination
};

/// Loads `c` on this rank of the group of `options.communicator`; every rank calls it with the
/// same checkpoint (the same headers: an agreement step compares them) and options. Tensors
/// land in device memory of options.device: replicated ones whole on every rank, sliced ones as
/// this rank's slice. Blocks until every byte has landed (collectives run on an internal
/// stream, synchronized before returning). Throws usage_error (no communicator, NCCL cannot be
/// loaded: the message names the library), group_load_error (any rank failed; the same on
/// every rank), group_timeout_error.
FERRY_EXPORT group_load load_checkpoint_group(const checkpoint& c, const group_load_options& options);

}  // namespace ferry
