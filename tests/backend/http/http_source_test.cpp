// The HTTP source against real servers on 127.0.0.1: nginx for the protocol (ranges, keep-alive,
// many readers at once) and fault_server.py for what networks and servers do wrong.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "backend/http/http_source.hpp"
#include "backend/location.hpp"
#include "backend/remote_servers.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/stop.hpp"

namespace ferry::test {
namespace {

using detail::http_source;

settings quick_settings() {
    settings s;
    s.remote_retry_delay_ms = 5;
    s.remote_retries = 8;
    s.remote_connect_timeout_ms = 2000;
    s.remote_stall_timeout_ms = 2000;
    return s;
}

std::unique_ptr<detail::source> open(const std::string& url, const settings& s = quick_settings()) {
    return detail::open_http_source(detail::location(url), open_mode::read, s);
}

std::vector<std::uint8_t> read_all(detail::source& src, std::uint64_t offset, std::size_t n) {
    std::vector<std::uint8_t> out(n);
    src.read(reinterpret_cast<char*>(out.data()), n, offset, {});
    return out;
}

class nginx_test : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new temp_dir();
        write_pattern_file(*dir_ / "object.bin", size_, 7);
        write_pattern_file(*dir_ / "empty.bin", 0);
        if (nginx_missing().empty()) server_ = new nginx_server(dir_->path());
    }
    void SetUp() override { FERRY_NEED_SERVER(nginx_missing()); }
    static void TearDownTestSuite() {
        delete server_;
        delete dir_;
        server_ = nullptr;
        dir_ = nullptr;
    }
    static inline temp_dir* dir_ = nullptr;
    static inline nginx_server* server_ = nullptr;
    static constexpr std::size_t size_ = (5u << 20) + 12345;
};

TEST_F(nginx_test, size_and_identity_come_from_head) {
    auto src = open(server_->url("object.bin"));
    EXPECT_EQ(src->size(), size_);
    EXPECT_EQ(src->kind(), "http");
    EXPECT_TRUE(src->traits().remote);
    auto& h = dynamic_cast<http_source&>(*src);
    EXPECT_FALSE(h.identity().etag.empty());
    EXPECT_FALSE(h.identity().last_modified.empty());
}

TEST_F(nginx_test, ranged_reads_are_byte_exact) {
    auto src = open(server_->url("object.bin"));
    auto expect = pattern(size_, 0, 7);
    for (auto [off, n] : {std::pair<std::uint64_t, std::size_t>{0, 1}, {1, 4096}, {12345, 1 << 20}, {size_ - 10, 10},
                          {0, size_}}) {
        SCOPED_TRACE(off);
        auto got = read_all(*src, off, n);
        EXPECT_EQ(0, std::memcmp(got.data(), expect.data() + off, n));
    }
}

TEST_F(nginx_test, many_threads_read_at_once_over_reused_connections) {
    auto src = open(server_->url("object.bin"));
    auto expect = pattern(size_, 0, 7);
    std::vector<std::uint8_t> got(size_);
    std::atomic<std::size_t> next{0};
    constexpr std::size_t chunk = 256 << 10;
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&] {
            try {
                for (std::size_t off; (off = next.fetch_add(chunk)) < size_;)
                    src->read(reinterpret_cast<char*>(got.data()) + off, std::min(chunk, size_ - off), off, {});
            } catch (...) {
                ++errors;
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(got, expect);
}

TEST_F(nginx_test, reading_past_the_end_is_an_end_of_file_error) {
    auto src = open(server_->url("object.bin"));
    std::vector<char> buf(100);
    EXPECT_THROW(src->read(buf.data(), 100, size_ - 50, {}), end_of_file_error);
}

TEST_F(nginx_test, an_empty_object_has_size_zero) {
    auto src = open(server_->url("empty.bin"));
    EXPECT_EQ(src->size(), 0u);
}

TEST_F(nginx_test, a_missing_object_is_a_remote_error_with_its_status) {
    try {
        open(server_->url("missing.bin?X-Amz-Signature=deadbeef&X-Amz-Expires=60"));
        FAIL() << "opened";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 404);
        std::string what = e.what();
        EXPECT_NE(what.find("missing.bin"), std::string::npos) << what;
        EXPECT_NE(what.find("404"), std::string::npos) << what;
        EXPECT_EQ(what.find("deadbeef"), std::string::npos) << what;
        EXPECT_EQ(e.url().find("deadbeef"), std::string::npos);
    }
}

TEST(http_source, a_refused_connection_is_a_remote_error_without_status) {
    settings s = quick_settings();
    s.remote_retries = 1;
    int port = free_port();
    try {
        open("http://user:hunter2@127.0.0.1:" + std::to_string(port) + "/x", s);
        FAIL() << "opened";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 0);
        EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos) << e.what();
    }
}

TEST(http_source, tls_is_verified_by_default) {
    // nginx over TLS with a self-signed certificate for 127.0.0.1: refused by default (the
    // system's CAs do not know it), read once FERRY_REMOTE_CA_BUNDLE names it. Never a fallback.
    FERRY_NEED_SERVER(nginx_missing());
    temp_dir dir;
    write_pattern_file(dir / "a.bin", 10000, 4);
    std::string cert = dir / "cert.pem", key = dir / "key.pem";
    std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -addext "
                      "subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) FERRY_NEED_SERVER("openssl cannot make a test certificate");
    nginx_server server(dir.path(), cert, key);
    std::string url = "https://127.0.0.1:" + std::to_string(server.port()) + "/a.bin";
    settings s = quick_settings();
    s.remote_retries = 0;
    try {
        open(url, s);
        FAIL() << "an unknown certificate was accepted";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 0);
        EXPECT_NE(std::string(e.what()).find("certificate"), std::string::npos) << e.what();
    }
    s.remote_ca_bundle = cert;
    auto src = open(url, s);
    EXPECT_EQ(read_all(*src, 0, 10000), pattern(10000, 0, 4));
}

// The fault server: one per suite, fresh paths per test so its counters start at zero.
class fault_test : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new temp_dir();
        write_pattern_file(*dir_ / "object.bin", size_, 3);
        server_ = new python_server({backend_test_dir() + "/http/fault_server.py", "--file", *dir_ / "object.bin"});
    }
    static void TearDownTestSuite() {
        delete server_;
        delete dir_;
        server_ = nullptr;
        dir_ = nullptr;
    }
    std::string url(const std::string& path) const {
        return server_->url(path + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    }
    void expect_whole(detail::source& src) {
        auto got = read_all(src, 0, size_);
        EXPECT_EQ(got, pattern(size_, 0, 3));
    }
    static inline temp_dir* dir_ = nullptr;
    static inline python_server* server_ = nullptr;
    static constexpr std::size_t size_ = (1u << 20) + 777;
};

TEST_F(fault_test, a_dropped_connection_resumes_where_it_stopped) {
    auto src = open(url("/drop/1"));
    expect_whole(*src);
    EXPECT_GE(dynamic_cast<http_source&>(*src).retries(), 1u);
}

TEST_F(fault_test, a_short_body_resumes_where_it_stopped) {
    auto src = open(url("/short/3"));
    expect_whole(*src);
    EXPECT_GE(dynamic_cast<http_source&>(*src).retries(), 1u);
}

TEST_F(fault_test, reset_connections_are_retried) {
    auto src = open(url("/reset/3"));
    expect_whole(*src);
}

TEST_F(fault_test, a_503_storm_is_retried_with_backoff) {
    auto src = open(url("/storm/5"));
    expect_whole(*src);
    EXPECT_GE(dynamic_cast<http_source&>(*src).retries(), 5u);
}

TEST_F(fault_test, retries_are_bounded) {
    settings s = quick_settings();
    s.remote_retries = 3;
    try {
        open(url("/always/503"), s);
        FAIL() << "opened";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 503);
    }
}

TEST_F(fault_test, a_4xx_is_not_retried) {
    try {
        open(url("/always/404"));
        FAIL() << "opened";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 404);
    }
}

// What the staged mover does with a streamed range, on the host: bytes arrive in pieces, in
// order, each once, also when the transfer breaks and resumes.
struct collecting_sink : detail::byte_sink {
    std::vector<std::uint8_t> got;
    std::size_t pieces = 0;
    std::size_t throw_after = SIZE_MAX;  // bytes after which consume() throws
    void consume(const char* data, std::size_t n) override {
        if (got.size() + n > throw_after) throw usage_error("the receiver gave up");
        got.insert(got.end(), data, data + n);
        ++pieces;
    }
};

TEST_F(fault_test, streamed_ranges_resume_and_deliver_each_byte_once) {
    for (const char* fault : {"/ok", "/drop/1", "/short/3", "/reset/3"}) {
        SCOPED_TRACE(fault);
        auto src = open(url(fault));
        ASSERT_TRUE(src->traits().streams);
        collecting_sink sink;
        const std::size_t off = 12345, n = size_ - 2 * off;
        src->read_stream(n, off, sink, {});
        EXPECT_EQ(sink.got, pattern(n, off, 3));
        EXPECT_GE(sink.pieces, 1u);
    }
}

TEST_F(fault_test, a_failing_receiver_stops_a_streamed_range) {
    auto src = open(url("/ok"));
    collecting_sink sink;
    sink.throw_after = 100000;
    EXPECT_THROW(src->read_stream(size_, 0, sink, {}), usage_error);
    EXPECT_LE(sink.got.size(), 100000u);
    EXPECT_EQ(dynamic_cast<http_source&>(*src).retries(), 0u);  // its error, not the network's
}

TEST_F(fault_test, an_object_changed_mid_read_is_an_error_never_mixed_bytes) {
    auto src = open(url("/change/2"));
    std::vector<char> buf(4096);
    src->read(buf.data(), buf.size(), 0, {});
    src->read(buf.data(), buf.size(), 4096, {});
    try {
        src->read(buf.data(), buf.size(), 8192, {});
        FAIL() << "read bytes of a changed object";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 412);
        EXPECT_NE(std::string(e.what()).find("changed"), std::string::npos) << e.what();
    }
}

TEST_F(fault_test, without_etag_last_modified_guards_the_object) {
    auto src = open(url("/noetag"));
    EXPECT_TRUE(dynamic_cast<http_source&>(*src).identity().etag.empty());
    expect_whole(*src);
}

TEST_F(fault_test, a_refused_head_falls_back_to_a_ranged_get) {
    auto src = open(url("/nohead"));
    EXPECT_EQ(src->size(), size_);
    expect_whole(*src);
}

TEST_F(fault_test, a_server_that_ignores_ranges_is_read_with_plain_gets) {
    // It says "Accept-Ranges: bytes" and then answers each range with the whole object: the
    // first such answer switches the source to plain GETs, the bytes before the range dropped.
    auto src = open(url("/norange"));
    EXPECT_TRUE(src->traits().ranged);
    auto part = read_all(*src, 10, 100);
    EXPECT_EQ(part, pattern(100, 10, 3));
    EXPECT_FALSE(src->traits().ranged);
    EXPECT_EQ(src->traits().concurrency, 1u);
    EXPECT_EQ(read_all(*src, size_ - 5000, 5000), pattern(5000, size_ - 5000, 3));
    expect_whole(*src);
    EXPECT_EQ(dynamic_cast<http_source&>(*src).retries(), 0u);
}

// ferry::stop_scope: a slow transfer and the retries against a dead server end soon after the
// stop is asked for, with interrupted_error, and the source reads again afterwards.
template <class F>
double seconds_until_stopped(F&& work, std::chrono::milliseconds ask_after, std::string* said = nullptr) {
    stop_source stop;
    std::atomic<double> stopped_after{-1};
    std::string message;
    std::thread t([&] {
        stop_scope scope(stop);
        try {
            work();
        } catch (const interrupted_error& e) {
            message = e.what();
        }
    });
    std::this_thread::sleep_for(ask_after);
    auto asked = std::chrono::steady_clock::now();
    stop.request_stop();
    t.join();
    EXPECT_NE(message.find("interrupted"), std::string::npos) << message;
    EXPECT_EQ(message.find("s3cr3t"), std::string::npos) << message;
    if (said) *said = message;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
}

TEST_F(fault_test, a_stop_ends_a_slow_read_within_100_ms) {
    // 64 KiB/s: the object takes 16 s.
    auto src = open(url("/slow/65536") + "?sig=s3cr3t");
    double took = seconds_until_stopped([&] { read_all(*src, 0, size_); }, std::chrono::milliseconds(300));
    EXPECT_LT(took, 0.1);
    EXPECT_EQ(read_all(*src, 0, 1000), pattern(1000, 0, 3));  // still usable
}

TEST(http_source, a_stop_ends_the_retries_against_a_dead_server) {
    settings s = quick_settings();
    s.remote_retry_delay_ms = 1000;  // backoffs of up to seconds
    std::string dead = "http://127.0.0.1:" + std::to_string(free_port()) + "/x?sig=s3cr3t";
    std::string said;
    double took = seconds_until_stopped([&] { open(dead, s); }, std::chrono::milliseconds(300), &said);
    EXPECT_LT(took, 0.1);
    EXPECT_NE(said.find("waiting to retry http://127.0.0.1:"), std::string::npos) << said;
}

// python3 -m http.server: no Range support and no "Accept-Ranges" (as many simple object
// gateways). Each read is one plain GET, still checked against the object's size and identity.
class plain_server_test : public ::testing::Test {
protected:
    void SetUp() override {
        write_pattern_file(dir_ / "small.bin", 168, 5);
        write_pattern_file(dir_ / "large.bin", large_, 9);
        for (int attempt = 0; attempt < 5 && !server_; ++attempt) {
            port_ = free_port();
            server_ = std::make_unique<child>(std::vector<std::string>{
                python(), "-m", "http.server", std::to_string(port_), "--bind", "127.0.0.1", "--directory", dir_.path()});
            if (!wait_for_port(port_, 20, server_.get())) server_.reset();
        }
        ASSERT_TRUE(server_) << "python3 -m http.server did not start";
    }
    std::string url(const std::string& name) const {
        return "http://127.0.0.1:" + std::to_string(port_) + "/" + name;
    }
    temp_dir dir_;
    std::unique_ptr<child> server_;
    int port_ = 0;
    static constexpr std::size_t large_ = (3u << 20) + 321;
};

TEST_F(plain_server_test, an_object_is_read_with_one_plain_get_per_read) {
    auto src = open(url("small.bin"));
    EXPECT_FALSE(dynamic_cast<http_source&>(*src).identity().ranges);
    EXPECT_FALSE(src->traits().ranged);
    EXPECT_EQ(src->traits().concurrency, 1u);
    EXPECT_EQ(src->size(), 168u);
    EXPECT_EQ(read_all(*src, 0, 168), pattern(168, 0, 5));
    EXPECT_EQ(read_all(*src, 10, 100), pattern(100, 10, 5));
    EXPECT_THROW(read_all(*src, 100, 100), end_of_file_error);

    auto big = open(url("large.bin"));
    EXPECT_EQ(read_all(*big, 1u << 20, 1u << 20), pattern(1u << 20, 1u << 20, 9));
    collecting_sink sink;
    big->read_stream(1000, large_ - 1000, sink, {});
    EXPECT_EQ(sink.got, pattern(1000, large_ - 1000, 9));
}

TEST_F(plain_server_test, the_plan_says_so_and_the_engine_reads_it_whole) {
    file f(url("large.bin"), open_mode::read);
    std::vector<std::uint8_t> got(large_);
    EXPECT_EQ(f.read(got.data(), got.size(), 0), large_);
    EXPECT_EQ(got, pattern(large_, 0, 9));
    bool said = false;
    for (const auto& r : f.plan().reasons) said = said || r.find("no Range support") != std::string::npos;
    EXPECT_TRUE(said);
}

TEST_F(plain_server_test, an_object_changed_since_open_is_an_error) {
    auto src = open(url("small.bin"));
    write_pattern_file(dir_ / "small.bin", 200, 6);
    try {
        read_all(*src, 0, 100);
        FAIL() << "read a changed object";
    } catch (const remote_error& e) {
        EXPECT_NE(std::string(e.what()).find("changed since it was opened"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("/small.bin"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace ferry::test
