// The checkpoint globs (checkpoint/plan.cpp): ferry's own matcher for ASCII patterns must agree
// with fnmatch(3) in the C locale on every pattern and name, including the odd ones.
#include "checkpoint/plan.hpp"

#include <gtest/gtest.h>

#include <fnmatch.h>

#include <chrono>
#include <clocale>
#include <random>
#include <string>

namespace ferry::checkpoints {
namespace {

bool libc(const std::string& p, const std::string& n) { return ::fnmatch(p.c_str(), n.c_str(), 0) == 0; }

TEST(glob, matches_the_rules_users_write) {
    EXPECT_TRUE(glob_match("*.q_proj.*", "model.layers.3.self_attn.q_proj.weight"));
    EXPECT_FALSE(glob_match("*.q_proj.*", "model.layers.3.self_attn.k_proj.weight"));
    EXPECT_TRUE(glob_match("lm_head.weight", "lm_head.weight"));
    EXPECT_FALSE(glob_match("lm_head.weight", "lm_head.weights"));
    EXPECT_TRUE(glob_match("model.layers.[0-4].*", "model.layers.3.mlp.up_proj.weight"));
    EXPECT_FALSE(glob_match("model.layers.[!0-4].*", "model.layers.3.mlp.up_proj.weight"));
    EXPECT_TRUE(glob_match("*", ""));
    EXPECT_FALSE(glob_match("?", ""));
    EXPECT_TRUE(glob_match("a\\*b", "a*b"));
    EXPECT_FALSE(glob_match("a\\*b", "axb"));
}

TEST(glob, agrees_with_fnmatch_on_random_patterns) {
    std::mt19937 rng(7);
    const std::string name_chars = "ab.[]-!\\*?";
    auto pick = [&](const std::string& from, std::size_t max_len) {
        std::string s(std::uniform_int_distribution<std::size_t>(0, max_len)(rng), ' ');
        for (char& c : s) c = from[std::uniform_int_distribution<std::size_t>(0, from.size() - 1)(rng)];
        return s;
    };
    int checked = 0;
    for (int k = 0; k < 200000; ++k) {
        // Mostly without escapes: a pattern with one is fnmatch's own.
        std::string p = pick(k % 4 ? "ab.*?[]!^-" : "ab.*?[]!^-\\", 7), n = pick(name_chars, 8);
        ASSERT_EQ(glob_match(p, n), libc(p, n)) << "pattern '" << p << "' name '" << n << "'";
        ++checked;
    }
    EXPECT_EQ(checked, 200000);
}

TEST(glob, other_bytes_and_classes_are_fnmatch_s) {
    EXPECT_TRUE(glob_match("[[:digit:]]x", "7x"));
    EXPECT_FALSE(glob_match("[[:digit:]]x", "ax"));
    EXPECT_EQ(glob_match("caf\xc3\xa9.*", "caf\xc3\xa9.w"), libc("caf\xc3\xa9.*", "caf\xc3\xa9.w"));
}

}  // namespace
}  // namespace ferry::checkpoints
