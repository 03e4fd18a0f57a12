// What --version prints: the project version (CMakeLists.txt's project()) and the git revision of
// the source tree when the tool was built ("unknown" outside a git checkout). Both are plain text
// generated at build time (src/cli/version.cmake); no path of the build machine goes in.
#pragma once

#include <string>

namespace cube3d {

// "0.1.0"
const char* project_version();
// `git describe --always` of the source tree, "-dirty" when tracked files had changes; "unknown"
// without git.
const char* git_revision();
// "<tool> <version> (<git revision>)", e.g. "cube3d-server 0.1.0 (3f2a9c1-dirty)".
std::string version_text(const std::string& tool);

}  // namespace cube3d
