// Renewing temporary credentials, and the process-wide signers (see credential_provider.hpp).
#include "backend/s3/credential_provider.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <map>

#include "ferry/error.hpp"
#include "log.hpp"
#include "os/fork_safe_mutex.hpp"

namespace ferry::detail {
namespace {

using namespace std::chrono_literals;

// The AWS SDKs renew 5 to 15 minutes early; half the lifetime covers credentials shorter than
// that (and keeps a renewal from landing after a slow request has started with old ones).
constexpr auto renew_margin = 5min;
constexpr auto min_gap = 1s;

std::string iso(aws_signer::clock::time_point t) {
    std::time_t tt = aws_signer::clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

http_auth auth_of(const aws_credentials& c, const std::string& region) {
    http_auth a;
    a.label = c.source;
    if (!c.anonymous()) {
        a.sigv4 = "aws:amz:" + region + ":s3";
        a.user_password = c.access_key + ":" + c.secret_key;
        a.session_token = c.session_token;
    }
    return a;
}

}  // namespace

aws_signer::aws_signer(aws_credentials first, std::string region, std::vector<std::string> chain,
                       const settings& s)
    : region_(std::move(region)), chain_(std::move(chain)), settings_(s) {
    install(std::move(first), clock::now());
}

void aws_signer::install(aws_credentials c, clock::time_point now) {
    expires_.reset();
    renew_at_.reset();
    if (auto e = parse_aws_time(c.expiration)) {
        expires_ = *e;
        if (c.refresh) renew_at_ = std::max(now + (*e - now) / 2, *e - renew_margin);
    }
    auth_ = auth_of(c, region_);
    creds_ = std::move(c);
    next_attempt_ = now + min_gap;
}

void aws_signer::refresh_locked(std::unique_lock<std::mutex>& lock, bool forced) {
    if (refreshing_) {
        renewed_.wait(lock, [&] { return !refreshing_; });
        return;
    }
    refreshing_ = true;
    std::function<aws_credentials()> again = creds_.refresh;
    lock.unlock();
    aws_credentials fresh;
    std::exception_ptr err;
    try {
        fresh = again();
    } catch (...) {
        err = std::current_exception();
    }
    lock.lock();
    refreshing_ = false;
    auto now = clock::now();
    if (!err) {
        // A refresh that says nothing new about its link keeps the old one's way to refresh.
        if (!fresh.refresh) fresh.refresh = std::move(again);
        install(std::move(fresh), now);
        ++renewals_;
        if (log_enabled(log_level::info, settings_))
            log(log_level::info, settings_,
                "credentials from " + creds_.source + " renewed" +
                    (expires_ ? ", valid until " + iso(*expires_) : std::string()));
    } else {
        next_attempt_ = now + min_gap;
    }
    renewed_.notify_all();
    // Credentials still valid outlive a failed renewal (it is tried again a second later); once
    // they are gone, or when the server already refused them, the failure is the answer.
    if (err && (forced || (expires_ && now >= *expires_))) std::rethrow_exception(err);
    if (err && log_enabled(log_level::warn, settings_)) {
        try {
            std::rethrow_exception(err);
        } catch (const std::exception& e) {
            log(log_level::warn, settings_,
                "renewing credentials from " + creds_.source + " failed, the current ones still hold: " + e.what());
        }
    }
}

http_auth aws_signer::current() {
    std::unique_lock lock(mutex_);
    if (!creds_.refresh || !renew_at_) return auth_;
    auto now = clock::now();
    if (now < *renew_at_) return auth_;
    const bool expired = expires_ && now >= *expires_;
    if (refreshing_ && !expired) return auth_;  // another thread renews; these still hold
    if (!refreshing_ && now < next_attempt_) return auth_;
    refresh_locked(lock, false);
    return auth_;
}

bool aws_signer::renew(const http_auth& used) {
    std::unique_lock lock(mutex_);
    if (auth_.user_password != used.user_password || auth_.session_token != used.session_token)
        return true;  // renewed meanwhile by another reader
    if (!creds_.refresh) return false;
    // The server's word beats the throttle: readers ask at most once per range, and readers
    // that hit the same refusal meanwhile find the new credentials above.
    refresh_locked(lock, true);
    return auth_.user_password != used.user_password || auth_.session_token != used.session_token;
}

aws_credentials aws_signer::credentials() const {
    std::lock_guard lock(mutex_);
    return creds_;
}

std::optional<aws_signer::clock::time_point> aws_signer::expires() const {
    std::lock_guard lock(mutex_);
    return expires_;
}

std::optional<aws_signer::clock::time_point> aws_signer::renews_at() const {
    std::lock_guard lock(mutex_);
    return renew_at_;
}

bool aws_signer::temporary() const {
    std::lock_guard lock(mutex_);
    return static_cast<bool>(creds_.refresh);
}

std::uint64_t aws_signer::renewals() const {
    std::lock_guard lock(mutex_);
    return renewals_;
}

namespace {

// What the chain reads, besides the files: a change in any of these is another chain.
constexpr const char* chain_variables[] = {
    "HOME", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_REGION", "AWS_DEFAULT_REGION",
    "AWS_NO_SIGN_REQUEST", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
    "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_DISABLED", "AWS_EC2_METADATA_SERVICE_ENDPOINT"};

std::string file_stamp(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return "-";
    return std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec);
}

struct signer_cache {
    pid_t owner = ::getpid();
    std::map<std::string, std::shared_ptr<aws_signer>> by_inputs;
};
fork_safe_mutex cache_mutex;
signer_cache& cache() {
    static auto* c = new signer_cache;  // never destroyed: objects may be opened at exit
    return *c;
}

}  // namespace

std::shared_ptr<aws_signer> shared_aws_signer(const s3_options& o, const env_lookup& env,
                                              const std::string& location, const settings& s) {
    auto make = [&] {
        std::vector<std::string> chain;
        aws_credentials c = resolve_aws_credentials(o, env, location, &chain);
        return std::make_shared<aws_signer>(std::move(c), resolve_aws_region(o, env), std::move(chain), s);
    };
    if (!o.access_key.empty() || !o.secret_key.empty()) return make();
    // The key holds values (secrets among them) only in this process's memory; it is never shown.
    std::string key = std::string(o.unsigned_requests ? "U" : "S") + '\0' + o.profile + '\0' + o.region;
    for (const char* v : chain_variables) key += '\0' + env(v).value_or("\x01");
    aws_profile p = load_aws_profile(env, o.profile);
    key += '\0' + file_stamp(p.credentials_path) + '\0' + file_stamp(p.config_path);
    {
        std::lock_guard lock(cache_mutex);
        signer_cache& c = cache();
        if (c.owner != ::getpid()) c.by_inputs.clear(), c.owner = ::getpid();
        if (auto it = c.by_inputs.find(key); it != c.by_inputs.end()) return it->second;
    }
    // Walked outside the lock (it may ask STS or a metadata endpoint); two first uses at once
    // both walk it and the first to finish is kept.
    std::shared_ptr<aws_signer> made = make();
    std::lock_guard lock(cache_mutex);
    return cache().by_inputs.emplace(key, made).first->second;
}

void forget_shared_aws_signers() {
    std::lock_guard lock(cache_mutex);
    cache().by_inputs.clear();
}

}  // namespace ferry::detail
