#include "ferry/ferry.hpp"
#include "test_util.hpp"

TEST(smoke, host_round_trip) {
    ferry::test::temp_dir d;
    auto data = ferry::test::pattern(5 << 20);
    {
        ferry::file f(d / "a.bin", ferry::open_mode::write);
        f.write(data.data(), data.size(), 0);
    }
    ferry::file f(d / "a.bin");
    std::vector<std::uint8_t> back(data.size());
    f.read(back.data(), back.size(), 0);
    EXPECT_EQ(back, data);
}
