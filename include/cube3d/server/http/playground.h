// The browser playground (http.playground): its page, script and style from
// share/cube3d/playground/ and three.js from Debian's libjs-three, read once at start into a
// StaticSite and served by the HTTP front door at
//   GET /                         index.html (its query, "/?prompt=...", is the page's own)
//   GET /playground/<name>        every file directly in the playground folder
//   GET /vendor/three/<name>      three.min.js, GLTFLoader.js, OBJLoader.js, PLYLoader.js,
//                                 OrbitControls.js (the UMD builds of three r111)
// No CDN: the page works offline and within the site's Content-Security-Policy (static_site.h).
#pragma once

#include <string>
#include <vector>

#include "cube3d/server/httpd/static_site.h"

namespace cube3d::http {

// The three.js files the page loads, relative to http.three_js_dir, and where they are served.
struct VendorFile {
  const char* source;  // "build/three.min.js"
  const char* url;     // "/vendor/three/three.min.js"
};
const std::vector<VendorFile>& playground_vendor_files();

// Where the playground's files are when http.playground_dir is not set: share/cube3d/playground
// beside the executable's folder (bin/../share/...: the installed layout, the images', and the
// build tree's, where CMake copies share/). Throws not_found naming what it looked for.
std::string default_playground_dir();

// Reads the playground: every file directly in `playground_dir` that the site serves by type
// (index.html required; other names skipped), and the vendor files from `three_js_dir`. Throws
// not_found / invalid_argument naming the file and the config key (http.playground_dir,
// http.three_js_dir) when one is missing or unreadable.
StaticSite load_playground(const std::string& playground_dir, const std::string& three_js_dir);

}  // namespace cube3d::http
