// NCCL loaded at run time: a missing library is a reason, not a crash; a real one (the
// nvidia-nccl wheel that torch installs, or the system's) gives its version and every symbol.
#include "shim/nccl.hpp"

#include <gtest/gtest.h>

#include <string>

#include "test_util.hpp"

namespace ferry::shim {
namespace {

TEST(nccl_shim, a_missing_library_is_a_reason) {
    nccl_api api{};
    nccl_state s = load_nccl("libferry-no-such-nccl.so.2", api);
    EXPECT_FALSE(s.loaded);
    EXPECT_NE(s.load_error.find("libferry-no-such-nccl.so.2"), std::string::npos) << s.load_error;
    EXPECT_EQ(api.broadcast, nullptr);
}

TEST(nccl_shim, a_library_without_the_symbols_is_refused) {
    nccl_api api{};
    nccl_state s = load_nccl("libc.so.6", api);
    EXPECT_FALSE(s.loaded);
    EXPECT_NE(s.load_error.find("ncclGetVersion"), std::string::npos) << s.load_error;
}

TEST(nccl_shim, a_real_library_gives_its_version_and_symbols) {
    nccl_api api{};
    nccl_state s = load_nccl("libnccl.so.2", api);
    if (!s.loaded) {
        std::string wheel = test::python_nccl_library();
        if (wheel.empty()) GTEST_SKIP() << "no libnccl.so.2 here: " << s.load_error;
        s = load_nccl(wheel, api);
    }
    ASSERT_TRUE(s.loaded) << s.load_error;
    EXPECT_GE(s.version, 20000);  // 2.x: major*10000 + minor*100 + patch
    EXPECT_FALSE(s.library_path.empty());
    EXPECT_NE(api.all_reduce, nullptr);
    EXPECT_STRNE(api.get_error_string(nccl_success), "");
}

}  // namespace
}  // namespace ferry::shim
