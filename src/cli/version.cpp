#include "cube3d/cli/version.h"

// Generated into the build folder at every build (src/cli/version.cmake); only this file
// includes it, so that a new revision recompiles one small file.
#include "cube3d_cli_version.h"

namespace cube3d {

const char* project_version() { return CUBE3D_VERSION; }

const char* git_revision() { return CUBE3D_GIT_REVISION; }

std::string version_text(const std::string& tool) {
  return tool + " " + project_version() + " (" + git_revision() + ")";
}

}  // namespace cube3d
