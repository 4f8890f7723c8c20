// The backend conformance suite: the same read / write / short-read / EOF / unaligned /
// concurrent checks against every I/O path and every kind of memory, and over the remote
// sources: http:// (nginx) and s3:// (moto) on 127.0.0.1, skipped with the reason where the
// server is missing (failed under FERRY_REQUIRE_SERVERS=1, as the other server tests).
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "backend/io_uring/io_uring_source.hpp"
#include "backend/memory_source.hpp"
#include "backend/remote_servers.hpp"
#include "ferry/ferry.hpp"
#include "shim/cufile.hpp"
#include "shim/cufile_test_util.hpp"
#include "test_util.hpp"

namespace {

using ferry::io_path;
using ferry::memory_kind;

/// Where the suite's file lives: on local disk, or served over the loopback.
enum class served { locally, http, s3 };

struct path_case {
    const char* name;
    memory_kind memory;
    ferry::gds_mode gds;
    ferry::direct_io_mode direct;
    io_path expected;
    /// Plain paths open the test-only memory source (tests/backend/memory_source.cpp) instead
    /// of the local file: the same checks over a source that is not a POSIX descriptor.
    bool memory_source = false;
    served from = served::locally;
    /// FERRY_IO_URING=on: local reads through the io_uring source (src/backend/io_uring/).
    bool io_uring = false;
};

// Test listings name the parameter, not its bytes.
void PrintTo(const path_case& c, std::ostream* os) { *os << c.name; }

const path_case cases[] = {
    {"host_pageable", memory_kind::host, ferry::gds_mode::off, ferry::direct_io_mode::off, io_path::host},
    {"host_pinned", memory_kind::pinned, ferry::gds_mode::off, ferry::direct_io_mode::off, io_path::host},
    {"direct_pageable", memory_kind::host, ferry::gds_mode::off, ferry::direct_io_mode::on, io_path::direct},
    {"staged_device", memory_kind::device, ferry::gds_mode::off, ferry::direct_io_mode::off, io_path::staged},
    {"staged_managed", memory_kind::managed, ferry::gds_mode::off, ferry::direct_io_mode::off, io_path::staged},
    {"staged_direct_device", memory_kind::device, ferry::gds_mode::off, ferry::direct_io_mode::on,
     io_path::staged_direct},
    {"cufile_device", memory_kind::device, ferry::gds_mode::on, ferry::direct_io_mode::off, io_path::cufile_compat},
    {"memory_source_pageable", memory_kind::host, ferry::gds_mode::off, ferry::direct_io_mode::off, io_path::host,
     true},
    {"memory_source_pinned", memory_kind::pinned, ferry::gds_mode::off, ferry::direct_io_mode::off, io_path::host,
     true},
    {"memory_source_device", memory_kind::device, ferry::gds_mode::auto_, ferry::direct_io_mode::auto_,
     io_path::staged, true},
    {"io_uring_pageable", memory_kind::host, ferry::gds_mode::off, ferry::direct_io_mode::off, io_path::host, false,
     served::locally, true},
    {"io_uring_pinned", memory_kind::pinned, ferry::gds_mode::off, ferry::direct_io_mode::off, io_path::host, false,
     served::locally, true},
    {"io_uring_staged_device", memory_kind::device, ferry::gds_mode::off, ferry::direct_io_mode::off,
     io_path::staged, false, served::locally, true},
    {"http_pageable", memory_kind::host, ferry::gds_mode::auto_, ferry::direct_io_mode::auto_, io_path::host, false,
     served::http},
    {"http_device", memory_kind::device, ferry::gds_mode::auto_, ferry::direct_io_mode::auto_, io_path::staged,
     false, served::http},
    {"s3_pageable", memory_kind::host, ferry::gds_mode::auto_, ferry::direct_io_mode::auto_, io_path::host, false,
     served::s3},
    {"s3_device", memory_kind::device, ferry::gds_mode::auto_, ferry::direct_io_mode::auto_, io_path::staged, false,
     served::s3},
};

constexpr std::size_t file_size = 24u << 20;

// The servers and the file they serve, started on first use and kept for the whole run (moto
// takes seconds to start): one pattern file, under nginx's root and as s3://conformance/data.bin.
class remote_files {
public:
    static remote_files& get() {
        static remote_files r;
        return r;
    }
    /// Why `from` cannot serve the file here, or "".
    std::string missing(served from) {
        std::lock_guard lock(mutex_);
        if (from == served::http) {
            if (std::string why = ferry::test::nginx_missing(); !why.empty()) return why;
            if (!nginx_) nginx_ = std::make_unique<ferry::test::nginx_server>(dir_.path());
        } else {
            if (const std::string& why = ferry::test::moto_missing(); !why.empty()) return why;
            if (!moto_) {
                moto_ = std::make_unique<ferry::test::moto_server>();
                std::string admin = ferry::test::python() + " " + ferry::test::backend_test_dir() +
                                    "/s3/moto_admin.py " + moto_->endpoint() + " ";
                if (std::system((admin + "create-bucket conformance").c_str()) != 0 ||
                    std::system((admin + "put conformance data.bin " + dir_ / "data.bin").c_str()) != 0)
                    return "could not put the object into moto";
            }
        }
        return {};
    }
    std::string location(served from) const {
        return from == served::http ? nginx_->url("data.bin") : std::string("s3://conformance/data.bin");
    }
    std::string s3_endpoint() const { return moto_->endpoint(); }

private:
    remote_files() { ferry::test::write_pattern_file(dir_ / "data.bin", file_size); }
    std::mutex mutex_;
    ferry::test::temp_dir dir_;
    std::unique_ptr<ferry::test::nginx_server> nginx_;
    std::unique_ptr<ferry::test::moto_server> moto_;
};

// Environment variables for one test, the old values put back after it.
class scoped_env {
public:
    void set(const std::string& name, const std::string& value) {
        const char* old = std::getenv(name.c_str());
        saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
        ::setenv(name.c_str(), value.c_str(), 1);
    }
    ~scoped_env() {
        for (auto it = saved_.rbegin(); it != saved_.rend(); ++it)
            if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
            else ::unsetenv(it->first.c_str());
    }

private:
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Memory of one kind, with a view that can be filled and checked from the host.
class buffer {
public:
    buffer(memory_kind k, std::size_t n) : kind_(k), n_(n) {
        switch (k) {
            case memory_kind::host: host_.resize(n + 64); break;
            case memory_kind::pinned: pinned_ = ferry::pinned_buffer(n + 64); break;
            case memory_kind::device: device_ = ferry::device_buffer(n + 64); break;
            case memory_kind::managed:
                if (cudaMallocManaged(&managed_, n + 64) != cudaSuccess) throw std::runtime_error("cudaMallocManaged");
                break;
        }
    }
    ~buffer() {
        if (managed_) cudaFree(managed_);
    }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    char* base() {
        switch (kind_) {
            case memory_kind::host: return reinterpret_cast<char*>(host_.data());
            case memory_kind::pinned: return static_cast<char*>(pinned_.data());
            case memory_kind::managed: return static_cast<char*>(managed_);
            default: return static_cast<char*>(device_.data());
        }
    }
    std::vector<std::uint8_t> to_host(std::size_t at, std::size_t n) {
        std::vector<std::uint8_t> v(n);
        ferry::copy_memory(v.data(), base() + at, n);
        return v;
    }
    void from_host(std::size_t at, const std::vector<std::uint8_t>& v) {
        ferry::copy_memory(base() + at, v.data(), v.size());
    }

private:
    memory_kind kind_;
    std::size_t n_;
    std::vector<std::uint8_t> host_;
    ferry::pinned_buffer pinned_;
    ferry::device_buffer device_;
    void* managed_ = nullptr;
};

class conformance : public ::testing::TestWithParam<path_case> {
protected:
    void SetUp() override {
        const path_case& c = GetParam();
        if (c.memory != memory_kind::host) FERRY_REQUIRE_GPU();
        s_.gds = c.gds;
        s_.direct_io = c.direct;
        s_.threads = 4;
        s_.staging_buffer_size = 1 << 20;
        s_.task_size = 2 << 20;
        s_.gds_threshold = 0;
        if (c.from != served::locally) {
            FERRY_NEED_SERVER(remote_files::get().missing(c.from));
            path_ = remote_files::get().location(c.from);
            if (c.from == served::s3) {
                env_.set("AWS_ENDPOINT_URL", remote_files::get().s3_endpoint());
                env_.set("AWS_ACCESS_KEY_ID", "testing");
                env_.set("AWS_SECRET_ACCESS_KEY", "testing");
                env_.set("AWS_EC2_METADATA_DISABLED", "true");
            }
            return;
        }
        path_ = dir_ / "data.bin";
        ferry::test::write_pattern_file(path_, file_size);
        if (c.gds == ferry::gds_mode::on) {
            // Where cuFile cannot serve this file (no driver, no udev record of the disk, an
            // unsupported file system), every test here would fail for that one reason.
            std::string why = ferry::test::cufile_unusable_reason(s_.cufile_library, path_);
            if (!why.empty()) GTEST_SKIP() << why;
        }
        if (c.memory_source) ferry::test::register_memory_source("file");
        if (c.io_uring) {
            s_.io_uring = ferry::io_uring_mode::on;
            s_.io_uring_queue_depth = 8;
            // Where the kernel (or a container's seccomp profile) refuses io_uring, every test
            // here would fail for that one reason.
            if (auto no = ferry::detail::io_uring_probe(s_)) GTEST_SKIP() << no->text;
        }
    }
    void TearDown() override {
        if (GetParam().memory_source) ferry::test::restore_local_files();
    }

    scoped_env env_;
    ferry::test::temp_dir dir_;
    std::string path_;
    ferry::settings s_;
};

TEST_P(conformance, reads_every_offset_length_and_alignment) {
    const path_case& c = GetParam();
    ferry::file f(path_, ferry::open_mode::read, s_);
    const std::uint64_t offsets[] = {0, 1, 511, 4095, 4096, (3u << 20) + 5};
    const std::size_t lengths[] = {0, 1, 4097, (3u << 20) + 7, 17u << 20};
    const std::size_t misalign[] = {0, 1, 3};
    buffer buf(c.memory, 20u << 20);
    for (auto off : offsets)
        for (auto len : lengths)
            for (auto mis : misalign) {
                if (off + len > file_size) continue;
                SCOPED_TRACE("offset " + std::to_string(off) + " length " + std::to_string(len) + " misalign " +
                             std::to_string(mis));
                ASSERT_EQ(f.read(buf.base() + mis, len, off), len);
                ASSERT_EQ(buf.to_host(mis, len), ferry::test::pattern(len, off));
            }
    EXPECT_GT(f.stats().reads(c.expected).bytes, 0u) << "expected path " << ferry::to_string(c.expected);
    if (c.io_uring) {
        const ferry::io_stats st = f.stats();
        const ferry::route_stats* r = st.route("io_uring", c.expected == io_path::staged ? "staged" : "host");
        ASSERT_NE(r, nullptr) << "the reads went through io_uring";
        EXPECT_GT(r->read.bytes, 0u);
    }
}

TEST_P(conformance, reading_past_the_end_is_an_error) {
    const path_case& c = GetParam();
    ferry::file f(path_, ferry::open_mode::read, s_);
    buffer buf(c.memory, 2u << 20);
    EXPECT_THROW(f.read(buf.base(), 2u << 20, file_size - 100), ferry::end_of_file_error);
    EXPECT_THROW(f.read(buf.base(), 1, file_size), ferry::end_of_file_error);
    EXPECT_THROW(f.read_async(buf.base(), 1, file_size + 10).get(), ferry::end_of_file_error);
}

TEST_P(conformance, read_some_stops_at_the_end) {
    const path_case& c = GetParam();
    ferry::file f(path_, ferry::open_mode::read, s_);
    buffer buf(c.memory, 3u << 20);
    std::uint64_t off = file_size - (1u << 20) - 3;
    EXPECT_EQ(f.read_some(buf.base(), 3u << 20, off), (1u << 20) + 3);
    EXPECT_EQ(buf.to_host(0, (1u << 20) + 3), ferry::test::pattern((1u << 20) + 3, off));
    EXPECT_EQ(f.read_some(buf.base(), 10, file_size), 0u);
}

// Byte-range writes, over the cases whose source writes byte ranges: http(s) objects are read
// only, and an S3 object is written whole by one multipart upload, each byte once
// (remote_file_test and s3_source_test check those writes).
class conformance_writes : public conformance {};

std::vector<path_case> writing_cases() {
    std::vector<path_case> v;
    for (const path_case& c : cases)
        if (c.from == served::locally) v.push_back(c);
    return v;
}

TEST_P(conformance_writes, writes_land_byte_exact) {
    const path_case& c = GetParam();
    std::string out = dir_ / "out.bin";
    const std::size_t n = (5u << 20) + 333;
    buffer buf(c.memory, n + 8);
    auto data = ferry::test::pattern(n, 0, 7);
    buf.from_host(3, data);
    {
        ferry::file f(out, ferry::open_mode::write, s_);
        EXPECT_EQ(f.write(buf.base() + 3, n, 4095), n);
        EXPECT_EQ(f.write_async(buf.base() + 3, 10, 0).get(), 10u);
        f.close();
    }
    auto back = ferry::test::read_whole(out);
    ASSERT_EQ(back.size(), n + 4095);
    EXPECT_TRUE(std::equal(data.begin(), data.begin() + 10, back.begin()));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), back.begin() + 4095));
}

TEST_P(conformance, concurrent_readers_of_one_file) {
    const path_case& c = GetParam();
    ferry::file f(path_, ferry::open_mode::read, s_);
    constexpr int readers = 8;
    const std::size_t each = file_size / readers;
    buffer buf(c.memory, file_size);
    ferry::test::thread_group threads;
    for (int i = 0; i < readers; ++i) threads.run([&, i] { f.read(buf.base() + i * each, each, i * each); });
    ASSERT_NO_THROW(threads.join());
    EXPECT_EQ(buf.to_host(0, file_size), ferry::test::pattern(file_size));
}

TEST_P(conformance, async_reads_complete_independently) {
    const path_case& c = GetParam();
    ferry::file f(path_, ferry::open_mode::read, s_);
    buffer buf(c.memory, file_size);
    std::vector<std::future<std::size_t>> futures;
    for (std::size_t off = 0; off < file_size; off += 3u << 20) {
        std::size_t len = std::min<std::size_t>(3u << 20, file_size - off);
        futures.push_back(f.read_async(buf.base() + off, len, off));
    }
    for (auto& fu : futures) fu.get();
    EXPECT_EQ(buf.to_host(0, file_size), ferry::test::pattern(file_size));
}

INSTANTIATE_TEST_SUITE_P(paths, conformance, ::testing::ValuesIn(cases),
                         [](const auto& info) { return std::string(info.param.name); });
INSTANTIATE_TEST_SUITE_P(paths, conformance_writes, ::testing::ValuesIn(writing_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
