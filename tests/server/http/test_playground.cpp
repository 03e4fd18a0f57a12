// The playground: what load_playground reads (and refuses to), and serves.
#include "cube3d/server/http/playground.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "expect_error.h"
#include "server/httpd/static_site_get.h"
#include "temp_dir.h"

namespace cube3d::http {
namespace test_playground {

using testing::get;

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

}  // namespace test_playground
}  // namespace cube3d::http
