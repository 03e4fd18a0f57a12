# Install rules: `cmake --install <build> --prefix P` (--strip to strip our binaries) lays out
#   P/bin/                  the tools that were built (cube3d-server, cube3d-client, ...), with
#                           RUNPATH $ORIGIN/../lib
#   P/lib/                  every shared library they need at run time that no Debian package
#                           provides: libtorch's from the torch wheel and, for a CUDA wheel, the
#                           CUDA libraries its RPATH reaches (site-packages/nvidia/*/lib, or the
#                           CUDA toolkit the build linked cudart from), plus those torch and cuDNN
#                           load by name (Cube3dInstallRuntimeLibs.cmake)
#   P/share/cube3d/         CLIP's BPE vocabulary (the tools look in ../share/cube3d/)
#   P/share/cube3d/models/  the model and server YAMLs of models/
#   P/share/cube3d/scripts/ scripts/fetch_models.py and the module it imports, beside models/ as
#                           in the checkout (it reads ../models/ of its own folder): the
#                           Kubernetes weights Job copies both folders out of the image
#                           (deploy/k8s/weights/job-fetch.yaml) and runs them with Python
#   P/share/cube3d/playground/  the browser playground's page (http.playground; three.js comes
#                           from Debian's libjs-three, a runtime package)
# The Debian libraries the binaries need (gRPC, protobuf, spdlog, ...) are the runtime package
# list's: docker/runtime-packages.txt. docker/Dockerfile installs the tree to /opt/cube3d, and
# scripts/image_smoke.sh (ctest image.rootfs_smoke) checks that it runs on a bare Debian.
# Included at the end of the top-level CMakeLists.txt, once every target exists.

set(cube3d_install_tools cube3d-server cube3d-client cube3d-loadgen cube3d-generate
                         cube3d-tokenize cube3d-bench)
set(cube3d_installed_tools)
set(cube3d_installed_files)
foreach(tool IN LISTS cube3d_install_tools)
  if(TARGET ${tool})
    list(APPEND cube3d_installed_tools ${tool})
    list(APPEND cube3d_installed_files "$<TARGET_FILE:${tool}>")
  endif()
endforeach()
# The build tree keeps its absolute RUNPATH (torch's site-packages); the installed copies find
# their libraries beside them, wherever the prefix is.
set_target_properties(${cube3d_installed_tools} PROPERTIES INSTALL_RPATH "$ORIGIN/../lib")
# OPTIONAL: a build of some targets only (e.g. --target cube3d-server cube3d-client) installs
# those.
install(TARGETS ${cube3d_installed_tools} RUNTIME DESTINATION bin OPTIONAL)

# The libraries, resolved at install time from the build tree's binaries (their RUNPATH still
# points at the wheel), then the vocabulary, checked first for a clear message.
set(cube3d_clip_vocab_file ${CMAKE_SOURCE_DIR}/.cache/clip/bpe_simple_vocab_16e6.txt.gz)
install(CODE "
  set(CUBE3D_INSTALL_BINARIES \"${cube3d_installed_files}\")
  set(CUBE3D_TORCH_LIB_DIR \"${TORCH_ROOT}/lib\")
  set(CUBE3D_TORCH_HAS_CUDA ${CUBE3D_TORCH_HAS_CUDA})
  set(CUBE3D_CLIP_VOCAB_FILE \"${cube3d_clip_vocab_file}\")")
install(SCRIPT ${CMAKE_CURRENT_LIST_DIR}/Cube3dInstallRuntimeLibs.cmake)
install(FILES ${cube3d_clip_vocab_file} DESTINATION share/cube3d)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/models/ DESTINATION share/cube3d/models
        FILES_MATCHING PATTERN "*.yaml")
install(FILES ${CMAKE_SOURCE_DIR}/scripts/fetch_models.py
              ${CMAKE_SOURCE_DIR}/scripts/make_random_checkpoint.py
        DESTINATION share/cube3d/scripts)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/share/cube3d/ DESTINATION share/cube3d)
