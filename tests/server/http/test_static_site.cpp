// The playground's static files: media types by extension, ETags and 304s, the headers that
// keep the page to its own origin, and what load_playground reads (and refuses to).
#include "cube3d/server/http/static_site.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/server/http/playground.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace cube3d::http {
namespace test_static_site {

// An exchange that keeps its one answer.
class RecordingExchange final : public Exchange {
 public:
  explicit RecordingExchange(Request request) : request_(std::move(request)) {}
  const Request& request() const override { return request_; }
  void respond(Response response) override { answer = std::move(response); }
  void start_stream(Response, StreamOptions) override { ADD_FAILURE() << "no streams here"; }
  void write(std::string) override {}
  void end_stream() override {}
  void defer(std::function<void()> task) override { task(); }
  void on_finished(std::function<void(bool)> callback) override { callback(true); }

  std::optional<Response> answer;

 private:
  Request request_;
};

Response get(const StaticSite& site, const std::string& path, const Headers& headers = {}) {
  Request request;
  request.method = "GET";
  request.path = path;
  request.headers = headers;
  const StaticSite::File* file = site.find(path);
  EXPECT_NE(file, nullptr) << path;
  auto exchange = std::make_shared<RecordingExchange>(std::move(request));
  if (file) StaticSite::serve(*file, exchange);
  return exchange->answer.value_or(Response{});
}

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

// A stand-in for /usr/share/javascript/three with the files the playground loads.
std::string fake_three(testing::TempDir& dir) {
  for (const VendorFile& file : playground_vendor_files()) {
    dir.write(std::string("three/") + file.source, std::string("// ") + file.source);
  }
  return dir.path() + "/three";
}

TEST(Playground, ServesIndexAtTheRootEveryPageFileAndTheVendorFiles) {
  testing::TempDir dir;
  const std::string three = fake_three(dir);
  dir.write("page/index.html", "<!doctype html><title>p</title>");
  dir.write("page/app.js", "// app");
  dir.write("page/style.css", "body {}");
  dir.write("page/README.md", "not served");
  dir.write("page/.app.js.swp", "an editor's");
  dir.mkdirs("page/sub");
  dir.write("page/sub/deeper.js", "not served: the folder is flat");
  const StaticSite site = load_playground(dir.path() + "/page", three);
  std::vector<std::string> want = {"/", "/playground/app.js", "/playground/index.html",
                                   "/playground/style.css"};
  for (const VendorFile& file : playground_vendor_files()) want.push_back(file.url);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(site.paths(), want);
  EXPECT_EQ(get(site, "/").body, "<!doctype html><title>p</title>");
  EXPECT_EQ(get(site, "/playground/app.js").body, "// app");
  EXPECT_EQ(get(site, "/vendor/three/three.min.js").body, "// build/three.min.js");
  EXPECT_EQ(get(site, "/vendor/three/OrbitControls.js").headers.value_or("Content-Type"),
            "text/javascript; charset=utf-8");
}

TEST(Playground, WhatIsMissingIsNamedWithItsConfigKey) {
  testing::TempDir dir;
  const std::string three = fake_three(dir);
  dir.write("page/app.js", "// no index");
  testing::expect_error([&] { load_playground(dir.path() + "/page", three); }, ErrorCode::kNotFound,
                        std::vector<std::string>{"index.html", "http.playground_dir"});
  testing::expect_error([&] { load_playground(dir.path() + "/nothing", three); },
                        ErrorCode::kNotFound, std::vector<std::string>{"nothing"});
  dir.write("page/index.html", "<!doctype html>");
  testing::expect_error(
      [&] { load_playground(dir.path() + "/page", dir.path() + "/page"); }, ErrorCode::kNotFound,
      std::vector<std::string>{"three.min.js", "http.three_js_dir", "libjs-three"});
}

TEST(Playground, TheRepositorysPlaygroundLoadsWithDebiansThreeJs) {
  // What the server serves with http.playground on: the files of share/cube3d/playground and
  // libjs-three (scripts/setup.sh installs it).
  const StaticSite site = load_playground(
      std::string(CUBE3D_SOURCE_DIR) + "/share/cube3d/playground", "/usr/share/javascript/three");
  EXPECT_NE(site.find("/"), nullptr);
  EXPECT_GT(site.find("/vendor/three/three.min.js")->body.size(), 100'000u);
}

}  // namespace test_static_site
}  // namespace cube3d::http
