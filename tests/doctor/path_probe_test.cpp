// The per-path probes: file system, mount, block device, udev record, O_DIRECT, page cache.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <vector>

#include "doctor/mount_table.hpp"
#include "doctor/path_probe.hpp"
#include "doctor_test_util.hpp"

namespace ferry::doctor {
namespace {

using testing::scratch_dir;

/// Whether this kernel lets the file's file system open it with O_DIRECT, asked directly.
bool direct_open_works(const std::string& file) {
    int fd = ::open(file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) return false;
    ::close(fd);
    return true;
}

bool is_tmpfs(const std::string& path) {
    struct statfs s {};
    return ::statfs(path.c_str(), &s) == 0 && static_cast<unsigned long>(s.f_type) == 0x01021994;
}

TEST(PathProbe, BuildDisk) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    const std::size_t size = 3 << 20;
    std::string file = dir.write_file("data.bin", size);
    json p = probe_path(file, "libcufile.so.0");
    EXPECT_EQ(p["exists"], true);
    EXPECT_EQ(p["type"], "file");
    EXPECT_EQ(p["size_bytes"], size);

    struct statfs sfs {};
    ASSERT_EQ(::statfs(file.c_str(), &sfs), 0);
    char magic[16];
    std::snprintf(magic, sizeof magic, "0x%lx", static_cast<unsigned long>(sfs.f_type));
    EXPECT_EQ(p["filesystem"]["magic"], magic);
    ASSERT_TRUE(p["filesystem"]["type"].is_string());
    EXPECT_TRUE(p["filesystem"]["mount_point"].is_string());
    EXPECT_TRUE(p["filesystem"]["mount_options"].is_string());
    if (p["filesystem"]["type"] == "ext4") EXPECT_TRUE(p["filesystem"]["ext4_data_mode"].is_string());

    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0);
    if (::major(st.st_dev) != 0) {
        ASSERT_TRUE(p["block_device"].is_object());
        EXPECT_EQ(p["block_device"]["device"],
                  std::to_string(::major(st.st_dev)) + ":" + std::to_string(::minor(st.st_dev)));
        std::string record = "/run/udev/data/b" + std::to_string(::major(st.st_dev)) + ":" +
                             std::to_string(::minor(st.st_dev));
        EXPECT_EQ(p["udev"]["record"], record);
        EXPECT_EQ(p["udev"]["exists"], ::access(record.c_str(), F_OK) == 0);
    }

    const json& d = p["direct_io"];
    EXPECT_EQ(d["probe"], "file");
    // Some file systems accept the O_DIRECT open and refuse the I/O: the probe says so.
    if (d["read_probe"] == "failed")
        EXPECT_EQ(d["supported"], false);
    else
        EXPECT_EQ(d["supported"], direct_open_works(file)) << d.dump();
    if (d["supported"] == true) {
        auto mem = d["memory_alignment"].get<std::size_t>();
        auto off = d["offset_alignment"].get<std::size_t>();
        EXPECT_TRUE(mem > 0 && (mem & (mem - 1)) == 0) << mem;
        EXPECT_TRUE(off >= 512 && (off & (off - 1)) == 0) << off;
        EXPECT_TRUE(d["alignment_source"] == "statx" || d["alignment_source"] == "default");
        EXPECT_EQ(d["read_probe"], "ok");
    }
    EXPECT_EQ(p["page_cache"]["bytes"], size);
    EXPECT_EQ(p["page_cache"]["files"], 1);
    EXPECT_EQ(p["cufile_register"]["attempted"].is_boolean(), true);
}

TEST(PathProbe, PageCacheResidencyFollowsTheCache) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    if (is_tmpfs(dir.path())) GTEST_SKIP() << "the build directory is on tmpfs, which is never evicted";
    const std::size_t size = 4 << 20;
    std::string file = dir.write_file("cache.bin", size);
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    // Written and synced pages are clean, so DONTNEED drops them.
    ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    json cold = probe_page_cache(file, false);
    std::vector<char> buf(size);
    ASSERT_EQ(::pread(fd, buf.data(), size, 0), static_cast<ssize_t>(size));
    ::close(fd);
    json hot = probe_page_cache(file, false);
    EXPECT_EQ(hot["resident_bytes"], size);
    EXPECT_DOUBLE_EQ(hot["resident_fraction"].get<double>(), 1.0);
    EXPECT_LT(cold["resident_bytes"].get<std::uint64_t>(), size);
    EXPECT_EQ(hot["complete"], true);
}

TEST(PathProbe, TmpfsHasNoBlockDevice) {
    if (!is_tmpfs("/dev/shm")) GTEST_SKIP() << "/dev/shm is not tmpfs here";
    scratch_dir dir("/dev/shm");
    ASSERT_TRUE(dir.ok());
    std::string file = dir.write_file("shm.bin", 1 << 20);
    json p = probe_path(file, "libcufile.so.0");
    EXPECT_EQ(p["filesystem"]["type"], "tmpfs");
    EXPECT_EQ(p["filesystem"]["magic"], "0x1021994");
    EXPECT_TRUE(p["block_device"].is_null());
    EXPECT_TRUE(p["udev"].is_null());
    // tmpfs refused O_DIRECT before Linux 6.6 and accepts it since: the probe must agree with
    // what this kernel does, either way.
    if (p["direct_io"]["read_probe"] != "failed")
        EXPECT_EQ(p["direct_io"]["supported"], direct_open_works(file)) << p["direct_io"].dump();
    EXPECT_EQ(p["page_cache"]["resident_bytes"], 1u << 20);  // tmpfs data lives in the cache

    json d = probe_path(dir.path(), "libcufile.so.0");
    EXPECT_EQ(d["type"], "directory");
    EXPECT_EQ(d["direct_io"]["probe"], "temporary file");
    EXPECT_EQ(d["direct_io"]["supported"], p["direct_io"]["supported"]) << d["direct_io"].dump();
    EXPECT_EQ(d["page_cache"]["files"], 1);
}

TEST(PathProbe, DirectoryProbeLeavesNothingBehind) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    json d = probe_direct_io(dir.path(), true);
    EXPECT_TRUE(d["supported"].is_boolean()) << d.dump();
    EXPECT_TRUE(list_directory(dir.path()).empty());
}

TEST(PathProbe, MissingPath) {
    json p = probe_path("/nonexistent/ferry/doctor", "libcufile.so.0");
    EXPECT_EQ(p["exists"], false);
    EXPECT_NE(p["error"].get<std::string>().find("ENOENT"), std::string::npos);
    EXPECT_TRUE(p["filesystem"].is_null());
}

TEST(PathProbe, FilesystemNames) {
    EXPECT_EQ(filesystem_name(0xEF53), "ext2/ext3/ext4");
    EXPECT_EQ(filesystem_name(0x58465342), "xfs");
    EXPECT_EQ(filesystem_name(0x01021994), "tmpfs");
    EXPECT_EQ(filesystem_name(0x12345678), "");
}

TEST(MountTable, ParsesOptionalFieldsAndEscapes) {
    std::string text =
        "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard,data=writeback\n"
        "30 24 0:27 / /mnt/my\\040data rw,nosuid master:2 propagate_from:3 - tmpfs tmpfs rw,size=4k\n"
        "garbage line\n";
    auto m = parse_mountinfo(text);
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m[0].id, 27u);
    EXPECT_EQ(m[0].major, 254u);
    EXPECT_EQ(m[0].fs_type, "ext4");
    EXPECT_EQ(m[0].source, "/dev/vda");
    EXPECT_EQ(mount_option(m[0].super_options, "data"), "writeback");
    EXPECT_EQ(m[1].mount_point, "/mnt/my data");
    EXPECT_EQ(m[1].fs_type, "tmpfs");
    EXPECT_EQ(m[1].mount_options, "rw,nosuid");
    EXPECT_FALSE(mount_option(m[1].super_options, "data").has_value());
}

TEST(MountTable, FindsTheMountOfTheRoot) {
    auto m = find_mount("/");
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->mount_point, "/");
}

TEST(UdevRecord, ReadsFsUsage) {
    // probe_udev_record reads /run/udev/data; a device number that cannot exist has no record.
    json u = probe_udev_record(4095, 1048575);
    EXPECT_EQ(u["exists"], false);
    EXPECT_EQ(u["record"], "/run/udev/data/b4095:1048575");
    EXPECT_TRUE(u["id_fs_usage"].is_null());
}

}  // namespace
}  // namespace ferry::doctor
