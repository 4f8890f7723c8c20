// S3's own object checksums: which headers give a usable full-object value, and the tally that
// checks reads once they tile the object (in any order, with repeats), naming both values.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "backend/http/object_checksum.hpp"
#include "ferry/integrity.hpp"
#include "integrity/crc32c.hpp"

namespace ferry::detail {
namespace {

using headers = std::map<std::string, std::string>;

TEST(object_checksum, full_object_values_are_taken_composite_ones_are_not) {
    std::string why;
    // crc32c("123456789") = 0xE3069283, base64 of its big-endian bytes.
    auto c = parse_object_checksum(headers{{"x-amz-checksum-crc32c", "4waSgw=="}}, "\"abc\"", why);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->alg, "crc32c");
    EXPECT_EQ(c->value, 0xE3069283u);
    EXPECT_TRUE(why.empty());
    EXPECT_FALSE(parse_object_checksum(headers{}, "\"abc\"", why));
    EXPECT_TRUE(why.empty());
    EXPECT_FALSE(parse_object_checksum(headers{{"x-amz-checksum-crc32c", "4waSgw==-3"}}, "\"abc\"", why));
    EXPECT_NE(why.find("multipart"), std::string::npos) << why;
    EXPECT_FALSE(parse_object_checksum(headers{{"x-amz-checksum-crc32c", "4waSgw=="}}, "\"abc-2\"", why));
    EXPECT_NE(why.find("multipart"), std::string::npos) << why;
    EXPECT_TRUE(parse_object_checksum(
        headers{{"x-amz-checksum-crc32c", "4waSgw=="}, {"x-amz-checksum-type", "FULL_OBJECT"}}, "\"abc-2\"", why));
    EXPECT_FALSE(parse_object_checksum(headers{{"x-amz-checksum-crc32c", "4wa!gw=="}}, "", why));
    EXPECT_NE(why.find("base64"), std::string::npos) << why;
    EXPECT_FALSE(parse_object_checksum(headers{{"x-amz-checksum-sha256", "x"}}, "", why));
    EXPECT_NE(why.find("sha256"), std::string::npos) << why;
}

TEST(object_checksum, reads_that_tile_the_object_are_checked_once) {
    const std::string data = "123456789";
    checksum_tally ok({"crc32c", 0xE3069283u}, data.size(), "s3://b/k");
    auto add = [&](checksum_tally& t, std::size_t at, std::size_t n) { t.add(at, n, t.hash(data.data() + at, n)); };
    add(ok, 4, 5);   // out of order
    add(ok, 4, 5);   // again
    add(ok, 0, 2);
    EXPECT_NO_THROW(add(ok, 2, 2));  // completes the tiling: matches
    checksum_tally bad({"crc32c", 0xE3069282u}, data.size(), "s3://b/k");
    add(bad, 0, 3);
    add(bad, 5, 4);
    try {
        add(bad, 3, 2);
        FAIL() << "a mismatch was not reported";
    } catch (const integrity_error& e) {
        EXPECT_EQ(e.file(), "s3://b/k");
        EXPECT_EQ(e.expected(), "crc32c:e3069282");
        EXPECT_EQ(e.actual(), "crc32c:e3069283");
        EXPECT_EQ(e.end(), data.size());
        EXPECT_NE(std::string(e.what()).find("x-amz-checksum-crc32c"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(add(bad, 3, 2));  // reported once
}

#ifdef FERRY_HAVE_ZLIB
TEST(object_checksum, crc32_is_zlibs) {
    const std::string data = "123456789";
    checksum_tally t({"crc32", 0xCBF43926u}, data.size(), "s3://b/k");  // the catalogue's CRC-32
    t.add(0, 4, t.hash(data.data(), 4));
    EXPECT_NO_THROW(t.add(4, 5, t.hash(data.data() + 4, 5)));
}
#endif

}  // namespace
}  // namespace ferry::detail
