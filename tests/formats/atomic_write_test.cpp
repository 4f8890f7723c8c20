#include "formats/atomic_write.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "ferry/error.hpp"
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

}  // namespace
}  // namespace ferry
