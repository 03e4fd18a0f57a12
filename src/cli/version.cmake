# Writes cube3d_cli_version.h, the text behind cube3d/cli/version.h: the project version and the
# git revision of the source tree. CMakeLists.txt runs it at every build (target
# cube3d_version_header), so a new commit shows without a re-configure; the file is rewritten only
# when its text changes, so an unchanged revision rebuilds nothing.
#   cmake -DSOURCE_DIR=<source tree> -DOUTPUT=<header> -DVERSION=<x.y.z> -P version.cmake
# Only the revision text goes into the header, never a path (scripts/check_layering.py checks the
# shipped binaries for the source tree's path).
set(revision "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always
    WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE described RESULT_VARIABLE failed
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT failed AND NOT described STREQUAL "")
    set(revision "${described}")
    # Not `git describe --dirty`: it refreshes and rewrites .git/index, which races a `git add`
    # or commit running at the same time; this status only reads.
    execute_process(COMMAND ${GIT_EXECUTABLE} --no-optional-locks status --porcelain
      --untracked-files=no
      WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE changes RESULT_VARIABLE failed ERROR_QUIET)
    if(NOT failed AND NOT changes STREQUAL "")
      string(APPEND revision "-dirty")
    endif()
  endif()
endif()
string(CONCAT text "// Generated at build time by src/cli/version.cmake: do not edit.\n"
  "#define CUBE3D_VERSION \"${VERSION}\"\n#define CUBE3D_GIT_REVISION \"${revision}\"\n")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
