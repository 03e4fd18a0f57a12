// Static files: media types by extension, ETags and 304s, the headers that keep a page to its
// own origin.
#include "cube3d/server/httpd/static_site.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "expect_error.h"
#include "server/httpd/static_site_get.h"
#include "temp_dir.h"

namespace cube3d::http {
namespace test_static_site {

using testing::get;

Headers if_none_match(const std::string& value) {
  Headers headers;
  headers.add("If-None-Match", value);
  return headers;
}

TEST(StaticSite, MediaTypesComeFromTheExtensionAndOnlyForWhatTheSiteServes) {
  EXPECT_EQ(site_media_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(site_media_type("/x/app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(site_media_type("style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(site_media_type("logo.svg"), "image/svg+xml");
  EXPECT_EQ(site_media_type("shot.png"), "image/png");
  EXPECT_EQ(site_media_type("notes.md"), "");
  EXPECT_EQ(site_media_type("Makefile"), "");
  EXPECT_EQ(site_media_type(".js"), "");            // a hidden file, not an extension
  EXPECT_EQ(site_media_type("dir.js/readme"), "");  // the folder's dot does not count
}

TEST(StaticSite, ServesTheBodyWithItsTypeAnEtagAndTheSitesHeaders) {
  StaticSite site;
  site.add("/", "<!doctype html>", "text/html; charset=utf-8");
  const Response r = get(site, "/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "<!doctype html>");
  EXPECT_EQ(r.headers.value_or("Content-Type"), "text/html; charset=utf-8");
  const std::string etag = r.headers.value_or("ETag");
  ASSERT_EQ(etag.size(), 34u) << etag;
  EXPECT_EQ(etag.front(), '"');
  EXPECT_EQ(etag.back(), '"');
  EXPECT_EQ(r.headers.value_or("Cache-Control"), "no-cache");
  EXPECT_EQ(r.headers.value_or("Content-Security-Policy"), kSiteContentSecurityPolicy);
  EXPECT_EQ(r.headers.value_or("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(r.headers.value_or("X-Frame-Options"), "DENY");
  EXPECT_EQ(r.headers.value_or("Referrer-Policy"), "no-referrer");
  // The policy allows no inline script, and no script or fetch from another origin.
  EXPECT_EQ(kSiteContentSecurityPolicy.find("unsafe"), std::string_view::npos);
  EXPECT_EQ(kSiteContentSecurityPolicy.find("*"), std::string_view::npos);

  site.add("/other", "<!doctype html><p>", "text/html; charset=utf-8");
  EXPECT_NE(get(site, "/other").headers.value_or("ETag"), etag);
  EXPECT_EQ(site.find("/missing"), nullptr);
  EXPECT_EQ(site.paths(), (std::vector<std::string>{"/", "/other"}));
  EXPECT_EQ(site.total_bytes(), 15 + 18);
}

TEST(StaticSite, IfNoneMatchAnswers304WithoutABody) {
  StaticSite site;
  site.add("/app.js", "console.log(1);", "text/javascript; charset=utf-8");
  const std::string etag = get(site, "/app.js").headers.value_or("ETag");
  for (const std::string& header : std::vector<std::string>{etag, "W/" + etag, "\"other\", " + etag,
                                                            "*", " \"a\" ,\tW/" + etag + " "}) {
    const Response r = get(site, "/app.js", if_none_match(header));
    EXPECT_EQ(r.status, 304) << header;
    EXPECT_EQ(r.body, "") << header;
    EXPECT_EQ(r.headers.value_or("ETag"), etag) << header;
    EXPECT_FALSE(r.headers.has("Content-Type")) << header;
  }
  for (const std::string& header : {std::string("\"other\""), etag.substr(1), std::string("")}) {
    EXPECT_EQ(get(site, "/app.js", if_none_match(header)).status, 200) << header;
  }
}

TEST(StaticSite, AddFileReadsTheFileAndRefusesTypesItDoesNotServe) {
  testing::TempDir dir;
  const std::string js = dir.write("a.js", "let a = 1;");
  const std::string md = dir.write("a.md", "# notes");
  StaticSite site;
  site.add_file("/a.js", js, "test file");
  EXPECT_EQ(get(site, "/a.js").body, "let a = 1;");
  testing::expect_error([&] { site.add_file("/a.md", md, "test file"); },
                        ErrorCode::kInvalidArgument,
                        std::vector<std::string>{md, "test file", "not a file type"});
  testing::expect_error([&] { site.add_file("/b.js", dir.path() + "/b.js", "test file"); },
                        ErrorCode::kNotFound, std::vector<std::string>{"b.js"});
  testing::expect_error([&] { site.add_file("/a.js", js, "test file", 4); },
                        ErrorCode::kInvalidArgument, std::vector<std::string>{js});
}

}  // namespace test_static_site
}  // namespace cube3d::http
