// libcurl glue: global initialisation, the shared DNS/TLS-session cache, the handle pool and
// one request.
#include "backend/http/http_client.hpp"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <strings.h>
#include <random>
#include <thread>

#include "backend/location.hpp"
#include "ferry/error.hpp"
#include "os/fork_safe_mutex.hpp"
#include "stop.hpp"

namespace ferry::detail {
namespace {

// curl_global_init is not thread safe: call it once, before any handle exists.
void global_init() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One share object for the process (never freed: handles may outlive any owner at exit).
struct share_state {
    CURLSH* share = nullptr;
    std::array<std::mutex, CURL_LOCK_DATA_LAST> locks;
};

share_state& shared() {
    static share_state* s = [] {
        global_init();
        auto* st = new share_state;
        st->share = curl_share_init();
        if (st->share) {
            curl_share_setopt(st->share, CURLSHOPT_LOCKFUNC,
                              +[](CURL*, curl_lock_data data, curl_lock_access, void* p) {
                                  static_cast<share_state*>(p)->locks[data].lock();
                              });
            curl_share_setopt(st->share, CURLSHOPT_UNLOCKFUNC, +[](CURL*, curl_lock_data data, void* p) {
                static_cast<share_state*>(p)->locks[data].unlock();
            });
            curl_share_setopt(st->share, CURLSHOPT_USERDATA, st);
            curl_share_setopt(st->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
            curl_share_setopt(st->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
        }
        return st;
    }();
    return *s;
}

// Idle handles by host. Bounded per host: beyond that many idle handles (each holds a
// connection and a 512 KiB receive buffer), a returned handle is closed.
constexpr std::size_t max_idle_per_host = 64;

// An easy handle with a multi handle of its own, which keeps its kept-alive connection. The
// transfer runs through the multi handle so the waiting thread can look at its stop flag every
// few milliseconds: curl_easy_perform calls its progress function as rarely as once a second
// while no byte arrives, so a Ctrl-C against a stalled server waited that long.
struct pooled {
    CURL* easy = nullptr;
    CURLM* multi = nullptr;
};

struct handle_pool {
    pid_t owner = ::getpid();
    std::map<std::string, std::vector<pooled>> idle;
};
fork_safe_mutex pool_mutex;  // never left taken in a forked child
handle_pool& pool() {
    static auto* p = new handle_pool;  // never destroyed: handles may be returned during exit
    return *p;
}

// "scheme://host:port" of a URL (userinfo dropped), the key of the pool.
std::string authority_of(const std::string& url) {
    const location where(url);
    return where.is_url() ? where.origin() : url;
}

void close_handle(pooled h) noexcept {
    if (h.multi) curl_multi_cleanup(h.multi);
    if (h.easy) curl_easy_cleanup(h.easy);
}

pooled acquire(const std::string& key) {
    {
        std::lock_guard lock(pool_mutex);
        handle_pool& p = pool();
        if (p.owner != ::getpid()) {
            // A forked child: the handles' sockets are its parent's too. Forget them (a cleanup
            // would shut down the parent's TLS sessions) and start over.
            p.idle.clear();
            p.owner = ::getpid();
        }
        auto it = p.idle.find(key);
        if (it != p.idle.end() && !it->second.empty()) {
            pooled h = it->second.back();
            it->second.pop_back();
            return h;
        }
    }
    pooled h{curl_easy_init(), curl_multi_init()};
    if (!h.easy || !h.multi) {
        close_handle(h);
        return {};
    }
    return h;
}

void release(const std::string& key, pooled h) noexcept {
    {
        std::lock_guard lock(pool_mutex);
        handle_pool& p = pool();
        if (p.owner == ::getpid()) {
            std::vector<pooled>& v = p.idle[key];
            if (v.size() < max_idle_per_host) {
                v.push_back(h);
                return;
            }
        } else {
            return;  // taken in the parent: never touch it here
        }
    }
    close_handle(h);
}

// Runs the transfer of `h`, stopping it when this thread's stop flag asks (the return is then
// CURLE_ABORTED_BY_CALLBACK). The wait is at most 20 ms between looks at the flag.
CURLcode run_transfer(pooled h, bool& stopped) {
    stopped = false;
    if (curl_multi_add_handle(h.multi, h.easy) != CURLM_OK) return CURLE_FAILED_INIT;
    CURLcode rc = CURLE_OK;
    for (;;) {
        int running = 0;
        if (curl_multi_perform(h.multi, &running) != CURLM_OK) {
            rc = CURLE_FAILED_INIT;
            break;
        }
        if (running == 0) {
            int left = 0;
            rc = CURLE_GOT_NOTHING;
            while (CURLMsg* m = curl_multi_info_read(h.multi, &left))
                if (m->msg == CURLMSG_DONE && m->easy_handle == h.easy) rc = m->data.result;
            break;
        }
        if (stop_requested()) {
            stopped = true;
            rc = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        if (curl_multi_poll(h.multi, nullptr, 0, 20, nullptr) != CURLM_OK) {
            rc = CURLE_FAILED_INIT;
            break;
        }
    }
    // Removed mid-transfer, the handle's connection is closed rather than kept.
    curl_multi_remove_handle(h.multi, h.easy);
    return rc;
}

struct exchange {
    const http_request* request;
    http_response* response;
    CURL* handle;
    bool headers_checked = false;
    bool to_sink = false;
    bool to_consumer = false;
};

std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    std::size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    return s.substr(i);
}

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
    auto* x = static_cast<exchange*>(user);
    std::string line(data, size * count);
    // A status line starts a new response (redirects, 100-continue): forget the earlier headers.
    if (line.rfind("HTTP/", 0) == 0) {
        x->response->headers.clear();
        return size * count;
    }
    auto colon = line.find(':');
    if (colon == std::string::npos) return size * count;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    x->response->headers[name] = trim(line.substr(colon + 1));
    return size * count;
}

constexpr std::size_t max_error_body = 64 << 10;

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
    auto* x = static_cast<exchange*>(user);
    std::size_t n = size * count;
    http_response& r = *x->response;
    if (!x->headers_checked) {
        x->headers_checked = true;
        long status = 0;
        curl_easy_getinfo(x->handle, CURLINFO_RESPONSE_CODE, &status);
        r.status = static_cast<int>(status);
        bool ok = status >= 200 && status < 300;
        if (ok && x->request->accept) {
            r.refused = x->request->accept(r.status, r.headers);
            if (!r.refused.empty()) return 0;  // abort before a byte lands
        }
        x->to_consumer = ok && static_cast<bool>(x->request->consume);
        x->to_sink = ok && !x->to_consumer && x->request->sink != nullptr;
    }
    std::size_t taken = n;  // what curl is told was handled
    if ((x->to_consumer || x->to_sink) && r.skipped < x->request->skip) {
        std::size_t drop = static_cast<std::size_t>(std::min<std::uint64_t>(n, x->request->skip - r.skipped));
        r.skipped += drop;
        data += drop;
        n -= drop;
        if (n == 0) return taken;
    }
    if ((x->to_consumer || x->to_sink) && x->request->end_when_full && n > x->request->sink_capacity - r.received) {
        n = x->request->sink_capacity - r.received;
        r.ended_full = true;
        taken = 0;  // ends the transfer once these bytes are stored
    }
    if (x->to_consumer) {
        if (n > x->request->sink_capacity - r.received) {
            r.refused = "the server sent more bytes than the range holds";
            return 0;
        }
        // No exception may cross curl's C frames: keep it, stop the transfer, rethrow later.
        try {
            x->request->consume(data, n);
        } catch (...) {
            r.consumer_error = std::current_exception();
            r.refused = "the receiver of the bytes failed";
            return 0;
        }
        r.received += n;
        return taken;
    }
    if (x->to_sink) {
        if (n > x->request->sink_capacity - r.received) {
            r.refused = "the server sent more bytes than the range holds";
            return 0;
        }
        std::memcpy(x->request->sink + r.received, data, n);
        r.received += n;
        return taken;
    }
    std::size_t keep = std::min(n, max_error_body - std::min(max_error_body, r.body.size()));
    if (r.status >= 200 && r.status < 300) keep = n;  // a body the caller asked for, no cap
    r.body.append(data, keep);
    return n;
}

}  // namespace

bool http_response::transport_retryable() const noexcept {
    switch (static_cast<CURLcode>(curl_code)) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_PARTIAL_FILE:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
        case CURLE_SSL_CONNECT_ERROR:
            return true;
        default:
            return false;
    }
}

bool http_response::status_retryable() const noexcept {
    return status == 408 || status == 429 || (status >= 500 && status <= 599 && status != 501);
}

std::string http_response::header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
}

std::string http_response::error_code() const {
    auto a = body.find("<Code>");
    if (a == std::string::npos) return {};
    a += 6;
    auto b = body.find("</Code>", a);
    return b == std::string::npos ? std::string() : body.substr(a, b - a);
}

bool http_response::credentials_expired() const {
    if (status != 400 && status != 403) return false;
    std::string c = error_code();
    return c == "ExpiredToken" || c == "ExpiredTokenException" || c == "TokenRefreshRequired";
}

http_client::http_client(const settings& s) : settings_(s.resolved()) { shared(); }

http_response http_client::perform(const http_request& request, const http_auth& auth) {
    http_response response;
    const std::string key = authority_of(request.url);
    throw_if_stopped(shown_location(request.url));
    pooled ph = acquire(key);
    CURL* h = ph.easy;
    if (!h) {
        response.curl_code = CURLE_FAILED_INIT;
        response.curl_error = "curl_easy_init failed";
        return response;
    }
    // reset keeps the handle's live connections and caches; only options go.
    curl_easy_reset(h);
    exchange x{&request, &response, h};
    char error_buffer[CURL_ERROR_SIZE] = {};
    curl_slist* headers = nullptr;
    for (const std::string& line : request.headers) headers = curl_slist_append(headers, line.c_str());
    if (!auth.session_token.empty())
        headers = curl_slist_append(headers, ("x-amz-security-token: " + auth.session_token).c_str());
    if (!auth.sigv4.empty() && auth.sigv4.ends_with(":s3")) {
        // S3 wants the payload hash in a header; curl signs with it when it is present. Other
        // services (STS) take no UNSIGNED-PAYLOAD: curl then hashes the body itself.
        headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    }
    // A body is bytes: without this curl would call it a form, which some servers then parse.
    if (request.method != "GET" && request.method != "HEAD") {
        bool typed = false;
        for (const std::string& line : request.headers)
            if (line.size() > 13 && strncasecmp(line.c_str(), "content-type:", 13) == 0) typed = true;
        if (!typed) headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
    }
    // No "Expect: 100-continue" round trip before a body. Under SigV4 the removal itself would be
    // signed as an empty header the server never sees (libcurl signs the user's header list), so
    // there the wait for "100 Continue" is only kept short instead.
    if (auth.sigv4.empty()) headers = curl_slist_append(headers, "Expect:");

    curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(h, CURLOPT_SHARE, shared().share);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_buffer);
    // HTTP/1.1: parallel ranges should travel on parallel connections, not share one HTTP/2 one.
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(settings_.remote_connect_timeout_ms));
    // A stalled transfer (under 1 byte/s for the stall time) is cut and left to the retry policy.
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     std::max(1L, static_cast<long>(settings_.remote_stall_timeout_ms / 1000)));
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L << 10);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!settings_.remote_ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, settings_.remote_ca_bundle.c_str());
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (request.follow_redirects) {
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(h, CURLOPT_MAXREDIRS, 8L);
        curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    }
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (!request.range.empty()) curl_easy_setopt(h, CURLOPT_RANGE, request.range.c_str());
    if (request.method == "HEAD") {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (request.method != "GET") {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body_size));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body ? request.body : "");
    }
    if (!auth.sigv4.empty()) {
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, auth.sigv4.c_str());
        curl_easy_setopt(h, CURLOPT_USERPWD, auth.user_password.c_str());
    }

    auto start = std::chrono::steady_clock::now();
    bool stopped = false;
    CURLcode rc = run_transfer(ph, stopped);
    response.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    response.status = static_cast<int>(status);
    if ((!response.refused.empty() || response.ended_full) && rc == CURLE_WRITE_ERROR) rc = CURLE_OK;  // our own abort
    response.curl_code = rc;
    if (rc != CURLE_OK) response.curl_error = error_buffer[0] ? error_buffer : curl_easy_strerror(rc);
    // Secrets must not linger in a pooled handle's options.
    curl_easy_setopt(h, CURLOPT_USERPWD, nullptr);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
    curl_slist_free_all(headers);
    release(key, ph);
    if (stopped) throw interrupted_error("interrupted: " + request.method + " " + shown_location(request.url));
    return response;
}

void backoff_sleep(std::size_t attempt, std::size_t first_delay_ms, const std::string& what) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    double cap = std::min(20000.0, static_cast<double>(first_delay_ms) * std::pow(2.0, static_cast<double>(std::min<std::size_t>(attempt, 30))));
    std::uniform_real_distribution<double> pick(0.0, cap);
    sleep_unless_stopped(std::chrono::duration<double, std::milli>(pick(rng)), what);
}

}  // namespace ferry::detail
