// Checkpoints: a model's tensors spread over several safetensors files (the Hugging Face layout:
// model.safetensors.index.json plus model-0000K-of-0000N.safetensors shards), loaded in one plan
// that covers every selected tensor of every shard, reading only the slices the caller needs,
// into a fresh allocation or straight into the caller's own buffers, under one process-wide
// budget on temporary memory.
//
// The path of a byte: open_checkpoint (every shard header read and validated in parallel, the
// index checked against them) -> plan_checkpoint (a pure function: selection, slices, routes
// and their reasons, destinations checked) -> load_checkpoint (all reads of all shards as one
// batch on the engine's workers; GPU-side gather and dtype conversion through bounded
// temporaries).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/dtype.hpp"
#include "ferry/error.hpp"
#include "ferry/export.hpp"
#include "ferry/integrity.hpp"
#include "ferry/reason.hpp"
#include "ferry/memory.hpp"
#include "ferry/safetensors.hpp"

namespace ferry {

/// Invalid checkpoint content or a request that does not fit it: names the file (shard, index
/// or checkpoint), the tensor ("" when none) and the reason. Raised before any byte is written
/// to caller-provided buffers. A format_error whose field() is "tensor 'NAME'".
class FERRY_EXPORT checkpoint_error : public format_error {
public:
    checkpoint_error(std::string file, std::string tensor, std::string reason);
    const std::string& tensor() const noexcept { return tensor_; }

private:
    std::string tensor_;
};

/// An I/O error in the middle of a load: what() gives the first failure; complete() the
/// tensors whose bytes all landed (and were converted), incomplete() the others.
class FERRY_EXPORT checkpoint_io_error : public error {
public:
    checkpoint_io_error(std::string what, std::vector<std::string> complete,
                        std::vector<std::string> incomplete);
    const std::vector<std::string>& complete() const noexcept { return complete_; }
    const std::vector<std::string>& incomplete() const noexcept { return incomplete_; }

private:
    std::vector<std::string> complete_;
    std::vector<std::string> incomplete_;
};

/// A checkpoint that changed while it was opened or loaded: a shard of another generation than
/// its index (`ferry.generation` in the metadata of both), an index, or a shard, replaced,
/// rewritten or removed since it was read (device, inode, size and modification time; a remote
/// object's size and ETag). No mix of two generations is returned: opening and loading again
/// sees the checkpoint as it is then, so the error is worth a retry. file() names the shard or
/// index (a URL redacted), reason() what changed.
class FERRY_EXPORT checkpoint_changed_error : public error {
public:
    checkpoint_changed_error(std::string file, std::string reason);
    const std::string& file() const noexcept { return file_; }
    const std::string& reason() const noexcept { return reason_; }

private:
    std::string file_;
    std::string reason_;
};

/// One tensor of a checkpoint: where its bytes are.
struct checkpoint_tensor {
    std::string name;
    ferry::dtype type = dtype::uint8;
    std::vector<std::int64_t> shape;
    std::size_t shard = 0;       ///< index into checkpoint::shards
    std::uint64_t offset = 0;    ///< absolute file offset of its first byte
    std::uint64_t bytes = 0;
};

struct checkpoint_shard {
    std::string path;             ///< a local path or a URL (as opened: show it redacted)
    std::uint64_t file_size = 0;
    std::string version;          ///< file::version() when its header was read: a remote object's ETag, a local file's identity
    safetensors_info header;
};

/// A validated checkpoint. Value type; thread-compatible.
struct FERRY_EXPORT checkpoint {
    std::string source;        ///< what open_checkpoint was given
    std::string index_path;    ///< "" when there is no index
    std::vector<checkpoint_shard> shards;
    std::vector<checkpoint_tensor> tensors;  ///< sorted by name
    std::map<std::string, std::string> metadata;  ///< the index's "metadata" (as strings)
    std::uint64_t total_bytes() const noexcept;
    /// The tensor named `name`, or nullptr.
    const checkpoint_tensor* find(const std::string& name) const;
};

/// Opens a checkpoint: a folder (its *.safetensors.index.json, else its *.safetensors files),
/// an index file, a glob ("dir/*.safetensors"), or one safetensors file. A URL (http://,
/// https://, s3://) names an index (".json" at the end), one object (".safetensors"), or a
/// prefix: "s3://bucket/ckpt/", "https://host/path/" (a '/' at the end, a bucket alone, or a
/// last segment without a dot), whose model.safetensors.index.json is read, else for S3 the
/// *.safetensors objects directly under it (ListObjectsV2), else for http(s) its
/// model.safetensors. Globs are local only. Reads every shard header in parallel and checks the
/// index against them. Throws checkpoint_error (a shard the index names is missing, a tensor in
/// two shards or in none, index and header disagreeing), format_error (invalid header:
/// overlapping or out-of-file ranges, ...), checkpoint_changed_error (a shard of another
/// generation than the index; an index without a generation replaced while its shards were
/// read), system_error, remote_error (HTTP status, URL redacted, the credentials used).
/// Messages show URLs with their credentials redacted.
FERRY_EXPORT checkpoint open_checkpoint(const std::string& source);
/// The same for an explicit list of safetensors files.
FERRY_EXPORT checkpoint open_checkpoint(const std::vector<std::string>& files);

/// Which tensors to load.
struct tensor_selection {
    enum class kind : std::uint8_t { all, names, glob, regex };
    kind how = kind::all;
    /// Exact names (each must exist), fnmatch globs, or ECMAScript regexes (matched anywhere in
    /// the name, like Python's re.search); a tensor is selected when any pattern matches.
    std::vector<std::string> patterns;
};

/// A slice of one tensor along `dim`: elements [start, stop), or with parts > 0 the rule "split
/// dim into `parts` equal parts, take part `part`" (part k is [k*n/parts, (k+1)*n/parts)).
struct tensor_slice {
    int dim = 0;
    std::int64_t start = 0;
    std::int64_t stop = 0;
    std::int64_t parts = 0;
    std::int64_t part = 0;
    static tensor_slice range(int dim, std::int64_t start, std::int64_t stop) {
        return {dim, start, stop, 0, 0};
    }
    static tensor_slice split(int dim, std::int64_t parts, std::int64_t part) {
        return {dim, 0, 0, parts, part};
    }
};

/// How the bytes of one tensor are read.
enum class read_route : std::uint8_t {
    whole,     ///< one byte range (a whole tensor, or a dim-0 slice)
    segments,  ///< one read per row segment, straight into place: large segments
    span,      ///< the enclosing span into a temporary, then a 2-D gather: small segments
};
FERRY_EXPORT std::string_view to_string(read_route r) noexcept;

/// Forces a route for sliced tensors (tests and benchmarks); auto lets the planner choose.
enum class route_choice : std::uint8_t { automatic, segments, span };

/// Progress: bytes read so far and in all. Called on the loading thread.
using progress_fn = std::function<void(std::uint64_t done, std::uint64_t total)>;

struct checkpoint_plan;

struct checkpoint_load_options {
    /// Where fresh tensors go (ignored for tensors with a destination in `into`).
    placement where = placement::host();
    /// Convert floating-point tensors to this dtype (float16, bfloat16, float64 <-> float32).
    std::optional<dtype> as;
    tensor_selection select;
    /// Per-tensor slices, by exact name, then by the first matching glob in `slice_rules`.
    std::map<std::string, tensor_slice> slices;
    std::vector<std::pair<std::string, tensor_slice>> slice_rules;
    /// Caller-owned destinations by tensor name: writable (not read_only()), C-order, native
    /// byte order, the shape of the (sliced) tensor, and its dtype (a floating dtype other than
    /// the file's converts). Each is checked before any byte moves. Selected tensors without one
    /// get a fresh allocation.
    std::map<std::string, array> into;
    /// load_state_dict's use: only tensors with a destination in `into` are loaded; selected
    /// tensors without one are reported in plan.unexpected, destinations naming no selected
    /// tensor in plan.missing (instead of failing).
    bool only_into = false;
    /// With only_into: any missing or unexpected name fails with usage_error before any byte
    /// moves (load_state_dict's strict=True).
    bool strict_into = false;
    route_choice route = route_choice::automatic;
    /// Kernels (gather, conversion) run on this stream; the load synchronizes it before
    /// returning.
    stream_t stream = nullptr;
    progress_fn progress;
    /// Makes the one block the fresh tensors share: at least `bytes` bytes on `where` (an
    /// array library's own pool, say, whose mapped memory takes copies faster than a fresh
    /// cudaMalloc). The tensors keep the returned array's owner; a read-only one is refused.
    /// Empty: ferry allocates.
    std::function<array(std::uint64_t bytes, const placement& where)> allocate;
    /// Called once on the loading thread as soon as the reads that land in place are under
    /// way, with the tensors (their bytes not complete yet) and the plan: work that only needs
    /// the tensors' places (wrapping them for a caller's library, say) overlaps the reads
    /// instead of following them. Nothing may read or write the tensors' bytes before the load
    /// returns. An exception from it fails the load once every read has ended.
    std::function<void(const std::vector<named_array>& tensors, const checkpoint_plan& plan)> while_reading;
    /// The lighter form of while_reading, for a caller that wraps the fresh tensors itself from
    /// their places: called at the same point with the plan, each planned tensor's first byte
    /// (in plan order) and the block the fresh tensors share (empty where none is fresh). Where
    /// it is set and while_reading is not, the result's `tensors` stays empty: the caller has
    /// made its own, and keeps `block` (a copy shares its memory) for as long as it uses the
    /// places, since nothing else does once the load returns. For 50,000 tensors those Arrays
    /// and their names took about 10 ms of the loading thread on an H100, while the reads ran,
    /// for objects such a caller never used.
    std::function<void(const checkpoint_plan& plan, const std::vector<unsigned char*>& places, const array& block)>
        places_while_reading;
    /// Check the CRC-32C checksums the shards record (ferry/integrity.hpp) once the bytes have
    /// landed: whole tensors where they landed (on the GPU for GPU tensors), sliced or converted
    /// ones by reading the chunks they cover again. A mismatch throws integrity_error (no tensor
    /// is returned; what() names the into= destinations already written).
    verify_mode verify = verify_mode::automatic;
};

/// What the planner decided for one tensor.
struct tensor_plan {
    std::string name;
    std::size_t tensor = 0;  ///< index into checkpoint::tensors
    std::vector<std::int64_t> shape;  ///< after slicing
    dtype type = dtype::uint8;        ///< after conversion
    read_route route = read_route::whole;
    std::string reason;               ///< why this route, in plain words
    /// The same as a stable code (whole_tensor, segments_cheaper...; include/ferry/reason.hpp).
    reason_code code = reason_code::none;
    std::uint64_t bytes_read = 0;     ///< file bytes this tensor reads
    std::uint64_t temp_bytes = 0;     ///< largest temporary one piece of it needs
    bool convert = false;
    bool into = false;                ///< goes to a caller-provided buffer
};

struct checkpoint_plan {
    std::vector<tensor_plan> tensors;   ///< sorted by name
    std::uint64_t bytes_read = 0;       ///< file bytes to read
    std::uint64_t bytes_out = 0;        ///< bytes of the tensors as returned
    std::uint64_t largest_piece = 0;    ///< the largest temporary one piece needs
    std::size_t requests = 0;           ///< file reads after coalescing
    std::vector<std::string> missing;     ///< only_into: destinations with no selected tensor
    std::vector<std::string> unexpected;  ///< only_into: selected tensors with no destination
};

/// Plans a load without moving a byte: selection, slices, routes, destinations and the budget
/// are checked here. Throws checkpoint_error naming the file and tensor.
FERRY_EXPORT checkpoint_plan plan_checkpoint(const checkpoint& c, const checkpoint_load_options& options);

struct checkpoint_stats {
    std::uint64_t bytes_read = 0;      ///< file bytes read (a half slice reads about half)
    std::uint64_t bytes_out = 0;
    std::size_t tensors = 0;
    std::size_t files = 0;
    std::size_t requests = 0;          ///< file reads issued
    double seconds = 0;                ///< the whole load
    double first_read_seconds = 0;     ///< from the call to the first read issued
    double open_seconds = 0;           ///< open_and_load_checkpoint: the open, before `seconds`
    /// open_and_load_checkpoint: from the start of the open until every shard's header was read
    /// (a load of every tensor whole issues its reads then); 0 where the open did not say.
    double headers_seconds = 0;
    /// What the reads waited for: "listing" (open_and_load_checkpoint of a local folder's index:
    /// the shard files its listing names, read before the index was parsed), "headers" (every
    /// shard's header read, while the open merged their tensors), "open" (a whole load of an
    /// open checkpoint: before the plan), "plan" (any other load: after the plan).
    std::string reads_began;
    std::uint64_t peak_temp_bytes = 0; ///< this load's largest hold on the memory budget
    std::uint64_t device_temp_bytes = 0; ///< of which device memory (GPU conversions)
    std::uint64_t budget_peak_bytes = 0; ///< the process-wide budget's peak so far
};

struct checkpoint_load {
    std::vector<named_array> tensors;  ///< sorted by name; into= tensors are views of the caller's
    checkpoint_plan plan;
    checkpoint_stats stats;
};

/// Loads per plan_checkpoint. Fresh tensors of one placement share one allocation (see the
/// ownership note in safetensors.hpp). Shards removed, or whose version (a local file's
/// device, inode, size and modification time; a remote object's size and ETag) changed since
/// open_checkpoint, are refused with checkpoint_changed_error before any byte moves, and
/// local ones checked again after their bytes were read. Reads of all shards are one batch;
/// sliced tensors that need a gather or conversion go through temporaries held under the
/// memory budget, waiting (not failing) while other loads hold it. Throws what
/// plan_checkpoint throws (before any byte lands in `into`), checkpoint_io_error for an I/O
/// error mid-load.
FERRY_EXPORT checkpoint_load load_checkpoint(const checkpoint& c, const checkpoint_load_options& options = {});

/// open_checkpoint and load_checkpoint in one call (`sources`: one source as open_checkpoint
/// takes it, or several safetensors files), the open's time in stats.open_seconds, apart from
/// stats.seconds. A load of every tensor whole, as stored, issues each shard's read as soon as
/// the shards' headers are read, while the open still merges their tensors and checks them
/// against the index; stats.first_read_seconds then counts from the start of the open. Where
/// the open fails, those reads are waited for and their memory freed before the error is
/// thrown. `opened`, when given, is called with the open checkpoint before the load's clock
/// starts.
FERRY_EXPORT checkpoint_load open_and_load_checkpoint(const std::vector<std::string>& sources,
                                                      const checkpoint_load_options& options = {},
                                                      const std::function<void(const checkpoint&)>& opened = {});

/// The process-wide cap on temporary memory (host temporaries and device temporaries) held by
/// checkpoint loads; loads wait for room. Default 1 GiB. A load whose largest single piece is
/// above the cap fails with checkpoint_error. Thread-safe.
FERRY_EXPORT void set_checkpoint_memory_budget(std::uint64_t bytes);
FERRY_EXPORT std::uint64_t checkpoint_memory_budget() noexcept;
/// The most the budget has had in use at once since the process started.
FERRY_EXPORT std::uint64_t checkpoint_memory_peak() noexcept;

/// Writes `tensors` as a Hugging Face checkpoint in `folder` (created if missing; an
/// "s3://bucket/prefix/" writes objects under that prefix, each shard by multipart upload, whole
/// or not at all): one model.safetensors when they fit in `max_shard_size` bytes, else shards
/// model-0000K-of-0000N.safetensors (tensors in the given order, a new shard when the next
/// would pass the size; a larger tensor alone; named model-GGGGGGGGGGGG-0000K-of-0000N where
/// the previous generation holds the name) and model.safetensors.index.json
/// ({"metadata": {"total_size": N, "ferry.generation": G, ...metadata}, "weight_map": {...}}).
/// Shards carry `metadata`, "ferry.generation" and "format": "pt" unless given. One save is one
/// generation (a random 128-bit id, G): every file is written atomically beside the previous
/// generation's, the index replaced last by a rename, and the previous generation's shards
/// removed after it; a save that fails removes what it wrote and leaves the previous
/// generation loadable. With `checksums`, every shard records CRC-32C checksums of its tensors
/// (save_safetensors). Returns the files written, index last.
FERRY_EXPORT std::vector<std::string> save_checkpoint(const std::string& folder,
                                         const std::vector<named_array>& tensors,
                                         std::uint64_t max_shard_size = 5'000'000'000ull,
                                         const std::map<std::string, std::string>& metadata = {},
                                         bool checksums = true);

}  // namespace ferry
