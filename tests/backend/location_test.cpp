// A location parsed once: its parts, and the one redaction rule every message uses.
#include "backend/location.hpp"

#include <gtest/gtest.h>

#include "ferry/file.hpp"

namespace ferry::detail {
namespace {

TEST(location, a_plain_path_has_no_scheme_and_is_all_path) {
    for (const char* p : {"/data/x.bin", "relative/x.bin", "odd dir://x", "://x", "/a/b?c#d"}) {
        location l{std::string(p)};
        EXPECT_FALSE(l.is_url()) << p;
        EXPECT_EQ(l.scheme(), "") << p;
        EXPECT_EQ(l.registry_scheme(), "file") << p;
        EXPECT_EQ(l.path(), p);
        EXPECT_EQ(l.query(), "") << p;
        EXPECT_EQ(l.shown(), p) << "a path is shown as given";
    }
}

TEST(location, a_url_splits_into_scheme_authority_path_and_query) {
    location l("HTTPS://user:pw@host:8/a/b?x=1&y=2#frag");
    EXPECT_TRUE(l.is_url());
    EXPECT_EQ(l.scheme(), "https");
    EXPECT_EQ(l.registry_scheme(), "https");
    EXPECT_EQ(l.authority(), "user:pw@host:8");
    EXPECT_EQ(l.host(), "host");
    EXPECT_EQ(l.path(), "/a/b");
    EXPECT_EQ(l.query(), "x=1&y=2");
    EXPECT_EQ(location("file:///data/x.bin").registry_scheme(), "file");
    EXPECT_EQ(location("s3://b/k?v").rest(), "b/k?v") << "an S3 key may hold '?'";
    EXPECT_EQ(location("http://[::1]:8080/a").host(), "[::1]");
    EXPECT_EQ(location("http://h?x=1").path(), "");
    EXPECT_EQ(location("http://h?x=1").query(), "x=1");
    EXPECT_EQ(location("HTTP://u:p@h:8/a?b").origin(), "HTTP://h:8");
    EXPECT_EQ(location("/a/b").origin(), "");
    for (const char* none : {"http://", "http:///a.npy", "http://:80/a", "http://u@/a"})
        EXPECT_EQ(location(none).host(), "") << none;
}

TEST(location, shown_hides_userinfo_and_credential_parameters_only) {
    EXPECT_EQ(location("https://user:pw@host:8/a/b?x=1").shown(), "https://host:8/a/b?x=1");
    std::string presigned =
        location("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F1&X-Amz-Date=1"
                 "&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Security-Token=tok&X-Amz-Signature=abc123")
            .shown();
    EXPECT_EQ(presigned.find("AKIA"), std::string::npos) << presigned;
    EXPECT_EQ(presigned.find("abc123"), std::string::npos) << presigned;
    EXPECT_EQ(presigned.find("=tok"), std::string::npos) << presigned;
    EXPECT_NE(presigned.find("X-Amz-Expires=60"), std::string::npos) << presigned;
    EXPECT_EQ(location("https://user:secret@host/x?X-Amz-Signature=abc").shown(),
              "https://host/x?X-Amz-Signature=REDACTED");
    EXPECT_EQ(location("https://h/p?sig=s3cr3t&sv=1").shown(), "https://h/p?sig=REDACTED&sv=1");
    EXPECT_EQ(location("https://h/p#frag").shown(), "https://h/p");
    EXPECT_EQ(location("https://h/p?").shown(), "https://h/p?");
    EXPECT_EQ(location("s3://b/k?token=t").shown(), "s3://b/k?token=REDACTED");
}

TEST(location, the_public_redaction_is_the_same_rule) {
    for (const char* l : {"/plain/path?x", "https://u:p@h/a?X-Amz-Signature=s&v=1", "s3://b/k"})
        EXPECT_EQ(ferry::redact_location(l), location(l).shown()) << l;
}

}  // namespace
}  // namespace ferry::detail
