#include "formats/atomic_write.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string_view>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/settings.hpp"
#include "ferry/stop.hpp"
#include "os/fault_hook.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

int entries(const std::string& dir) {
    int n = 0;
    for (auto& e : std::filesystem::directory_iterator(dir)) (void)e, ++n;
    return n;
}

TEST(atomic_write, replaces_on_commit) {
    test::temp_dir dir;
    std::string target = dir / "t.bin";
    std::ofstream(target) << "old";
    ::chmod(target.c_str(), 0640);
    {
        formats::atomic_write w(target);
        EXPECT_EQ(entries(dir.path()), 2);
        EXPECT_EQ(std::filesystem::path(w.temp_path()).parent_path(), dir.path());
        w.file().write("new!", 4, 0);
        EXPECT_EQ(test::read_whole(target), (std::vector<std::uint8_t>{'o', 'l', 'd'}));
        w.commit();
    }
    EXPECT_EQ(test::read_whole(target), (std::vector<std::uint8_t>{'n', 'e', 'w', '!'}));
    EXPECT_EQ(entries(dir.path()), 1);
    struct stat st{};
    ASSERT_EQ(::stat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(atomic_write, read_only_target) {
    test::temp_dir dir;
    std::string target = dir / "ro.bin";
    std::ofstream(target) << "old";
    ::chmod(target.c_str(), 0444);
    {
        formats::atomic_write w(target);
        w.file().write("new", 3, 0);
        w.commit();
    }
    EXPECT_EQ(test::read_whole(target), (std::vector<std::uint8_t>{'n', 'e', 'w'}));
    struct stat st{};
    ASSERT_EQ(::stat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0444u);
}

TEST(atomic_write, failure_keeps_the_old_file) {
    test::temp_dir dir;
    std::string target = dir / "t.bin";
    std::ofstream(target) << "old";
    try {
        formats::atomic_write w(target);
        w.file().write("partial", 7, 0);
        throw std::runtime_error("interrupted");
    } catch (const std::runtime_error&) {
    }
    EXPECT_EQ(test::read_whole(target), (std::vector<std::uint8_t>{'o', 'l', 'd'}));
    EXPECT_EQ(entries(dir.path()), 1);
}

TEST(atomic_write, new_file_and_errors) {
    test::temp_dir dir;
    {
        formats::atomic_write w(dir / "new.bin");
        w.commit();
    }
    EXPECT_TRUE(std::filesystem::exists(dir / "new.bin"));
    EXPECT_THROW(formats::atomic_write(dir / "missing/x.bin"), system_error);
    EXPECT_THROW(formats::atomic_write(dir.path()), system_error);
}

// Counts the writeback hints a save gives; with `refuse`, fails each of them with EINVAL, as a
// file system without sync_file_range does.
struct hint_counter {
    static inline std::atomic<int> calls{0};
    static inline std::atomic<bool> refuse{false};
    static int hook(const char* call, std::size_t*) {
        if (std::string_view(call) != "sync_file_range") return 0;
        ++calls;
        if (!refuse) return 0;
        errno = EINVAL;
        return -1;
    }
    explicit hint_counter(bool refuse_all) {
        calls = 0;
        refuse = refuse_all;
        sys::hook = &hook;
    }
    ~hint_counter() { sys::hook = nullptr; }
};

// Pieces out of order, one across two 128 MiB stretches and a gap left as a hole: the file
// holds each piece at its offset, and writeback was started while the requests finished.
std::vector<std::uint8_t> save_pieces(const std::string& target, bool refuse, int& hints) {
    std::vector<std::uint8_t> big((136u << 20) + 12345), small(4099), head(77);
    std::iota(big.begin(), big.end(), std::uint8_t{1});
    std::iota(small.begin(), small.end(), std::uint8_t{7});
    std::iota(head.begin(), head.end(), std::uint8_t{200});
    const std::uint64_t big_at = 4096 + 77, small_at = big_at + big.size() + 100;
    {
        hint_counter counter(refuse);
        formats::atomic_write w(target);
        w.write({{small.data(), small.size(), small_at}, {big.data(), big.size(), big_at}, {head.data(), 77, 0},
                 {nullptr, 0, 5}});
        w.commit();
        hints = hint_counter::calls;
    }
    std::vector<std::uint8_t> want(small_at + small.size(), 0);
    std::copy(head.begin(), head.end(), want.begin());
    std::copy(big.begin(), big.end(), want.begin() + static_cast<std::ptrdiff_t>(big_at));
    std::copy(small.begin(), small.end(), want.begin() + static_cast<std::ptrdiff_t>(small_at));
    return want;
}

TEST(atomic_write, pieces_land_at_their_offsets_with_writeback_started_early) {
    test::temp_dir dir;
    std::string target = dir / "pieces.bin";
    int hints = 0;
    auto want = save_pieces(target, false, hints);
    EXPECT_TRUE(test::read_whole(target) == want) << "the saved bytes differ";
    // Requests end at 128 MiB, at the end of the big piece and at the end of the small one:
    // each moves the written prefix past a new page, so each starts writeback.
    EXPECT_GE(hints, 3);
    EXPECT_EQ(entries(dir.path()), 1);
}

TEST(atomic_write, a_refused_writeback_hint_changes_nothing_but_speed) {
    test::temp_dir dir;
    std::string target = dir / "pieces.bin";
    int hints = 0;
    auto want = save_pieces(target, true, hints);
    EXPECT_TRUE(test::read_whole(target) == want) << "the saved bytes differ";
    EXPECT_EQ(hints, 1) << "a file system that refuses the hint is asked once per save";
}

// Counts the bytes a save hands to pwrite and the writeback hints it gives; asks the save to
// stop at its first pwrite.
struct stop_at_first_write {
    static inline std::atomic<std::uint64_t> bytes{0};
    static inline std::atomic<int> hints{0};
    static inline const stop_source* stop = nullptr;
    static int hook(const char* call, std::size_t* n) {
        const std::string_view c(call);
        if (c == "sync_file_range") ++hints;
        if (c == "pwrite" && n) {
            bytes += *n;
            stop->request_stop();
        }
        return 0;
    }
    explicit stop_at_first_write(const stop_source& s) {
        bytes = 0;
        hints = 0;
        stop = &s;
        sys::hook = &hook;
    }
    ~stop_at_first_write() { sys::hook = nullptr; }
};

// A stopped save ends after the piece of a write in flight (4 MiB), not after the task it is
// part of (32 MiB here), gives no writeback hint, and leaves neither file nor temporary name.
TEST(atomic_write, a_stopped_save_ends_after_the_piece_in_flight) {
    const settings saved = settings::global();
    settings one = saved;
    one.threads = 1;  // one writer: the bytes moved after the stop are one piece
    settings::set_global(one);
    test::temp_dir dir;
    std::vector<std::uint8_t> big(256u << 20, 1);
    stop_source stop;
    {
        stop_at_first_write counter(stop);
        stop_scope scope(stop);
        EXPECT_THROW(
            {
                formats::atomic_write w(dir / "big.bin");
                w.write({{big.data(), big.size(), 0}});
                w.commit();
            },
            interrupted_error);
    }
    settings::set_global(saved);
    EXPECT_LE(stop_at_first_write::bytes.load(), 4u << 20);
    EXPECT_EQ(stop_at_first_write::hints.load(), 0);
    EXPECT_EQ(entries(dir.path()), 0);
}

}  // namespace
}  // namespace ferry
