// Credentials that stay valid for as long as a read or an upload lasts. The chain's answer signs
// every request; when it is temporary (web identity, container endpoint, IMDSv2, assume-role) it
// is fetched again from the same link before it expires: once half its lifetime has passed or 5
// minutes before its Expiration, whichever comes later (an hour-long role is renewed 5 minutes
// early, a two-second test credential after one second). One thread renews while the others keep
// signing with the credentials in hand; only once those have expired do they wait for the new
// ones. Renewals made ahead of time are at least a second apart, so a link that keeps handing
// out the same credentials near their end is not flooded. A server that answers "expired"
// (ExpiredToken) makes the reader call renew(), which fetches at once (each reader asks once
// per range; readers refused with the same credentials meanwhile take the new ones).
//
// One signer serves every object opened with the same chain inputs (shared_aws_signer): the
// shards of a checkpoint, opened twice each, ask STS once, not twice per shard.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/http/http_client.hpp"
#include "backend/s3/credential_chain.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

class aws_signer : public http_signer {
public:
    using clock = std::chrono::system_clock;

    /// `first`: the chain's answer; `region`: what SigV4 signs for; `chain`: what each link said;
    /// `s`: where renewals are logged.
    aws_signer(aws_credentials first, std::string region, std::vector<std::string> chain = {},
               const settings& s = settings{});

    http_auth current() override;
    bool renew(const http_auth& used) override;

    /// The credentials now (for the doctor: never print the secret or the token).
    aws_credentials credentials() const;
    /// When the current credentials expire (nullopt: they do not, or the link did not say).
    std::optional<clock::time_point> expires() const;
    /// When they will be renewed (nullopt: never).
    std::optional<clock::time_point> renews_at() const;
    bool temporary() const;
    std::uint64_t renewals() const;
    const std::vector<std::string>& chain() const noexcept { return chain_; }
    const std::string& region() const noexcept { return region_; }

private:
    void install(aws_credentials c, clock::time_point now);
    /// Fetches new credentials; called with the lock held (released while fetching).
    void refresh_locked(std::unique_lock<std::mutex>& lock, bool forced);

    const std::string region_;
    const std::vector<std::string> chain_;
    const settings settings_;
    mutable std::mutex mutex_;
    std::condition_variable renewed_;
    aws_credentials creds_;
    http_auth auth_;
    std::optional<clock::time_point> expires_, renew_at_;
    clock::time_point next_attempt_{};
    bool refreshing_ = false;
    std::uint64_t renewals_ = 0;
};

/// The signer for these chain inputs: made (the chain walked) on first use, then shared while
/// the inputs (the environment variables the chain reads, the options, and the AWS files' size
/// and modification time) stay the same. Explicit keys are never cached. Throws what
/// resolve_aws_credentials throws.
std::shared_ptr<aws_signer> shared_aws_signer(const s3_options& o, const env_lookup& env,
                                              const std::string& location, const settings& s);

/// Forgets every shared signer (tests that restart credential endpoints on reused ports).
void forget_shared_aws_signers();

}  // namespace ferry::detail
