# Install-time half of Cube3dInstall.cmake (install(SCRIPT)): copies into <prefix>/lib every
# shared library the installed binaries need that is not a Debian package's, i.e. the closure of
# their NEEDED entries as the dynamic loader resolves them (RUNPATH, then each library's RPATH,
# then ldconfig's folders), less what resolves under /lib or /usr/lib. With the torch wheel that
# is libtorch, libc10 and the wheel's libgomp, and for a CUDA wheel (PyPI's torch==2.11.0 is
# CUDA 13) also the CUDA libraries of site-packages/nvidia/*/lib: even libtorch_cpu needs
# libcudart and libcupti. Set by install(CODE) before this runs:
#   CUBE3D_INSTALL_BINARIES  the build tree's binaries (those that exist are the installed ones)
#   CUBE3D_TORCH_LIB_DIR     site-packages/torch/lib
#   CUBE3D_TORCH_HAS_CUDA    ON for a CUDA wheel
#   CUBE3D_CLIP_VOCAB_FILE   CLIP's BPE vocabulary (scripts/setup.sh fetches it)
# The copies keep their own RPATHs: each has $ORIGIN in it, so they find one another in lib/
# (the wheel's other entries, ../../nvidia/..., point nowhere there and are skipped).

if(NOT EXISTS "${CUBE3D_CLIP_VOCAB_FILE}")
  message(FATAL_ERROR "install: no CLIP vocabulary at ${CUBE3D_CLIP_VOCAB_FILE} (every model "
                      "needs it, the demo's too): run scripts/setup.sh, which fetches it")
endif()

set(binaries)
foreach(binary IN LISTS CUBE3D_INSTALL_BINARIES)
  if(EXISTS "${binary}")
    list(APPEND binaries "${binary}")
  endif()
endforeach()
if(NOT binaries)
  message(FATAL_ERROR "install: none of the tools is built (${CUBE3D_INSTALL_BINARIES}): build "
                      "at least cube3d-server and cube3d-client first")
endif()

# Loaded with dlopen by name, so no NEEDED entry leads to them; for a CUDA wheel only: ATen's
# NVRTC stub (runtime-compiled kernels) and its linear algebra (cuSOLVER, MAGMA), from torch/lib;
# cuDNN's sub-libraries and NVRTC's builtins, from the folders their front libraries resolve in.
set(plugins)
if(CUBE3D_TORCH_HAS_CUDA)
  foreach(name libcaffe2_nvrtc.so libtorch_cuda_linalg.so)
    if(EXISTS "${CUBE3D_TORCH_LIB_DIR}/${name}")
      list(APPEND plugins "${CUBE3D_TORCH_LIB_DIR}/${name}")
    endif()
  endforeach()
endif()

# The folders Debian's packages put libraries in; anything else is ours to carry. Except the
# NVIDIA driver's own libraries (libcuda: ATen's NVRTC stub links it), which come from the host
# at run time (the NVIDIA container toolkit mounts them), never from an image.
set(system_dirs "^/(usr/)?lib(32|64|x32)?/")
set(driver_libs "^libcuda\\.so" "^libnvidia-")

# Resolves the closure into `out` (real paths, no duplicates). Two copies of one library name in
# different folders (e.g. libcudart.so.13 from the CUDA toolkit the build linked and from the
# wheel) are a conflict: the wheel's is taken, being what torch was built and tested with.
function(cube3d_runtime_closure out report)
  file(GET_RUNTIME_DEPENDENCIES
    EXECUTABLES ${binaries}
    LIBRARIES ${plugins}
    RESOLVED_DEPENDENCIES_VAR resolved
    UNRESOLVED_DEPENDENCIES_VAR unresolved
    CONFLICTING_DEPENDENCIES_PREFIX conflict
    PRE_EXCLUDE_REGEXES ${driver_libs}
    POST_EXCLUDE_REGEXES "${system_dirs}")
  if(unresolved)
    message(FATAL_ERROR "install: the binaries need libraries that are not found: ${unresolved}")
  endif()
  get_filename_component(site "${CUBE3D_TORCH_LIB_DIR}/../.." REALPATH)
  set(chosen_ones)
  foreach(name IN LISTS conflict_FILENAMES)
    set(candidates)
    foreach(path IN LISTS conflict_${name})
      get_filename_component(real "${path}" REALPATH)
      list(APPEND candidates "${real}")
    endforeach()
    list(REMOVE_DUPLICATES candidates)
    list(GET candidates 0 chosen)
    foreach(candidate IN LISTS candidates)
      if(candidate MATCHES "^${site}/")
        set(chosen "${candidate}")
        break()
      endif()
    endforeach()
    list(LENGTH candidates count)
    if(report AND count GREATER 1)
      message(STATUS "install: ${name} is found in ${count} places (${candidates}): taking "
                     "${chosen}")
    endif()
    list(APPEND chosen_ones "${chosen}")
  endforeach()
  # One file per name, the name the loader asks for (the conflicts' choices first).
  set(names)
  set(libraries)
  foreach(path IN LISTS chosen_ones resolved plugins)
    get_filename_component(real "${path}" REALPATH)
    get_filename_component(name "${path}" NAME)
    list(FIND names "${name}" seen)  # (no IN_LIST: cmake_install.cmake runs with old policies)
    if(seen EQUAL -1)
      list(APPEND names "${name}")
      list(APPEND libraries "${real}|${name}")
    endif()
  endforeach()
  set(${out} "${libraries}" PARENT_SCOPE)
endfunction()

# (The conflicts are reported by the last pass only.)
if(CUBE3D_TORCH_HAS_CUDA)
  cube3d_runtime_closure(libraries OFF)
else()
  cube3d_runtime_closure(libraries ON)
endif()
# The dlopen'd siblings of cuDNN and NVRTC, then the closure again with them as inputs.
if(CUBE3D_TORCH_HAS_CUDA)
  foreach(entry IN LISTS libraries)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 real)
    list(GET parts 1 name)
    get_filename_component(dir "${real}" DIRECTORY)
    if(name MATCHES "^libcudnn\\.so\\.")
      file(GLOB siblings "${dir}/libcudnn_*.so.*")
      list(APPEND plugins ${siblings})
    elseif(name MATCHES "^libnvrtc\\.so\\.")
      file(GLOB siblings "${dir}/libnvrtc-builtins.so.*")
      list(APPEND plugins ${siblings})
    endif()
  endforeach()
  cube3d_runtime_closure(libraries ON)
endif()

set(destination "${CMAKE_INSTALL_PREFIX}/lib")
set(total 0)
foreach(entry IN LISTS libraries)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 real)
  list(GET parts 1 name)
  # Under the name the loader asks for (the NEEDED soname), whatever the file is called.
  file(INSTALL DESTINATION "${destination}" TYPE PROGRAM RENAME "${name}" FILES "${real}")
  file(SIZE "${real}" size)
  math(EXPR total "${total} + ${size}")
endforeach()
list(LENGTH libraries count)
math(EXPR total "${total} / 1048576")
message(STATUS "install: ${count} runtime libraries (${total} MiB) into ${destination}")
