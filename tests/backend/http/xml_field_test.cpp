// The one reader of S3's and STS's XML answers: first field, bounded fields, entities.
#include "backend/http/xml_field.hpp"

#include <gtest/gtest.h>

namespace ferry::detail {
namespace {

TEST(xml_field, reads_the_first_field_decoded) {
    const std::string body =
        "<Error><Code>NoSuchKey</Code><Message>a &amp; b &lt;c&gt; &#233;&#x20AC;</Message></Error>";
    EXPECT_EQ(xml_field(body, "Code"), "NoSuchKey");
    EXPECT_EQ(xml_field(body, "Message"), "a & b <c> \xC3\xA9\xE2\x82\xAC");
    EXPECT_EQ(xml_field(body, "Missing"), "");
    EXPECT_EQ(xml_field("<Code>open", "Code"), "");
}

TEST(xml_field, stays_inside_the_given_range) {
    const std::string body = "<Contents><Key>a</Key></Contents><Contents><Size>3</Size></Contents>";
    const auto second = body.find("<Contents>", 1);
    EXPECT_EQ(xml_field(body, "Key", second), "");
    EXPECT_EQ(xml_field(body, "Size", 0, second), "");
    EXPECT_EQ(xml_field(body, "Size", second), "3");
}

}  // namespace
}  // namespace ferry::detail
