// The integrity check of a checkpoint load (checkpoint_load_options::verify).
#pragma once

#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/plan.hpp"
#include "ferry/checkpoint.hpp"
#include "formats/checksum_record.hpp"

namespace ferry::checkpoints {

/// Checks every loaded tensor against the CRC-32C record of its shard: a whole, unconverted
/// tensor where it landed (`dst_of(i)`, on host threads or in one GPU launch per device), a
/// sliced or converted one by reading the chunks its slice covers from the shard again. Errors
/// are integrity_error naming the shard (redacted), tensor, byte range and both checksums, and
/// the into= destinations the load already wrote.
///
/// The check is spread over the load: landed() hashes the tensors of a batch whose bytes all
/// landed while later reads are still in flight (host ones on the loading thread; GPU ones in
/// one launch it queues and does not wait for); finish() collects the queued hashes, checks
/// the rest (slices from the file, what a batch left) and throws what any of them found.
/// landed() never throws, so the load can wait for every read before reporting.
class load_verifier {
public:
    load_verifier(const checkpoint& c, const detailed_plan& d, std::function<unsigned char*(std::size_t)> dst_of,
                  const checkpoint_load_options& o)
        : c_(c), d_(d), dst_of_(std::move(dst_of)), o_(o), checked_(d.tensors.size(), 0),
          parsed_(c.shards.size(), 0), records_(c.shards.size()) {}
    /// `tensors` (plan indices) of a batch that ended; left[t] == 0 and !failed[t]: all landed.
    void landed(const std::vector<std::size_t>& tensors, const std::vector<std::uint64_t>& left,
                const std::vector<char>& failed) noexcept;
    void finish();

private:
    const checkpoint& c_;
    const detailed_plan& d_;
    std::function<unsigned char*(std::size_t)> dst_of_;
    const checkpoint_load_options& o_;
    std::vector<char> checked_;
    std::exception_ptr error_;
    /// Each shard's record, parsed on first use (parsed_[f]): once per shard, not per tensor.
    std::vector<char> parsed_;
    std::vector<std::optional<formats::checksum_record>> records_;
    /// GPU hashes landed() queued, collected by finish() (or waited for when a load fails).
    struct queued_check {
        formats::queued_chunk_crcs crcs;
        std::vector<std::size_t> tensors;  // plan indices, in the views' order
        const std::optional<formats::checksum_record>* record;
        std::string shown;
    };
    std::vector<queued_check> queued_;
};

}  // namespace ferry::checkpoints
