// Messages built from a file's bytes stay printable UTF-8 (escape_text, used by format_error).
#include "escape_text.hpp"

#include <gtest/gtest.h>

#include <string>

#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

TEST(escape_text, keeps_printable_utf8_and_escapes_the_rest) {
    EXPECT_EQ(escape_text("plain ASCII 123"), "plain ASCII 123");
    EXPECT_EQ(escape_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    EXPECT_EQ(escape_text(std::string("a\0b", 3)), "a\\x00b");
    EXPECT_EQ(escape_text("line\nnext\ttab\r"), "line\\nnext\\ttab\\r");
    EXPECT_EQ(escape_text("\x1b[31mred"), "\\x1b[31mred");
    EXPECT_EQ(escape_text("\x7f"), "\\x7f");
    EXPECT_EQ(escape_text("\xff\xfe"), "\\xff\\xfe");                   // never UTF-8
    EXPECT_EQ(escape_text("\xc3"), "\\xc3");                           // truncated sequence
    EXPECT_EQ(escape_text("\xc0\xaf"), "\\xc0\\xaf");                  // overlong '/'
    EXPECT_EQ(escape_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");         // surrogate
    EXPECT_EQ(escape_text("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
    EXPECT_EQ(escape_text("\xc2\x85"), "\\xc2\\x85");                  // C1 control (NEL)
    EXPECT_EQ(escape_text("abcdef", 3), "abc...");
    EXPECT_EQ(escape_text("abc", 3), "abc");
}

TEST(escape_text, is_utf8_follows_rfc_3629) {
    EXPECT_TRUE(is_utf8(""));
    EXPECT_TRUE(is_utf8("plain\n"));
    EXPECT_TRUE(is_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    EXPECT_FALSE(is_utf8("\xff\xfename"));
    EXPECT_FALSE(is_utf8("a\xc3"));            // truncated sequence
    EXPECT_FALSE(is_utf8("\xc0\xaf"));         // overlong '/'
    EXPECT_FALSE(is_utf8("\xed\xa0\x80"));     // surrogate (os.fsdecode's, encoded)
    EXPECT_FALSE(is_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
}

TEST(escape_text, format_errors_carry_no_raw_bytes) {
    format_error e("/d/x\xff.safetensors", "header", "invalid JSON: last read: '\"\x80\x01'");
    std::string what = e.what();
    EXPECT_EQ(what, "/d/x\\xff.safetensors: header: invalid JSON: last read: '\"\\x80\\x01'");
    EXPECT_EQ(e.reason(), "invalid JSON: last read: '\"\\x80\\x01'");
    EXPECT_EQ(e.file(), "/d/x\xff.safetensors");  // the path itself, to open it again
}

}  // namespace
}  // namespace ferry::detail
