// Regressions the settings fuzzer (tests/fuzz/settings_fuzz.cpp) found.
#include <gtest/gtest.h>

#include "ferry/error.hpp"
#include "ferry/settings.hpp"

namespace ferry {
namespace {

// A value that fails its range check must leave the settings as they were (the strong
// guarantee), so that code which catches the error and goes on does not run with it.
// (FERRY_TASK_SIZE=100, FERRY_STAGING_BUFFER_SIZE=18 and FERRY_STAGING_MEMORY_LIMIT=1K were once
// stored, then refused.)
TEST(settings_regression, a_refused_value_leaves_the_settings_unchanged) {
    const std::pair<const char*, const char*> bad[] = {
        {"FERRY_TASK_SIZE", "100"},
        {"FERRY_STAGING_BUFFER_SIZE", "18"},
        {"FERRY_STAGING_MEMORY_LIMIT", "1K"},
    };
    for (auto [name, value] : bad) {
        settings s;
        EXPECT_THROW(apply_setting(s, name, value), settings_error) << name;
        settings fresh;
        EXPECT_EQ(s.task_size, fresh.task_size) << name << "=" << value;
        EXPECT_EQ(s.staging_buffer_size, fresh.staging_buffer_size) << name << "=" << value;
        EXPECT_EQ(s.staging_memory_limit, fresh.staging_memory_limit) << name << "=" << value;
    }
}

// What holds today and must keep holding: the error names the variable and the value.
TEST(settings_regression, a_refused_value_names_the_variable) {
    settings s;
    try {
        apply_setting(s, "FERRY_STAGING_BUFFER_SIZE", "18");
        FAIL() << "accepted";
    } catch (const settings_error& e) {
        EXPECT_EQ(e.variable(), "FERRY_STAGING_BUFFER_SIZE");
        EXPECT_NE(std::string(e.what()).find("18"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace ferry
